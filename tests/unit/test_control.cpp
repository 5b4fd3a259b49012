// The control channel: framing, timeouts and bad input over loopback TCP.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "control/control_channel.hpp"
#include "ddstage/error.hpp"

using namespace ddstage;
using namespace std::chrono_literals;
using detail::ControlListener;
using detail::Message;

namespace {

/// Answers `connections` connections on a thread, each with {ok: true, echo: REQUEST}, and records
/// the errors it saw. Every wait is bounded, so a failing test cannot hang the thread.
class EchoServer {
 public:
  EchoServer(ControlListener& listener, int connections)
      : m_thread([this, &listener, connections] {
          for (int i = 0; i < connections; ++i) {
            auto connection = listener.accept(2s);
            if (!connection) {
              m_errors.push_back("no connection came");
              return;
            }
            try {
              Message reply;
              reply["ok"] = true;
              reply["echo"] = connection->receive(1s);
              connection->send(reply);
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

/// A plain blocking IPv4 socket connected to the listener, for sending bytes no client would.
FileDescriptor raw_connect(const ControlListener& listener) {
  int raw = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(raw >= 0);
  FileDescriptor fd(raw, "test socket");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port_of(listener.address()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  return fd;
}

void send_raw(const FileDescriptor& fd, const std::string& bytes) {
  REQUIRE(::send(fd.get(), bytes.data(), bytes.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(bytes.size()));
}

std::string length_prefix(uint32_t n) {
  std::string out(4, '\0');
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

/// Accepts the raw client's connection and expects its one message to be refused with `what`.
void expect_refused(ControlListener& listener, const std::string& what) {
  auto connection = listener.accept(1s);
  REQUIRE(connection);
  REQUIRE_THROWS_WITH(connection->receive(1s), Catch::Contains(what));
}

Message nested_request() {
  Message request;
  request["token"] = "0123456789abcdef0123456789abcdef";
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
  ControlListener listener("127.0.0.1:0");
  REQUIRE(listener.address().rfind("127.0.0.1:", 0) == 0);
  REQUIRE(port_of(listener.address()) != 0);
  EchoServer server(listener, 1);
  const Message request = nested_request();
  const Message reply = detail::control_request(listener.address(), request, 2s);
  REQUIRE(server.finish().empty());
  REQUIRE(reply["ok"].as<bool>());
  REQUIRE(YAML::Dump(reply["echo"]) == YAML::Dump(request));
  REQUIRE(reply["echo"]["args"]["shards"][0]["first"].as<uint64_t>() == uint64_t{1} << 40);
  REQUIRE(reply["echo"]["args"]["index"].as<std::string>() ==
          request["args"]["index"].as<std::string>());
}

TEST_CASE("one listener serves clients one after another", "[control]") {
  ControlListener listener("127.0.0.1:0");
  EchoServer server(listener, 2);
  for (int i = 0; i < 2; ++i) {
    Message request;
    request["op"] = "status";
    request["n"] = i;
    REQUIRE(detail::control_request(listener.address(), request, 2s)["echo"]["n"].as<int>() == i);
  }
  REQUIRE(server.finish().empty());
}

TEST_CASE("the IPv6 loopback works too", "[control]") {
  std::optional<ControlListener> listener;
  try {
    listener.emplace("[::1]:0");
  } catch (const Error& e) {
    WARN("IPv6 loopback not available here, not tested: " << e.what());
    return;
  }
  REQUIRE(listener->address().rfind("[::1]:", 0) == 0);
  EchoServer server(*listener, 1);
  Message request;
  request["op"] = "status";
  REQUIRE(detail::control_request(listener->address(), request, 2s)["ok"].as<bool>());
  REQUIRE(server.finish().empty());
}

TEST_CASE("a server that never replies makes the request time out", "[control]") {
  ControlListener listener("127.0.0.1:0");
  std::promise<void> client_done;
  // A jthread: a failing REQUIRE below still joins it (bounded by the 3 s wait) instead of
  // terminating.
  std::jthread silent([&listener, done = client_done.get_future()] {
    auto connection = listener.accept(2s);
    if (connection) done.wait_for(3s);  // holds the connection open, never replies
  });
  Message request;
  request["op"] = "status";
  const auto start = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(
      detail::control_request(listener.address(), request, 200ms),
      Catch::Contains("timed out after 200 ms") && Catch::Contains(listener.address()));
  const auto elapsed = std::chrono::steady_clock::now() - start;
  client_done.set_value();
  REQUIRE(elapsed >= 190ms);
  REQUIRE(elapsed < 2s);
}

TEST_CASE("nothing listening is an error naming the address", "[control]") {
  std::string address;
  {
    ControlListener closed("127.0.0.1:0");
    address = closed.address();
  }
  Message request;
  request["op"] = "status";
  try {
    detail::control_request(address, request, 1s);
    FAIL("control_request to a closed port succeeded");
  } catch (const Error& e) {
    REQUIRE(e.kind() == ErrorKind::runtime);
    REQUIRE_THAT(e.what(), Catch::Contains("no store is answering at " + address) &&
                               Catch::Contains("ddstage serve"));
  }
}

TEST_CASE("an oversized length prefix is refused before allocating, and the server goes on",
          "[control]") {
  ControlListener listener("127.0.0.1:0");
  EchoServer server(listener, 2);
  {
    auto raw = raw_connect(listener);
    send_raw(raw, length_prefix(detail::max_message_bytes + 1));
  }
  Message request;
  request["op"] = "status";
  REQUIRE(detail::control_request(listener.address(), request, 2s)["ok"].as<bool>());
  const auto errors = server.finish();
  REQUIRE(errors.size() == 1);
  REQUIRE_THAT(errors[0], Catch::Contains("over the limit"));
}

TEST_CASE("bad frames are errors, not crashes or hangs", "[control]") {
  ControlListener listener("127.0.0.1:0");
  SECTION("a 4 GiB length prefix") {
    auto raw = raw_connect(listener);
    send_raw(raw, length_prefix(0xffffffffu));
    expect_refused(listener, "over the limit");
  }
  SECTION("garbage YAML") {
    auto raw = raw_connect(listener);
    const std::string garbage = "{ op: [unclosed, \"x";
    send_raw(raw, length_prefix(static_cast<uint32_t>(garbage.size())) + garbage);
    expect_refused(listener, "unparsable control message");
  }
  SECTION("YAML that is not a map") {
    auto raw = raw_connect(listener);
    const std::string list = "- load\n- stop\n";
    send_raw(raw, length_prefix(static_cast<uint32_t>(list.size())) + list);
    expect_refused(listener, "is not a YAML map");
  }
  SECTION("a peer that closes in the middle of a frame") {
    {
      auto raw = raw_connect(listener);
      send_raw(raw, length_prefix(100) + "op: st");
    }
    expect_refused(listener, "closed the control connection");
  }
  SECTION("a peer that connects and sends nothing") {
    auto raw = raw_connect(listener);
    auto connection = listener.accept(1s);
    REQUIRE(connection);
    REQUIRE_THROWS_WITH(connection->receive(100ms), Catch::Contains("timed out after 100 ms"));
  }
}

TEST_CASE("accept returns nothing when no client comes", "[control]") {
  ControlListener listener("127.0.0.1:0");
  const auto start = std::chrono::steady_clock::now();
  REQUIRE_FALSE(listener.accept(50ms));
  REQUIRE(std::chrono::steady_clock::now() - start < 1s);
}

TEST_CASE("malformed listen addresses are usage errors", "[control]") {
  for (const char* bad : {"127.0.0.1:http", "127.0.0.1:", "127.0.0.1:70000", "[::1", "[::1]x"}) {
    INFO(bad);
    try {
      ControlListener listener(bad);
      FAIL("listening on a malformed address succeeded");
    } catch (const Error& e) {
      REQUIRE(e.kind() == ErrorKind::usage);
      REQUIRE_THAT(e.what(), Catch::Contains(bad));
    }
  }
}
