// Rank 0's control socket: TCP streams carrying control frames (control_frame.hpp), with a
// deadline on every wait.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "control_frame.hpp"
#include "ddstage/tool/file_descriptor.hpp"

namespace ddstage::detail {

/// One accepted TCP stream, non-blocking underneath: the server's side of a request.
class ControlConnection {
 public:
  explicit ControlConnection(FileDescriptor fd, std::string peer)
      : m_fd(std::move(fd)), m_peer(std::move(peer)) {}
  /// Writes one reply; Error when the peer is gone or does not take it within timeout (a
  /// client that stops reading must not stall rank 0).
  void send(const Message& message, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  /// Writes one reply if the socket takes all of it at once, without waiting: for answers to
  /// peers that are not trusted to read. False when it did not go.
  bool send_now(const Message& message) noexcept;
  const std::string& peer() const noexcept { return m_peer; }
  int fd() const noexcept { return m_fd.get(); }

 private:
  FileDescriptor m_fd;
  std::string m_peer;
};

/// A listening TCP socket (non-blocking).
class ControlListener {
 public:
  /// Binds "HOST[:PORT]" or "[IPV6][:PORT]" (port 0 or none: any free port; empty HOST: this
  /// host's name, or 127.0.0.1 with a warning when that does not resolve).
  /// UsageError for a malformed address or a host that does not resolve, IoError when binding
  /// fails.
  explicit ControlListener(const std::string& listen);
  /// "HOST:PORT" actually bound, as clients should connect to it: the numeric address (IPv6 in
  /// brackets), or this host's name when bound to the wildcard address.
  const std::string& address() const noexcept { return m_address; }
  /// For poll(): readable when a connection waits.
  int fd() const noexcept { return m_fd.get(); }
  /// A waiting connection, or nullopt when none waits. IoError when accept fails otherwise
  /// (e.g. out of descriptors).
  std::optional<ControlConnection> accept();

 private:
  FileDescriptor m_fd;
  std::string m_address;
};

/// What a rank beside rank 0 binds its own control socket to, given rank 0's control address:
/// this host's address on the route to rank 0 (the one rank 0 reaches it by: loopback when rank
/// 0 listens on loopback), any port. UsageError when rank 0's host does not resolve, IoError
/// when no route leads there.
std::string listen_beside(const std::string& rank0_control);

/// Connects to address, sends request with the store's token, returns the reply; bounded by
/// timeout overall (except name resolution, which the resolver bounds). Error naming the
/// address when nothing listens there or the reply does not come in time.
Message control_request(const std::string& address, std::string_view token, const Message& request,
                        std::chrono::milliseconds timeout);

/// As control_request, for requests the server answers with interim messages first (those
/// carrying "progress", e.g. a load's): each goes to on_interim, and the reply is the first
/// message without "progress". The timeout bounds the wait for each message, not the whole
/// exchange, so a long operation that keeps reporting does not time out.
Message control_request(const std::string& address, std::string_view token, const Message& request,
                        std::chrono::milliseconds timeout,
                        const std::function<void(const Message&)>& on_interim);

}  // namespace ddstage::detail
