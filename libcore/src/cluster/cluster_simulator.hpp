// A deterministic discrete-event simulator for the control plane: a virtual clock, each node a
// single-server queue that handles one message or timer at a time, messages that take a
// network latency to arrive, and the faults a real job meets (crashes, stopped processes,
// starved CPUs, lost messages, partitions). The same seed replays the same run on any machine,
// so the suite asserts the control plane's targets in simulated time, at 10,000 ranks, on two
// cores. The logic under test is the production code (SimNode), not a model of it.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <vector>

#include "cluster_message.hpp"
#include "sim_node.hpp"
#include "split_mix.hpp"

namespace ddstage::detail {

struct SimReport {
  int nodes = 0;
  int ranks = 0;
  /// Per crashed node, seconds from its crash until every live node applied a view naming it
  /// dead; infinity if some never did.
  std::vector<double> detect_node_s;
  /// Per killed rank, the same from its process's end.
  std::vector<double> detect_rank_s;
  /// Nodes dead in the coordinator's final view.
  std::vector<int> declared_dead;
  /// Per command: seconds from start to its combined reply, ranks answered and missing.
  std::vector<double> command_s;
  std::vector<uint64_t> command_answered;
  std::vector<uint64_t> command_missing;
  uint64_t views = 0;                    ///< the coordinator's final view version
  double verdict_spread_s = 0;           ///< first to last view that named a crashed node
  uint64_t messages = 0;                 ///< delivered
  double coordinator_inbound_per_s = 0;  ///< messages the coordinator handled a second
  double coordinator_busy = 0;           ///< fraction of the run its queue was busy
  /// Every live node holds the coordinator's final view.
  bool converged = false;
};

class ClusterSimulator {
 public:
  using Factory = std::function<std::unique_ptr<SimNode>(int node)>;

  ClusterSimulator(const ClusterLayout& layout, Factory factory, SimCosts costs, uint64_t seed);

  /// Every node's CPU is shared with a hog: each piece of work takes `slowdown` times as long
  /// and waits up to `max_wait` for the CPU first (uniform).
  void starve(double slowdown, ClusterTime max_wait);
  /// Each transmission of a message is lost with `probability` and sent again after TCP's
  /// minimum retransmission timeout (200 ms), as on the TCP connections the control plane uses:
  /// loss delays messages; only crashes and partitions drop them.
  void lose(double probability);
  void crash(int node, ClusterTime at);
  void pause(int node, ClusterTime at, ClusterTime length);  ///< SIGSTOP ... SIGCONT
  void kill_rank(int rank, ClusterTime at);
  /// Messages between `side` and the other nodes are dropped during [at, at + length).
  void partition(std::vector<int> side, ClusterTime at, ClusterTime length);
  void command(ClusterTime at);

  /// Runs every node from time 0 until `end`, then reports.
  SimReport run(ClusterTime end);

 private:
  enum class Kind : uint8_t { deliver, tick, crash, kill_rank, command };
  struct Event {
    ClusterTime at{};
    uint64_t order = 0;
    Kind kind = Kind::deliver;
    int node = -1;  ///< the target; kill_rank: the rank
    ClusterMessage message;
    bool operator>(const Event& o) const { return at != o.at ? at > o.at : order > o.order; }
  };
  struct Node {
    std::unique_ptr<SimNode> logic;
    ClusterTime busy_until{};
    ClusterTime busy_total{};
    std::optional<ClusterTime> crashed;
    std::vector<std::pair<ClusterTime, ClusterTime>> pauses;  ///< [from, to)
    bool lost = false;                                        ///< a view named it dead
  };
  struct Learned {
    ClusterTime at{};
    int node = -1;
    ClusterEvent event;
  };

  void push(ClusterTime at, Kind kind, int node, ClusterMessage message = {});
  /// When `node` can start work that arrives at `at`, and when it finishes work costing `cost`.
  std::pair<ClusterTime, ClusterTime> serve(Node& n, ClusterTime at, ClusterTime cost);
  void dispatch(int node, ClusterTime now, Outbox& out);
  bool cut(int a, int b, ClusterTime at) const;
  SimReport report(ClusterTime end) const;

  const ClusterLayout& m_layout;
  std::vector<Node> m_nodes;
  SimCosts m_costs;
  SplitMix m_random;
  double m_slowdown = 1;
  ClusterTime m_max_wait{};
  double m_loss = 0;
  struct Partition {
    std::vector<bool> side;
    ClusterTime from{}, to{};
  };
  std::vector<Partition> m_partitions;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> m_events;
  uint64_t m_order = 0;
  std::vector<std::pair<int, ClusterTime>> m_crashes;
  std::vector<std::pair<int, ClusterTime>> m_kills;
  std::map<uint64_t, ClusterTime> m_commands_started;
  std::vector<Learned> m_learned;
  std::vector<std::pair<ClusterTime, ClusterEvent>> m_done;
  uint64_t m_delivered = 0;
  uint64_t m_coordinator_inbound = 0;
};

}  // namespace ddstage::detail
