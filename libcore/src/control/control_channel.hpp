// Rank 0's control socket: length-prefixed YAML messages over TCP.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include <yaml-cpp/yaml.h>

#include "ddstage/file_descriptor.hpp"

namespace ddstage::detail {

/// A control message: a YAML map, framed on the wire as a 4-byte little-endian length and the
/// YAML text. Requests carry "token" and "op"; replies carry "ok" and, when false, "error".
using Message = YAML::Node;

/// Largest frame accepted; a bigger length prefix is an error, not an allocation.
inline constexpr uint32_t max_message_bytes = 16u << 20;

/// One accepted or connected TCP stream (non-blocking underneath; every call has a deadline).
class ControlConnection {
 public:
  explicit ControlConnection(FileDescriptor fd, std::string peer)
      : m_fd(std::move(fd)), m_peer(std::move(peer)) {}
  /// Reads one message; Error on timeout, a closed peer, an oversized or unparsable frame, or a
  /// frame that is not a YAML map. After an error the stream is out of step: drop the connection.
  Message receive(std::chrono::milliseconds timeout);
  /// Writes one message; Error when the peer is gone or does not take it within timeout (a
  /// client that stops reading must not stall rank 0).
  void send(const Message& message, std::chrono::milliseconds timeout = std::chrono::seconds(10));
  const std::string& peer() const noexcept { return m_peer; }

 private:
  FileDescriptor m_fd;
  std::string m_peer;
};

/// A listening TCP socket.
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
  /// Waits up to timeout for a connection; nullopt when none came.
  std::optional<ControlConnection> accept(std::chrono::milliseconds timeout);

 private:
  FileDescriptor m_fd;
  std::string m_address;
};

/// Connects to address, sends request, returns the reply; bounded by timeout overall (except
/// name resolution, which the resolver bounds). Error naming the address when nothing listens
/// there or the reply does not come in time.
Message control_request(const std::string& address, const Message& request,
                        std::chrono::milliseconds timeout);

/// As control_request, for requests the server answers with interim messages first (those
/// carrying "progress", e.g. a load's): each goes to on_interim, and the reply is the first
/// message without "progress". The timeout bounds the wait for each message, not the whole
/// exchange, so a long operation that keeps reporting does not time out.
Message control_request(const std::string& address, const Message& request, std::chrono::milliseconds timeout,
                        const std::function<void(const Message&)>& on_interim);

}  // namespace ddstage::detail
