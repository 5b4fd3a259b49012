// A node leader's control logic, sans-I/O: it takes the time and the messages that arrived and
// returns the messages to send. It keeps its tree links alive and reports a neighbour that goes
// silent (never judging it: the coordinator does, after probing), reports its own ranks' exits,
// passes views and commands down and combines replies on the way up. Node 0's leader also holds
// the coordinator's share (CoordinatorCore).
//
// Slow is not dead: silence is only counted while this node was itself awake. A leader whose own
// clock jumped (stopped, or starved of CPU) forgives its links the gap instead of reporting the
// neighbours it could not hear.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "cluster_message.hpp"
#include "cluster_view.hpp"
#include "coordinator_core.hpp"
#include "leader_tree.hpp"
#include "split_mix.hpp"

namespace ddstage::detail {

class NodeLeaderCore {
 public:
  NodeLeaderCore(int node, const ClusterLayout& layout, const ClusterTimings& timings,
                 uint64_t seed);

  void start(ClusterTime now, Outbox& out);
  void tick(ClusterTime now, Outbox& out);
  void receive(ClusterTime now, const ClusterMessage& message, Outbox& out);
  /// The process of `rank` (one of this node's) ended: its leader saw it at once (pidfd).
  void rank_exited(ClusterTime now, int rank, Outbox& out);
  /// Coordinator only: sends a command (a status round trip) down the tree; its reply comes as
  /// a command_done event. Returns its id.
  uint64_t start_command(ClusterTime now, Outbox& out);

 private:
  struct Link {
    ClusterTime heard{};
    ClusterTime next_keepalive{};
    std::optional<ClusterTime> reported;  ///< when its silence was last reported
  };
  struct PendingCommand {
    int from = -1;  ///< -1: this node is the coordinator and started it
    std::vector<int> waiting;
    uint64_t answered = 0;
    std::vector<int> missing;
    ClusterTime deadline{};
  };

  void relink(ClusterTime now);
  /// Toward the coordinator: handled here on node 0, else sent to the nearest live ancestor.
  void up(ClusterTime now, ClusterMessage message, Outbox& out);
  bool parent_answers(ClusterTime now) const;
  void apply_view(ClusterTime now, const ClusterMessage& view, Outbox& out);
  void command(ClusterTime now, int from, uint64_t id, ClusterTime time_left, Outbox& out);
  void reply(uint64_t id, int child, const ClusterMessage& reply, Outbox& out);
  /// The ranks of `node` and of every node below it in the current tree.
  void subtree_ranks(int node, std::vector<int>& out) const;
  void finish_if_done(uint64_t id, Outbox& out);
  void keepalive(ClusterTime now, int to, Link& link, Outbox& out);

  int m_node;
  const ClusterLayout& m_layout;
  ClusterTimings m_timings;
  LeaderTree m_tree;
  SplitMix m_random;
  ClusterView m_view;
  bool m_lost = false;  ///< a view named this node dead: it sends nothing more (self_lost)
  std::optional<ClusterTime> m_last_tick;
  std::map<int, Link> m_links;  ///< parent and children under the current view
  std::vector<int> m_exited;    ///< own ranks that ended, reported until a view has them
  std::optional<ClusterTime> m_exits_reported;
  std::map<uint64_t, std::pair<int, ClusterTime>> m_witnessing;  ///< probe id → subject, asked when
  std::map<uint64_t, PendingCommand> m_commands;
  uint64_t m_next_command = 1;
  std::unique_ptr<CoordinatorCore> m_coordinator;
};

}  // namespace ddstage::detail
