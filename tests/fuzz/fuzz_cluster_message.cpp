// Control-plane messages (libcore/src/cluster/cluster_wire.cpp): the bytes a node leader reads
// from a tree link or a probe's connection. Whatever decodes must encode back to a message that
// decodes the same, and must leave the logic that takes it (a node leader, and node 0's leader
// with the coordinator) standing: neither may crash, whatever a valid message claims.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "cluster/cluster_wire.hpp"
#include "cluster/node_leader_core.hpp"

namespace {

using namespace ddstage::detail;

const ClusterLayout& layout() {
  static const auto l = ClusterLayout::uniform(40, 4);
  return l;
}

bool same(const ClusterMessage& a, const ClusterMessage& b) {
  return a.op == b.op && a.from == b.from && a.subject == b.subject && a.seq == b.seq &&
         a.answered == b.answered && a.dead_nodes == b.dead_nodes && a.dead_ranks == b.dead_ranks &&
         a.time_left == b.time_left;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const auto message = decode_cluster_message(bytes, layout());
  if (!message) return 0;
  const auto again = decode_cluster_message(encode_cluster_message(*message), layout());
  if (!again || !same(*message, *again)) __builtin_trap();
  for (int node : {0, 1, 39}) {
    NodeLeaderCore core(node, layout(), ClusterTimings{}, 1);
    Outbox out;
    core.start(ClusterTime{}, out);
    core.receive(std::chrono::seconds(1), *message, out);
    core.tick(std::chrono::seconds(2), out);
    core.tick(std::chrono::seconds(10), out);
  }
  return 0;
}
