// Today's flat control plane as SimNodes, one per rank, so the simulator measures it beside the
// leader tree (the baseline in `ddstage bench control --simulate`). It follows the code it
// models: every rank opens a new connection to rank 0 for each heartbeat, all ranks in step
// (heartbeat.cpp, server_start.cpp); rank 0 checks every half interval and marks at most one
// silent rank lost per check, rewriting the descriptor each time (peer_watch.cpp); a command
// opens a connection per rank at once, and a rank it has no descriptor left for is marked lost
// (server_parts.cpp). Nothing here runs in production.
#pragma once

#include <vector>

#include "sim_node.hpp"

namespace ddstage::detail {

struct FlatSettings {
  std::chrono::milliseconds peer_timeout{30000};  ///< the setting's default
  int fd_limit = 1024;  ///< the common soft RLIMIT_NOFILE, never raised today
  int fds_in_use = 64;  ///< rank 0's own: listeners, files, libfabric, MPI
};

class FlatControlModel : public SimNode {
 public:
  FlatControlModel(int rank, int ranks, const FlatSettings& settings);

  void start(ClusterTime now, Outbox& out) override;
  void tick(ClusterTime now, Outbox& out) override;
  void receive(ClusterTime now, const ClusterMessage& m, Outbox& out) override;
  void rank_exited(ClusterTime now, int rank, Outbox& out) override;
  uint64_t start_command(ClusterTime now, Outbox& out) override;
  ClusterTime cost(const ClusterMessage& m, const SimCosts& costs) const override;
  ClusterTime tick_every() const override;
  bool holds_view() const override { return m_rank == 0; }

 private:
  void mark_lost(std::vector<int> ranks, Outbox& out);

  int m_rank;
  FlatSettings m_settings;
  std::vector<ClusterTime> m_heard;  ///< rank 0
  std::vector<bool> m_lost;          ///< rank 0
  uint64_t m_version = 0;
  uint64_t m_next_command = 1;
  uint64_t m_command = 0;
  uint64_t m_waiting = 0;
  std::vector<int> m_failed;  ///< the running command's ranks that got no connection
};

}  // namespace ddstage::detail
