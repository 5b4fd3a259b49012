// The control plane's vocabulary at scale: what node leaders and the coordinator say to each
// other over the leader tree (docs/architecture.md, "The control plane at scale"). The logic
// that speaks it is sans-I/O: NodeLeaderCore takes (time, message) and returns the messages to
// send, so the same code runs under an event loop on real sockets and under ClusterSimulator.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "cluster_layout.hpp"
#include "cluster_timings.hpp"

namespace ddstage::detail {

enum class ClusterOp : uint8_t {
  keepalive,      ///< on a tree link, both ways; seq: the sender's view version
  suspect,        ///< up to the coordinator; subject: a silent tree neighbour; seq: the
                  ///< reporter's view version
  rank_exited,    ///< up to the coordinator; subject: a rank whose process ended; seq: as suspect
  probe_request,  ///< coordinator → witness: ping subject, report an answer; seq: the probe
  ping,           ///< to subject; seq: the probe
  ack,            ///< subject's answer to a ping; seq: the probe
  probe_ack,      ///< witness → coordinator (up): subject answered probe seq
  view,           ///< down the tree: seq: version; dead_nodes, dead_ranks: all of them
  command,        ///< down the tree; seq: the command's id
  reply,          ///< up to whoever sent the command; seq: its id; answered; dead_ranks: missing
};

struct ClusterMessage {
  ClusterOp op = ClusterOp::keepalive;
  int from = -1;     ///< the sending node
  int subject = -1;  ///< a node (suspect, probes) or a rank (rank_exited)
  uint64_t seq = 0;
  uint64_t answered = 0;
  std::vector<int> dead_nodes;
  std::vector<int> dead_ranks;
  ClusterTime time_left{};  ///< command: how long the receiver has to reply
};

struct Envelope {
  int to = -1;  ///< a node
  ClusterMessage message;
};

/// What the control logic tells its host besides messages to send.
struct ClusterEvent {
  enum class Kind : uint8_t {
    view_applied,  ///< seq: the new version; dead_nodes/dead_ranks: newly dead
    command_done,  ///< coordinator: seq: the id; answered; dead_ranks: the ranks missing
    self_lost,     ///< this node is dead in the view: its ranks end themselves
  };
  Kind kind = Kind::view_applied;
  uint64_t seq = 0;
  uint64_t answered = 0;
  std::vector<int> dead_nodes;
  std::vector<int> dead_ranks;
};

struct Outbox {
  std::vector<Envelope> sends;
  std::vector<ClusterEvent> events;

  void send(int to, ClusterMessage message) { sends.push_back({to, std::move(message)}); }
};

}  // namespace ddstage::detail
