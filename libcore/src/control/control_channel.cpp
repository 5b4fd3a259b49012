#include "control_channel.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstring>
#include <memory>
#include <span>

#include <spdlog/spdlog.h>

#include "control_messages.hpp"
#include "ddstage/error.hpp"
#include "ddstage/tool/host_name.hpp"

namespace ddstage::detail {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr int listen_backlog = 64;

/// When an operation must be done by, and the budget it started with (for error messages).
struct Deadline {
  explicit Deadline(milliseconds timeout)
      : at(Clock::now() + std::max(timeout, milliseconds(0))), budget(timeout) {}

  /// Milliseconds left, rounded up so poll never spins with 0 while time remains.
  int remaining_ms() const {
    auto left = std::chrono::ceil<milliseconds>(at - Clock::now()).count();
    return static_cast<int>(std::clamp<decltype(left)>(left, 0, INT_MAX));
  }

  Clock::time_point at;
  milliseconds budget;
};

Error timed_out(const Deadline& deadline, const std::string& doing) {
  return Error(ErrorKind::runtime, "control request timed out after " +
                                       std::to_string(deadline.budget.count()) + " ms " + doing);
}

/// Waits until fd is ready for events (or in error: the next call reports it); false when the
/// deadline passes first. Once the deadline is past it still looks once, without waiting.
bool wait_ready(int fd, short events, const Deadline& deadline) {
  for (;;) {
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, deadline.remaining_ms());
    if (rc > 0) return true;
    if (rc == 0) return false;
    if (errno != EINTR) throw IoError("poll", errno);
  }
}

void read_exact(int fd, std::span<std::byte> dest, const Deadline& deadline,
                const std::string& peer) {
  std::size_t done = 0;
  while (done < dest.size()) {
    ssize_t n = ::recv(fd, dest.data() + done, dest.size() - done, 0);
    if (n > 0) {
      done += static_cast<std::size_t>(n);
    } else if (n == 0) {
      throw Error(ErrorKind::runtime, peer + " closed the control connection");
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(fd, POLLIN, deadline)) throw timed_out(deadline, "waiting for " + peer);
    } else if (errno != EINTR) {
      throw IoError("recv from " + peer, errno);
    }
  }
}

void write_all(int fd, std::span<const std::byte> src, const Deadline& deadline,
               const std::string& peer) {
  std::size_t done = 0;
  while (done < src.size()) {
    // MSG_NOSIGNAL: a peer that went away is an EPIPE error here, not a SIGPIPE for the process.
    ssize_t n = ::send(fd, src.data() + done, src.size() - done, MSG_NOSIGNAL);
    if (n >= 0) {
      done += static_cast<std::size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (!wait_ready(fd, POLLOUT, deadline)) throw timed_out(deadline, "sending to " + peer);
    } else if (errno != EINTR) {
      throw IoError("send to " + peer, errno);
    }
  }
}

/// Reads one reply frame. Replies carry no token (see encode_frame), so only the magic, the
/// version and the length are checked.
Message read_reply(int fd, const Deadline& deadline, const std::string& peer) {
  FrameHeaderBytes header{};
  read_exact(fd, header, deadline, peer);
  const uint32_t length = decode_header(header, peer).length;
  check_length(length, peer);
  std::string text(length, '\0');
  read_exact(fd, std::as_writable_bytes(std::span(text)), deadline, peer);
  return decode_body(text, peer);
}

struct HostPort {
  std::string host;
  std::string port;  ///< digits, or empty when the address has none
};

/// Splits "HOST[:PORT]", "[IPV6][:PORT]" or a bare IPv6 address (which has no port).
HostPort split_address(const std::string& address) {
  HostPort out;
  std::string rest;
  if (!address.empty() && address.front() == '[') {
    auto close = address.find(']');
    if (close == std::string::npos) {
      throw UsageError("bad address '" + address + "': no closing ']'");
    }
    out.host = address.substr(1, close - 1);
    rest = address.substr(close + 1);
    if (!rest.empty() && rest.front() != ':') throw UsageError("bad address '" + address + "'");
  } else if (auto colon = address.rfind(':');
             colon != std::string::npos && address.find(':') == colon) {
    out.host = address.substr(0, colon);
    rest = address.substr(colon);
  } else {
    out.host = address;
  }
  if (rest.empty()) return out;
  out.port = rest.substr(1);
  const bool digits = !out.port.empty() && out.port.size() <= 5 &&
                      out.port.find_first_not_of("0123456789") == std::string::npos;
  if (!digits || std::stoi(out.port) > 65535) {
    throw UsageError("bad port in address '" + address + "'");
  }
  return out;
}

std::string join_address(const std::string& host, const std::string& port) {
  return host.find(':') == std::string::npos ? host + ":" + port : "[" + host + "]:" + port;
}

struct AddrInfoDeleter {
  void operator()(addrinfo* list) const noexcept { ::freeaddrinfo(list); }
};
using AddrInfoList = std::unique_ptr<addrinfo, AddrInfoDeleter>;

AddrInfoList resolve(const std::string& host, const std::string& port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* list = nullptr;
  if (int rc = ::getaddrinfo(host.c_str(), port.c_str(), &hints, &list); rc != 0) {
    throw UsageError("cannot resolve host '" + host + "': " + ::gai_strerror(rc));
  }
  return AddrInfoList(list);
}

/// Where an empty --listen binds: the host name's address, so other nodes can reach it.
AddrInfoList resolve_listen_host(const std::string& host, const std::string& port) {
  if (!host.empty()) return resolve(host, port);
  const std::string name = host_name();
  try {
    return resolve(name, port);
  } catch (const UsageError& e) {
    spdlog::warn(
        "{}; the control socket listens on 127.0.0.1, so only this host can reach the store",
        e.message());
    return resolve("127.0.0.1", port);
  }
}

/// "ADDRESS:PORT" of a socket address, numeric.
std::string numeric_address(const sockaddr* addr, socklen_t length) {
  std::array<char, NI_MAXHOST> host{};
  std::array<char, NI_MAXSERV> port{};
  if (int rc = ::getnameinfo(addr, length, host.data(), host.size(), port.data(), port.size(),
                             NI_NUMERICHOST | NI_NUMERICSERV);
      rc != 0) {
    throw Error(ErrorKind::runtime, std::string("getnameinfo: ") + ::gai_strerror(rc));
  }
  return join_address(host.data(), port.data());
}

bool is_wildcard(const sockaddr_storage& addr) {
  if (addr.ss_family == AF_INET) {
    return reinterpret_cast<const sockaddr_in&>(addr).sin_addr.s_addr == htonl(INADDR_ANY);
  }
  return addr.ss_family == AF_INET6 &&
         IN6_IS_ADDR_UNSPECIFIED(&reinterpret_cast<const sockaddr_in6&>(addr).sin6_addr);
}

/// The address clients should use: a wildcard bind (0.0.0.0, ::) is reached through the host name.
std::string advertised_address(int fd) {
  sockaddr_storage addr{};
  socklen_t length = sizeof addr;
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &length) != 0) {
    throw IoError("getsockname", errno);
  }
  const std::string numeric = numeric_address(reinterpret_cast<sockaddr*>(&addr), length);
  if (!is_wildcard(addr)) return numeric;
  return join_address(host_name(), numeric.substr(numeric.rfind(':') + 1));
}

FileDescriptor open_socket(const addrinfo& ai, const std::string& what) {
  int raw = ::socket(ai.ai_family, ai.ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai.ai_protocol);
  if (raw < 0) throw IoError("socket for " + what, errno);
  return FileDescriptor(raw, what);
}

/// Binds and listens on the first resolved address that allows it.
FileDescriptor bind_first(const addrinfo* list, const std::string& listen) {
  int last_errno = EADDRNOTAVAIL;
  for (const addrinfo* ai = list; ai; ai = ai->ai_next) {
    auto fd = open_socket(*ai, "control socket " + listen);
    // A restarted server must get its --listen port back while old connections sit in TIME_WAIT.
    int one = 1;
    if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
      throw IoError("setsockopt SO_REUSEADDR on " + listen, errno);
    }
    if (::bind(fd.get(), ai->ai_addr, ai->ai_addrlen) == 0 &&
        ::listen(fd.get(), listen_backlog) == 0) {
      return fd;
    }
    last_errno = errno;
  }
  throw IoError("cannot listen on '" + listen + "'", last_errno);
}

/// Connects to one resolved address by the deadline; an empty descriptor and err set on failure.
FileDescriptor connect_one(const addrinfo& ai, const std::string& address, const Deadline& deadline,
                           int& err) {
  auto fd = open_socket(ai, "control connection " + address);
  // Non-blocking, so an unreachable host costs the deadline, not the kernel's minutes of SYN
  // retries.
  if (::connect(fd.get(), ai.ai_addr, ai.ai_addrlen) == 0) return fd;
  if (errno != EINPROGRESS && errno != EINTR) {
    err = errno;
    return {};
  }
  if (!wait_ready(fd.get(), POLLOUT, deadline)) {
    err = ETIMEDOUT;
    return {};
  }
  socklen_t length = sizeof err;
  if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &length) != 0) err = errno;
  return err == 0 ? std::move(fd) : FileDescriptor{};
}

FileDescriptor connect_to(const std::string& address, const Deadline& deadline) {
  const auto [host, port] = split_address(address);
  if (port.empty()) throw UsageError("control address '" + address + "' has no port");
  const auto list = resolve(host, port);
  int err = 0;
  for (const addrinfo* ai = list.get(); ai; ai = ai->ai_next) {
    if (auto fd = connect_one(*ai, address, deadline, err)) return fd;
  }
  const std::string why =
      err == ETIMEDOUT ? "no answer within " + std::to_string(deadline.budget.count()) + " ms"
                       : std::strerror(err);
  throw Error(ErrorKind::runtime, "no store is answering at " + address + " (" + why +
                                      "; is `ddstage serve` running?)");
}

}  // namespace

void ControlConnection::send(const Message& message, milliseconds timeout) {
  const std::string frame = encode_frame(message, {});
  write_all(m_fd.get(), std::as_bytes(std::span(frame)), Deadline(timeout), m_peer);
}

bool ControlConnection::send_now(const Message& message) noexcept {
  try {
    const std::string frame = encode_frame(message, {});
    const ssize_t n = ::send(m_fd.get(), frame.data(), frame.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    return n == static_cast<ssize_t>(frame.size());
  } catch (const Error&) {
    return false;
  }
}

ControlListener::ControlListener(const std::string& listen) {
  const auto [host, port] = split_address(listen);
  const auto list = resolve_listen_host(host, port.empty() ? "0" : port);
  m_fd = bind_first(list.get(), listen);
  m_address = advertised_address(m_fd.get());
}

std::optional<ControlConnection> ControlListener::accept() {
  for (;;) {
    sockaddr_storage addr{};
    socklen_t length = sizeof addr;
    int raw = ::accept4(m_fd.get(), reinterpret_cast<sockaddr*>(&addr), &length,
                        SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (raw >= 0) {
      FileDescriptor fd(raw, "control connection on " + m_address);
      return ControlConnection(std::move(fd),
                               numeric_address(reinterpret_cast<sockaddr*>(&addr), length));
    }
    if (errno == EINTR) continue;
    // The client may have given up between poll and accept (accept(2) lists the network errors
    // to treat like EAGAIN). Anything else (out of descriptors, say) is an error: the caller
    // must back off rather than poll a listener that stays readable.
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != ECONNABORTED && errno != EPROTO &&
        errno != ENETDOWN && errno != ENETUNREACH && errno != EHOSTUNREACH) {
      throw IoError("accept on " + m_address, errno);
    }
    return std::nullopt;
  }
}

std::string listen_beside(const std::string& rank0_control) {
  const auto [host, port] = split_address(rank0_control);
  const auto list = resolve(host, port.empty() ? "1" : port);
  // A datagram socket's connect only picks the route: no packet leaves.
  FileDescriptor fd(::socket(list->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0), "route probe");
  if (!fd || ::connect(fd.get(), list->ai_addr, list->ai_addrlen) != 0)
    throw IoError("no route to rank 0's control address " + rank0_control, errno);
  sockaddr_storage local{};
  socklen_t length = sizeof local;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&local), &length) != 0)
    throw IoError("getsockname of the route to " + rank0_control, errno);
  const auto numeric = numeric_address(reinterpret_cast<sockaddr*>(&local), length);
  return numeric.substr(0, numeric.rfind(':') + 1) + "0";
}

Message control_request(const std::string& address, std::string_view token, const Message& request,
                        milliseconds timeout) {
  return control_request(address, token, request, timeout, {});
}

Message control_request(const std::string& address, std::string_view token, const Message& request,
                        milliseconds timeout,
                        const std::function<void(const Message&)>& on_interim) {
  const Deadline sending(timeout);
  const auto fd = connect_to(address, sending);
  const std::string frame = encode_frame(request, token);
  write_all(fd.get(), std::as_bytes(std::span(frame)), sending, address);
  // Without on_interim the whole exchange has one deadline; with it, each message has its own.
  for (;;) {
    Message message = read_reply(fd.get(), on_interim ? Deadline(timeout) : sending, address);
    if (!on_interim || !is_interim(message)) return message;
    on_interim(message);
  }
}

}  // namespace ddstage::detail
