// The control channel: framing, the token check, timeouts and hostile peers over loopback TCP.
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "control/control_server.hpp"
#include "ddstage/error.hpp"
#include "loopback.hpp"

using namespace ddstage;
using namespace std::chrono_literals;
using detail::ControlServer;
using detail::ControlServerLimits;
using detail::Message;

namespace {

const std::string token = "0123456789abcdef0123456789abcdef";
const std::string other_token = "0123456789abcdef0123456789abcdee";

/// A control server on loopback with the test token, whose front desk answers as a store's
/// does: a heartbeat at once, idle or busy; anything else with {busy: true} while busy.
ControlServer make_server(ControlServerLimits limits = {}) {
  return ControlServer(
      "127.0.0.1:0", token,
      [](const Message& request, bool busy) -> std::optional<Message> {
        const bool heartbeat = request["op"].as<std::string>() == "heartbeat";
        if (!busy && !heartbeat) return std::nullopt;
        Message reply;
        reply["ok"] = true;
        reply[heartbeat ? "heartbeat" : "busy"] = true;
        return reply;
      },
      limits);
}

/// Answers `requests` requests on a thread, each with {ok: true, echo: REQUEST}, and records
/// what went wrong. Every wait is bounded, so a failing test cannot hang the thread.
class EchoServer {
 public:
  EchoServer(ControlServer& server, int requests)
      : m_thread([this, &server, requests] {
          for (int i = 0; i < requests; ++i) {
            auto request = server.next(5s);
            if (!request) {
              m_errors.push_back("no request came");
              return;
            }
            Message reply;
            reply["ok"] = true;
            reply["echo"] = request->message;
            server.done();
            try {
              request->connection.send(reply);
            } catch (const Error& e) {
              m_errors.push_back(e.what());
            }
          }
        }) {}
  EchoServer(const EchoServer&) = delete;
  EchoServer& operator=(const EchoServer&) = delete;
  ~EchoServer() {
    if (m_thread.joinable()) m_thread.join();
  }

  /// Waits for the thread and returns the errors it recorded.
  std::vector<std::string> finish() {
    m_thread.join();
    return m_errors;
  }

 private:
  std::vector<std::string> m_errors;
  std::thread m_thread;
};

uint16_t port_of(const std::string& address) {
  return static_cast<uint16_t>(std::stoi(address.substr(address.rfind(':') + 1)));
}

/// A plain blocking IPv4 socket connected to the server, for sending bytes no client would;
/// its receives give up after 3 s.
FileDescriptor raw_connect(const ControlServer& server) {
  int raw = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(raw >= 0);
  FileDescriptor fd(raw, "test socket");
  timeval limit{3, 0};
  REQUIRE(::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &limit, sizeof limit) == 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port_of(server.address()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

void send_raw(const FileDescriptor& fd, const std::string& bytes) {
  REQUIRE(::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(bytes.size()));
}

/// Everything the server sends until it closes the connection; Error when it has not closed
/// it within 3 s (the socket's receive limit).
std::string receive_all(const FileDescriptor& fd) {
  std::string out;
  char buffer[4096];
  for (;;) {
    const ssize_t n = ::recv(fd.get(), buffer, sizeof buffer, 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return out;
    if (n < 0) throw IoError("the server did not close the test connection", errno);
    out.append(buffer, static_cast<std::size_t>(n));
  }
}

/// The reply in what the server sent: one frame, with no token in it.
Message reply_in(const std::string& bytes) {
  REQUIRE(bytes.size() >= detail::frame_header_bytes);
  std::array<std::byte, detail::frame_header_bytes> header{};
  std::memcpy(header.data(), bytes.data(), header.size());
  const auto decoded = detail::decode_header(header, "test");
  REQUIRE(decoded.token == std::string(detail::token_chars, '\0'));
  REQUIRE(bytes.size() == detail::frame_header_bytes + decoded.length);
  return detail::decode_body(bytes.substr(detail::frame_header_bytes), "test");
}

std::string status_frame(const std::string& with_token) {
  Message request;
  request["op"] = "status";
  return detail::encode_frame(request, with_token);
}

/// A header with the given token and body length, and no body.
std::string header_only(const std::string& with_token, uint32_t length) {
  std::string frame = status_frame(with_token).substr(0, detail::frame_header_bytes);
  for (int i = 0; i < 4; ++i) frame[40 + i] = static_cast<char>((length >> (8 * i)) & 0xff);
  return frame;
}

/// A header with the test token, then body.
std::string with_body(const std::string& body) {
  return header_only(token, static_cast<uint32_t>(body.size())) + body;
}

Message status_request() {
  Message request;
  request["op"] = "status";
  return request;
}

Message nested_request() {
  Message request;
  request["op"] = "load";
  request["args"]["index"] = "/scratch/with space/train: \"quoted\" #not-a-comment.ddx";
  request["args"]["verify"] = true;
  request["args"]["ranks"].push_back(0);
  request["args"]["ranks"].push_back(3);
  Message shard;
  shard["first"] = uint64_t{1} << 40;
  shard["names"].push_back("x");
  shard["names"].push_back("ünïcode");
  request["args"]["shards"].push_back(shard);
  request["empty"] = "";
  return request;
}

}  // namespace

TEST_CASE("a nested message makes the round trip unchanged", "[control]") {
  auto server = make_server();
  REQUIRE(server.address().rfind("127.0.0.1:", 0) == 0);
  REQUIRE(port_of(server.address()) != 0);
  EchoServer echo(server, 1);
  const Message request = nested_request();
  const Message reply = detail::control_request(server.address(), token, request, 2s);
  REQUIRE(echo.finish().empty());
  REQUIRE(reply["ok"].as<bool>());
  REQUIRE(YAML::Dump(reply["echo"]) == YAML::Dump(request));
  REQUIRE(reply["echo"]["args"]["shards"][0]["first"].as<uint64_t>() == uint64_t{1} << 40);
}

TEST_CASE("one server serves clients one after another", "[control]") {
  auto server = make_server();
  EchoServer echo(server, 2);
  for (int i = 0; i < 2; ++i) {
    Message request = status_request();
    request["n"] = i;
    REQUIRE(detail::control_request(server.address(), token, request, 2s)["echo"]["n"].as<int>() ==
            i);
  }
  REQUIRE(echo.finish().empty());
}

TEST_CASE("the IPv6 loopback works too", "[control]") {
  std::optional<ControlServer> server;
  try {
    server.emplace("[::1]:0", token, nullptr);
  } catch (const Error& e) {
    WARN("IPv6 loopback not available here, not tested: " << e.what());
    return;
  }
  REQUIRE(server->address().rfind("[::1]:", 0) == 0);
  EchoServer echo(*server, 1);
  REQUIRE(detail::control_request(server->address(), token, status_request(), 2s)["ok"].as<bool>());
  REQUIRE(echo.finish().empty());
}

TEST_CASE("a server that never replies makes the request time out", "[control]") {
  auto server = make_server();  // nobody takes its requests
  const auto start = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(
      detail::control_request(server.address(), token, status_request(), 200ms),
      Catch::Contains("timed out after 200 ms") && Catch::Contains(server.address()));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  REQUIRE(elapsed >= 190ms);
  REQUIRE(elapsed < 2s);
}

TEST_CASE("nothing listening is an error naming the address", "[control]") {
  std::string address;
  {
    auto closed = make_server();
    address = closed.address();
  }
  try {
    detail::control_request(address, token, status_request(), 1s);
    FAIL("control_request to a closed port succeeded");
  } catch (const Error& e) {
    REQUIRE(e.kind() == ErrorKind::runtime);
    REQUIRE_THAT(e.what(), Catch::Contains("no store is answering at " + address) &&
                               Catch::Contains("ddstage serve"));
  }
}

TEST_CASE("tokens are compared whole", "[control]") {
  REQUIRE(detail::same_token(token, token));
  REQUIRE_FALSE(detail::same_token(other_token, token));
  REQUIRE_FALSE(detail::same_token("", token));
  REQUIRE_FALSE(detail::same_token(token.substr(0, 31), token));
  REQUIRE_FALSE(detail::same_token(token + "0", token));
  REQUIRE_FALSE(detail::same_token("", ""));
}

TEST_CASE("a peer without the token is refused after the header, nothing of it queued",
          "[control]") {
  auto server = make_server();
  SECTION("wrong token, and a body of the largest size announced but never sent") {
    auto raw = raw_connect(server);
    send_raw(raw, header_only(other_token, detail::max_message_bytes));
    const Message reply = reply_in(receive_all(raw));
    REQUIRE_FALSE(reply["ok"].as<bool>());
    REQUIRE(reply["kind"].as<std::string>() == "usage");
    REQUIRE_THAT(reply["error"].as<std::string>(),
                 Catch::Contains("refused: wrong or missing store token"));
  }
  SECTION("no token at all") {
    auto raw = raw_connect(server);
    send_raw(raw, status_frame(""));
    REQUIRE_THAT(reply_in(receive_all(raw))["error"].as<std::string>(),
                 Catch::Contains("wrong or missing"));
  }
  SECTION("the version 1 format: a length and YAML carrying the token") {
    auto raw = raw_connect(server);
    const std::string yaml = "token: " + token + "\nop: stop\n";
    std::string frame(4, '\0');
    frame[0] = static_cast<char>(yaml.size());
    send_raw(raw, frame + yaml);
    REQUIRE(receive_all(raw).empty());  // closed without an answer: not our protocol
  }
  SECTION("another protocol version") {
    auto raw = raw_connect(server);
    std::string frame = status_frame(token);
    frame[4] = 3;
    send_raw(raw, frame);
    REQUIRE(receive_all(raw).empty());
  }
  REQUIRE_FALSE(server.next(100ms));
}

TEST_CASE("bad frames from a token holder are refused with a reason, and the server goes on",
          "[control]") {
  auto server = make_server();
  SECTION("a length over the limit") {
    auto raw = raw_connect(server);
    send_raw(raw, header_only(token, detail::max_message_bytes + 1));
    REQUIRE_THAT(reply_in(receive_all(raw))["error"].as<std::string>(),
                 Catch::Contains("over the limit"));
  }
  SECTION("garbage YAML") {
    auto raw = raw_connect(server);
    send_raw(raw, with_body("{ op: [unclosed, \"x"));
    const auto reply = reply_in(receive_all(raw));
    REQUIRE_THAT(reply["error"].as<std::string>(), Catch::Contains("not valid YAML"));
    // A peer's message is no damaged index (the YAML limits used to say so).
    CHECK(reply["class"].as<std::string>() == "error");
    CHECK(reply["kind"].as<std::string>() == "runtime");
  }
  SECTION("YAML that is not a map") {
    auto raw = raw_connect(server);
    send_raw(raw, with_body("- load\n- stop\n"));
    REQUIRE_THAT(reply_in(receive_all(raw))["error"].as<std::string>(),
                 Catch::Contains("not a YAML map"));
  }
  SECTION("a peer that closes in the middle of a frame") {
    auto raw = raw_connect(server);
    send_raw(raw, header_only(token, 100) + "op: st");
  }
  REQUIRE_FALSE(server.next(100ms));
  EchoServer echo(server, 1);
  REQUIRE(detail::control_request(server.address(), token, status_request(), 2s)["ok"].as<bool>());
  REQUIRE(echo.finish().empty());
}

TEST_CASE("idle, slow and piling-up peers do not keep a client from being heard", "[control]") {
  const ControlServerLimits limits{.max_pending = 8, .header_timeout = 500ms};
  auto server = make_server(limits);
  std::vector<FileDescriptor> idle;
  for (int i = 0; i < 40; ++i) idle.push_back(raw_connect(server));  // 5 times the limit
  auto slow = raw_connect(server);
  send_raw(slow, "D");  // and then nothing: a slowloris that never finishes its header
  EchoServer echo(server, 1);
  REQUIRE(detail::control_request(server.address(), token, status_request(), 5s)["ok"].as<bool>());
  REQUIRE(echo.finish().empty());
  // Each is closed by the header timeout (or pushed out earlier), without an answer.
  REQUIRE(receive_all(slow).empty());
  for (auto& fd : idle) REQUIRE(receive_all(fd).empty());
}

TEST_CASE("a client slow between connect and its request is not pushed out by newer peers",
          "[control]") {
  const ControlServerLimits limits{
      .max_pending = 8, .header_timeout = 3000ms, .eviction_grace = 2000ms};
  auto server = make_server(limits);
  auto client = raw_connect(server);  // descheduled before its first write, as on a loaded node
  std::vector<FileDescriptor> newcomers;
  for (int i = 0; i < 24; ++i) newcomers.push_back(raw_connect(server));  // 3 times max_pending
  std::this_thread::sleep_for(200ms);  // the server accepts them all before the request comes
  EchoServer echo(server, 1);
  send_raw(client, status_frame(token));
  const Message reply = reply_in(receive_all(client));
  REQUIRE(reply["ok"].as<bool>());
  REQUIRE(reply["echo"]["op"].as<std::string>() == "status");
  REQUIRE(echo.finish().empty());
}

TEST_CASE("while a request runs, others get the busy answer at once", "[control]") {
  auto server = make_server();
  std::jthread first_client([&] {
    try {
      detail::control_request(server.address(), token, status_request(), 3s);
    } catch (const Error&) {
      // Its reply is not the point; it may time out when the test fails early.
    }
  });
  auto running = server.next(2s);
  REQUIRE(running);
  const Message busy = detail::control_request(server.address(), token, status_request(), 1s);
  REQUIRE(busy["busy"].as<bool>());
  server.done();
  Message reply;
  reply["ok"] = true;
  running->connection.send(reply);
}

TEST_CASE("heartbeats are answered at once, idle and while a command runs",
          "[control][heartbeat]") {
  auto server = make_server();
  Message beat;
  beat["op"] = "heartbeat";
  beat["rank"] = 1;
  // Idle: nothing takes requests from the queue, so only the front desk can answer.
  REQUIRE(detail::control_request(server.address(), token, beat, 2s)["heartbeat"].as<bool>());
  std::jthread first_client([&] {
    try {
      detail::control_request(server.address(), token, status_request(), 5s);
    } catch (const Error&) {
      // Its reply is not the point; it may time out when the test fails early.
    }
  });
  auto running = server.next(2s);
  REQUIRE(running);
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 5; ++i) {
    REQUIRE(detail::control_request(server.address(), token, beat, 2s)["heartbeat"].as<bool>());
  }
  // Generous on a loaded machine; queued behind the command they would never come at all.
  REQUIRE(std::chrono::steady_clock::now() - t0 < 5s);
  server.done();
  Message reply;
  reply["ok"] = true;
  running->connection.send(reply);
}

namespace {

sockaddr_storage ip(const char* text) {
  sockaddr_storage out{};
  if (std::strchr(text, ':')) {
    auto& in6 = reinterpret_cast<sockaddr_in6&>(out);
    in6.sin6_family = AF_INET6;
    REQUIRE(::inet_pton(AF_INET6, text, &in6.sin6_addr) == 1);
  } else {
    auto& in = reinterpret_cast<sockaddr_in&>(out);
    in.sin_family = AF_INET;
    REQUIRE(::inet_pton(AF_INET, text, &in.sin_addr) == 1);
  }
  return out;
}

bool loopback(const char* text) {
  const auto addr = ip(text);
  return detail::is_loopback(reinterpret_cast<const sockaddr&>(addr));
}

}  // namespace

TEST_CASE("loopback addresses are told from the ones other hosts reach", "[control][loopback]") {
  for (const char* lo : {"127.0.0.1", "127.0.1.1", "127.255.255.254", "::1", "::ffff:127.0.1.1"}) {
    INFO(lo);
    REQUIRE(loopback(lo));
  }
  for (const char* other : {"10.9.0.2", "128.0.0.1", "126.255.255.255", "0.0.0.0", "::", "fe80::1",
                            "::ffff:10.0.0.1", "::2"}) {
    INFO(other);
    REQUIRE_FALSE(loopback(other));
  }
  const auto addr = ip("::ffff:127.0.1.1");
  REQUIRE(detail::numeric_host(reinterpret_cast<const sockaddr&>(addr)) == "::ffff:127.0.1.1");
  REQUIRE(detail::loopback_address_of("127.0.1.1") == "127.0.1.1");
  const auto localhost = detail::loopback_address_of("localhost");
  REQUIRE((localhost == "127.0.0.1" || localhost == "::1"));
  REQUIRE(detail::loopback_address_of("10.9.0.2").empty());
  REQUIRE(detail::loopback_address_of("no-such-host.invalid").empty());
}
