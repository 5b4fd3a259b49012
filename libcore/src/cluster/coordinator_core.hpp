// The coordinator's share of failure detection, sans-I/O: a reported node is suspected, probed
// directly and through a few witnesses, and declared dead only when nobody hears from it for the
// whole suspicion window; one answer from anyone clears it. Verdicts and rank exits reached
// between two ticks go out as one view, so losing 64 nodes is an update or two, not 64.
#pragma once

#include <map>
#include <optional>
#include <vector>

#include "cluster_message.hpp"
#include "cluster_view.hpp"
#include "leader_tree.hpp"
#include "split_mix.hpp"

namespace ddstage::detail {

class CoordinatorCore {
 public:
  CoordinatorCore(const ClusterLayout& layout, const ClusterTimings& timings, uint64_t seed);

  /// A node leader reports `subject` silent: suspect it and probe, unless it is already. Its
  /// children are suspected with it, and theirs when one does not answer its first probe: while
  /// a node is silent nobody watches the leaves below it (a node and its children often go down
  /// together, a rack or a switch), and a live one just answers.
  void suspect(ClusterTime now, int subject, const ClusterView& view, Outbox& out);
  /// `subject` answered probe `seq` (to the coordinator or to a witness): it lives if the probe
  /// is one of its current suspicion's (a stopped node answers old probes first).
  void answered(int subject, uint64_t seq);
  /// A node leader saw one of its ranks' processes end.
  void rank_exited(int rank, const ClusterView& view);
  /// Probes again, reaches verdicts; returns the next view when one is due.
  std::optional<ClusterMessage> tick(ClusterTime now, const ClusterView& view, Outbox& out);

 private:
  struct Suspicion {
    uint64_t first_seq = 0;  ///< an answer to any probe since the suspicion began clears it
    uint64_t seq = 0;
    ClusterTime deadline{};
    ClusterTime next_probe{};
    bool children_suspected = false;
  };
  void probe(ClusterTime now, int subject, Suspicion& s, const ClusterView& view, Outbox& out);
  void suspect_one(ClusterTime now, int subject, const ClusterView& view, Outbox& out);

  const ClusterLayout& m_layout;
  ClusterTimings m_timings;
  LeaderTree m_tree;
  SplitMix m_random;
  uint64_t m_next_seq = 1;
  std::map<int, Suspicion> m_suspects;
  std::vector<int> m_verdicts;  ///< nodes found dead, not yet in a view
  std::vector<int> m_exited;    ///< ranks that ended, not yet in a view
};

}  // namespace ddstage::detail
