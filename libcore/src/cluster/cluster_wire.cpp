#include "cluster_wire.hpp"

#include <algorithm>

#include "ddstage/error.hpp"
#include "mpi/wire_bytes.hpp"

namespace ddstage::detail {
namespace {

/// ClusterMessage with its time as a count: the fields wire_bytes.hpp walks.
struct WireMessage {
  uint8_t op = 0;
  int32_t from = -1;
  int32_t subject = -1;
  uint64_t seq = 0;
  uint64_t answered = 0;
  std::vector<int32_t> dead_nodes;
  std::vector<int32_t> dead_ranks;
  int64_t time_left_ns = 0;

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.op, self.from, self.subject, self.seq, self.answered, self.dead_nodes, self.dead_ranks,
      self.time_left_ns);
  }
};

constexpr auto last_op = static_cast<uint8_t>(ClusterOp::reply);
constexpr int64_t longest_command_ns = 3'600'000'000'000;  // an hour

bool within(int32_t value, int end) {
  return value >= 0 && value < end;
}

/// What `subject` names for each op: a node, a rank, or nothing.
bool subject_fits(ClusterOp op, int32_t subject, const ClusterLayout& layout) {
  switch (op) {
    case ClusterOp::suspect:
    case ClusterOp::probe_request:
    case ClusterOp::ping:
    case ClusterOp::ack:
    case ClusterOp::probe_ack:
      return within(subject, layout.nodes());
    case ClusterOp::rank_exited:
      return within(subject, layout.ranks());
    default:
      return subject == -1;
  }
}

}  // namespace

std::string encode_cluster_message(const ClusterMessage& m) {
  WireMessage w{static_cast<uint8_t>(m.op),
                m.from,
                m.subject,
                m.seq,
                m.answered,
                {m.dead_nodes.begin(), m.dead_nodes.end()},
                {m.dead_ranks.begin(), m.dead_ranks.end()},
                m.time_left.count()};
  return to_wire(w);
}

std::optional<ClusterMessage> decode_cluster_message(std::string_view bytes,
                                                     const ClusterLayout& layout) {
  WireMessage w;
  try {
    w = from_wire<WireMessage>(bytes);
  } catch (const Error&) {
    return std::nullopt;
  }
  const auto op = static_cast<ClusterOp>(w.op);
  const auto node = [&](int32_t n) { return within(n, layout.nodes()); };
  const auto rank = [&](int32_t r) { return within(r, layout.ranks()); };
  if (w.op > last_op || !node(w.from) || !subject_fits(op, w.subject, layout) ||
      w.time_left_ns < 0 || w.time_left_ns > longest_command_ns ||
      w.dead_nodes.size() > static_cast<std::size_t>(layout.nodes()) ||
      w.dead_ranks.size() > static_cast<std::size_t>(layout.ranks()) ||
      !std::all_of(w.dead_nodes.begin(), w.dead_nodes.end(), node) ||
      !std::all_of(w.dead_ranks.begin(), w.dead_ranks.end(), rank))
    return std::nullopt;
  ClusterMessage m{op, w.from, w.subject, w.seq, w.answered};
  m.dead_nodes.assign(w.dead_nodes.begin(), w.dead_nodes.end());
  m.dead_ranks.assign(w.dead_ranks.begin(), w.dead_ranks.end());
  m.time_left = ClusterTime(w.time_left_ns);
  return m;
}

}  // namespace ddstage::detail
