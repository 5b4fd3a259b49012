#include <catch2/catch.hpp>

#include "cluster/cluster_wire.hpp"

using namespace ddstage::detail;

namespace {

const ClusterLayout layout = ClusterLayout::uniform(40, 4);

ClusterMessage view_message() {
  ClusterMessage m{ClusterOp::view, 0, -1, 4};
  m.dead_nodes = {5, 17};
  m.dead_ranks = {9};
  return m;
}

}  // namespace

TEST_CASE("control-plane messages round-trip through their bytes", "[control]") {
  ClusterMessage command{ClusterOp::command, 1, -1, 12};
  command.time_left = std::chrono::milliseconds(3750);
  for (const auto& m : {view_message(), command, ClusterMessage{ClusterOp::rank_exited, 2, 9},
                        ClusterMessage{ClusterOp::reply, 3, -1, 12, 60}}) {
    const auto back = decode_cluster_message(encode_cluster_message(m), layout);
    REQUIRE(back);
    CHECK(back->op == m.op);
    CHECK(back->from == m.from);
    CHECK(back->subject == m.subject);
    CHECK(back->seq == m.seq);
    CHECK(back->answered == m.answered);
    CHECK(back->dead_nodes == m.dead_nodes);
    CHECK(back->dead_ranks == m.dead_ranks);
    CHECK(back->time_left == m.time_left);
  }
}

TEST_CASE("a control-plane message naming what the store has not is dropped whole", "[control]") {
  const auto refused = [](ClusterMessage m) {
    return !decode_cluster_message(encode_cluster_message(m), layout);
  };
  auto m = view_message();
  m.dead_nodes.push_back(40);  // one past the last node
  CHECK(refused(m));
  m = view_message();
  m.dead_ranks.push_back(-1);
  CHECK(refused(m));
  CHECK(refused({ClusterOp::keepalive, 40}));
  CHECK(refused({ClusterOp::suspect, 1, 40}));
  CHECK(refused({ClusterOp::rank_exited, 1, 160}));
  CHECK(refused({ClusterOp::keepalive, 1, 3}));  // a keepalive names nobody
  ClusterMessage late{ClusterOp::command, 0, -1, 1};
  late.time_left = std::chrono::hours(2);
  CHECK(refused(late));
  late.time_left = std::chrono::seconds(-1);
  CHECK(refused(late));

  const auto bytes = encode_cluster_message(view_message());
  CHECK_FALSE(decode_cluster_message(bytes.substr(0, bytes.size() - 1), layout));
  CHECK_FALSE(decode_cluster_message(bytes + "x", layout));
  auto unknown_op = bytes;
  unknown_op[0] = static_cast<char>(10);
  CHECK_FALSE(decode_cluster_message(unknown_op, layout));
  CHECK_FALSE(decode_cluster_message("", layout));
}
