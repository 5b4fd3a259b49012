#include "message_costs.hpp"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>

#include "control/control_channel.hpp"
#include "control/control_messages.hpp"
#include "control/control_server.hpp"
#include "ddstage/error.hpp"
#include "ddstage/tool/file_descriptor.hpp"
#include "node_leader_core.hpp"

namespace ddstage::detail {

namespace {

using Clock = std::chrono::steady_clock;

/// The fastest of `rounds`: the cost of the work itself. What a busy machine adds (waiting for
/// a core) is the simulator's to model (ClusterSimulator::starve), not to fold into every
/// message: measured beside a CPU hog, a median would charge it twice.
template <class Work>
ClusterTime fastest(int rounds, Work&& work) {
  ClusterTime best = ClusterTime::max();
  for (int i = 0; i < rounds; ++i) {
    const auto start = Clock::now();
    work(i);
    best = std::min<ClusterTime>(best, Clock::now() - start);
  }
  return best;
}

ClusterTime open_socket_message(int rounds) {
  std::array<int, 2> fds{};
  if (::socketpair(AF_UNIX, SOCK_STREAM, 0, fds.data()) != 0)
    throw Error(ErrorKind::runtime, std::string("socketpair: ") + std::strerror(errno));
  const FileDescriptor a(fds[0], "socketpair"), b(fds[1], "socketpair");
  const auto layout = ClusterLayout::uniform(17, 4);
  NodeLeaderCore core(0, layout, ClusterTimings{}, 1);
  Outbox out;
  core.start(ClusterTime{}, out);
  std::array<char, 64> frame{};
  return fastest(rounds, [&](int i) {
    if (::write(a.get(), frame.data(), frame.size()) != static_cast<ssize_t>(frame.size()) ||
        ::read(b.get(), frame.data(), frame.size()) != static_cast<ssize_t>(frame.size()))
      throw Error(ErrorKind::runtime, "socketpair round trip failed");
    Outbox o;
    core.receive(std::chrono::milliseconds(i), {ClusterOp::keepalive, 1 + i % 16}, o);
  });
}

ClusterTime new_connection_request(int rounds) {
  const std::string token(32, 'm');  // the length a store token has
  ControlServer server("127.0.0.1:0", token,
                       [](const Message&, bool) { return std::optional<Message>(ok_reply()); });
  const Message beat = heartbeat_request(1);
  return fastest(rounds, [&](int) {
    control_request(server.address(), token, beat, std::chrono::milliseconds(5000));
  });
}

}  // namespace

SimCosts measure_message_costs(int rounds) {
  SimCosts costs;
  costs.message = open_socket_message(rounds);
  costs.connect = new_connection_request(rounds);
  return costs;
}

}  // namespace ddstage::detail
