#include "control_server.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>
#include <vector>

#include <spdlog/spdlog.h>

#include "control_messages.hpp"
#include "ddstage/error.hpp"

namespace ddstage::detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

/// How often the thread looks at its stop token when no peer does anything.
constexpr milliseconds idle_poll(100);

/// A connection whose request is not complete yet.
struct Pending {
  explicit Pending(ControlConnection c, const ControlServerLimits& limits)
      : connection(std::move(c)),
        accepted(Clock::now()),
        deadline(accepted + limits.header_timeout),
        request_by(accepted + limits.request_timeout) {}

  ControlConnection connection;
  Clock::time_point accepted;
  Clock::time_point deadline;
  Clock::time_point request_by;
  FrameHeaderBytes header{};
  std::size_t header_done = 0;
  bool speaks_protocol = false;  ///< its header decoded: worth an answer when refused
  bool authenticated = false;
  std::string body;  ///< sized only once the token was right
  std::size_t body_done = 0;
  bool gone = false;  ///< handed over or dropped: to be removed from the list
};

/// Reads what the socket holds into dest; true once dest is full. Error when the peer closed
/// or the socket failed.
bool read_some(int fd, std::span<std::byte> dest, std::size_t& done) {
  while (done < dest.size()) {
    const ssize_t n = ::recv(fd, dest.data() + done, dest.size() - done, 0);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n == 0) {
      throw Error(ErrorKind::runtime, "closed the connection before a complete request");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      return false;
    } else if (errno != EINTR) {
      throw IoError("recv", errno);
    }
  }
  return true;
}

/// Moves p on as far as its bytes allow; the request once complete. Error when the peer is to
/// be dropped (UsageError: its token was wrong).
std::optional<Message> step(Pending& p, const std::string& token) {
  const int fd = p.connection.fd();
  // The log line and the refusal name the peer already.
  const std::string peer = "the peer";
  if (!p.authenticated) {
    if (!read_some(fd, p.header, p.header_done)) return std::nullopt;
    const FrameHeader header = decode_header(p.header, peer);
    p.speaks_protocol = true;
    // The token before the length: a peer without it gets nothing read beyond these bytes.
    if (!same_token(header.token, token)) throw UsageError("wrong or missing store token");
    check_length(header.length, peer);
    p.authenticated = true;
    p.deadline = p.request_by;
    p.body.assign(header.length, '\0');
  }
  if (!read_some(fd, std::as_writable_bytes(std::span(p.body)), p.body_done)) return std::nullopt;
  return decode_body(p.body, peer);
}

/// Logs refused and dropped peers, at most one line a second: a flood must not fill the log.
class DropLog {
 public:
  void note(const std::string& peer, const Error& e) {
    const auto now = Clock::now();
    if (now - m_last < std::chrono::seconds(1)) {
      ++m_quiet;
      return;
    }
    const std::string more =
        m_quiet ? " (and " + std::to_string(m_quiet) + " more refused or dropped before)" : "";
    if (e.kind() == ErrorKind::usage) {
      spdlog::warn("refused a control request from {}: {}{}", peer, e.what(), more);
    } else {
      spdlog::warn("dropped a control connection from {}: {}{}", peer, e.what(), more);
    }
    m_last = now;
    m_quiet = 0;
  }

 private:
  Clock::time_point m_last{};
  uint64_t m_quiet = 0;
};

/// The connections being read, oldest first, and what to do with each in turn. Only the front
/// desk's thread touches it.
class FrontDesk {
 public:
  FrontDesk(ControlListener& listener, const std::string& token, const ControlServerLimits& limits,
            std::function<void(ControlRequest)> hand_over)
      : m_listener(listener), m_token(token), m_limits(limits), m_hand_over(std::move(hand_over)) {}

  /// Waits (at most idle_poll) for something to do, and does it.
  void turn() {
    m_fds.assign(1, pollfd{m_listener.fd(), POLLIN, 0});
    for (const auto& p : m_pending) m_fds.push_back({p.connection.fd(), POLLIN, 0});
    if (::poll(m_fds.data(), m_fds.size(), poll_timeout_ms()) < 0) {
      if (errno != EINTR) throw IoError("poll on the control connections", errno);
      return;
    }
    const auto now = Clock::now();
    for (std::size_t i = 0; i < m_pending.size(); ++i) {
      Pending& p = m_pending[i];
      p.gone = m_fds[i + 1].revents != 0 && !advance(p);
      if (!p.gone && now >= p.deadline) {
        m_log.note(p.connection.peer(), Error(ErrorKind::runtime, "no complete request in time"));
        p.gone = true;
      }
    }
    std::erase_if(m_pending, [](const Pending& p) { return p.gone; });
    if (m_fds[0].revents != 0) accept_batch();
  }

 private:
  /// Moves p on; false when it leaves the list (handed over, or dropped).
  bool advance(Pending& p) {
    try {
      auto message = step(p, m_token);
      if (!message) return true;
      m_hand_over({std::move(*message), std::move(p.connection)});
    } catch (const Error& e) {
      m_log.note(p.connection.peer(), e);
      if (p.speaks_protocol) {
        auto refusal = ErrorRecord::of(e);
        refusal.text = "refused: " + refusal.text;
        p.connection.send_now(error_reply(refusal));
      }
    }
    return false;
  }

  /// Accepts a bounded batch, so that a flood of connections leaves time for reading.
  void accept_batch() {
    for (std::size_t n = 0; n < m_limits.max_pending; ++n) {
      auto connection = m_listener.accept();
      if (!connection) return;
      m_pending.emplace_back(std::move(*connection), m_limits);
      // A real client has sent its request by now: read it before a flood can push it out.
      if (!advance(m_pending.back())) {
        m_pending.pop_back();
        continue;
      }
      if (m_pending.size() > m_limits.max_pending) drop_one();
    }
  }

  /// Past max_pending, the oldest peer that has not shown the token within eviction_grace goes:
  /// idle and slowloris peers age out first. Younger peers are kept up to 4 x max_pending, as a
  /// real client descheduled between connect() and its request (a loaded node) is young too,
  /// and a flood of newcomers must not push it out within the few ms it takes to write; past
  /// that the oldest unproven peer goes whatever its age, else the newest (token holders whose
  /// bodies are on the way): the bound holds either way.
  void drop_one() {
    const auto now = Clock::now();
    const bool full = m_pending.size() > 4 * m_limits.max_pending;
    auto victim = std::find_if(m_pending.begin(), m_pending.end(), [&](const Pending& p) {
      return !p.authenticated && (full || now - p.accepted >= m_limits.eviction_grace);
    });
    if (victim == m_pending.end()) {
      if (!full) return;
      victim = std::prev(m_pending.end());
    }
    m_log.note(victim->connection.peer(),
               Error(ErrorKind::runtime, "too many connections waiting; dropped the oldest"));
    m_pending.erase(victim);
  }

  int poll_timeout_ms() const {
    auto wait = idle_poll;
    const auto now = Clock::now();
    for (const auto& p : m_pending) {
      wait = std::min(
          wait, std::chrono::ceil<milliseconds>(std::max(p.deadline - now, Clock::duration(0))));
    }
    return static_cast<int>(wait.count());
  }

  ControlListener& m_listener;
  const std::string& m_token;
  const ControlServerLimits& m_limits;
  std::function<void(ControlRequest)> m_hand_over;
  std::vector<Pending> m_pending;
  std::vector<pollfd> m_fds;
  DropLog m_log;
};

}  // namespace

ControlServer::ControlServer(const std::string& listen, std::string token, FrontAnswer answer,
                             ControlServerLimits limits, Divert divert)
    : m_listener(listen),
      m_token(std::move(token)),
      m_answer(std::move(answer)),
      m_limits(limits),
      m_divert(std::move(divert)),
      m_thread([this](std::stop_token stop) { run(stop); }) {}

std::optional<ControlRequest> ControlServer::next(milliseconds timeout) {
  std::unique_lock lock(m_mutex);
  if (!m_ready.wait_for(lock, timeout, [this] { return !m_queue.empty(); })) return std::nullopt;
  ControlRequest request = std::move(m_queue.front());
  m_queue.pop_front();
  m_busy = true;
  return request;
}

void ControlServer::done() {
  std::lock_guard lock(m_mutex);
  m_busy = false;
}

void ControlServer::hand_over(ControlRequest request) {
  if (m_divert && m_divert(request)) return;
  bool busy = false;
  {
    std::lock_guard lock(m_mutex);
    busy = m_busy;
  }
  std::optional<Message> reply;
  if (m_answer) {
    try {
      reply = m_answer(request.message, busy);
    } catch (const std::exception& e) {
      // It has its turn later, where a bad request gets its error reply.
      spdlog::warn("could not answer {} at once: {}", request.connection.peer(), e.what());
    }
    if (reply) {
      // A small reply on a fresh connection: the socket buffer takes it at once.
      if (!request.connection.send_now(*reply)) {
        spdlog::warn("could not answer {} at once", request.connection.peer());
      }
      return;
    }
  }
  {
    std::lock_guard lock(m_mutex);
    m_queue.push_back(std::move(request));
  }
  m_ready.notify_one();
}

void ControlServer::run(const std::stop_token& stop) {
  FrontDesk desk(m_listener, m_token, m_limits,
                 [this](ControlRequest r) { hand_over(std::move(r)); });
  while (!stop.stop_requested()) {
    try {
      desk.turn();
    } catch (const std::exception& e) {
      // Out of memory or descriptors, say: rank 0 goes on serving what it has, and retries.
      spdlog::error("control socket: {}", e.what());
      std::this_thread::sleep_for(idle_poll);
    }
  }
}

}  // namespace ddstage::detail
