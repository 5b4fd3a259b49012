// Rank 0's front desk: accepts control connections and reads their requests on a thread of its
// own, several at once, so that an idle, slow or hostile peer, or a long command, never keeps
// another client from being heard.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "control_channel.hpp"

namespace ddstage::detail {

/// An authenticated request and the connection to answer it on.
struct ControlRequest {
  Message message;
  ControlConnection connection;
};

/// How much the front desk gives peers that have not sent a complete request yet.
struct ControlServerLimits {
  /// Connections being read at once; when a new one comes and this many wait, the oldest that
  /// has not proved it holds the token within eviction_grace is dropped (a peer that has proved
  /// it cannot be pushed out). Younger peers are kept up to 4 x max_pending.
  std::size_t max_pending = 32;
  /// From accept to a complete header (token included): what an idle or one-byte-a-second
  /// peer gets. A real client sends its whole request right after connecting.
  std::chrono::milliseconds header_timeout{3000};
  /// From accept to a complete request, for a peer whose token was right.
  std::chrono::milliseconds request_timeout{10000};
  /// How long a peer may take from connect to its token before newer peers can push it out
  /// (below 4 x max_pending): a real client sends its request at once, but a loaded machine can
  /// deschedule it between connect() and its first write while a flood of newcomers arrives.
  std::chrono::milliseconds eviction_grace{1000};
};

class ControlServer {
 public:
  /// Called on the front desk's thread for every authenticated request, with `busy` true while
  /// one handed out by next() still runs: a reply to send at once (a heartbeat, a status), or
  /// nullopt to queue the request for next().
  using FrontAnswer = std::function<std::optional<Message>(const Message& request, bool busy)>;

  /// Called first, on the front desk's thread, for every authenticated request: true when it
  /// took the request (moved it out) to answer elsewhere, such as a pool of its own.
  using Divert = std::function<bool(ControlRequest& request)>;

  /// Listens on `listen` (see ControlListener) and starts reading requests. Only requests
  /// whose header carries `token` are read beyond their header.
  ControlServer(const std::string& listen, std::string token, FrontAnswer answer,
                ControlServerLimits limits = {}, Divert divert = {});
  ControlServer(const ControlServer&) = delete;
  ControlServer& operator=(const ControlServer&) = delete;

  /// See ControlListener::address.
  const std::string& address() const noexcept { return m_listener.address(); }

  /// The oldest queued request, waiting up to timeout for one. From then until done(), the
  /// server is busy (see FrontAnswer).
  std::optional<ControlRequest> next(std::chrono::milliseconds timeout);
  void done();

 private:
  void run(const std::stop_token& stop);
  void hand_over(ControlRequest request);

  ControlListener m_listener;
  std::string m_token;
  FrontAnswer m_answer;
  ControlServerLimits m_limits;
  Divert m_divert;
  std::mutex m_mutex;
  std::condition_variable m_ready;
  std::deque<ControlRequest> m_queue;
  bool m_busy = false;
  std::jthread m_thread;  // last: starts once everything it uses is set, stops first
};

}  // namespace ddstage::detail
