// Control requests to a running store (load, unload, status, stop), sent to rank 0 with the
// descriptor's token.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ddstage/store_descriptor.hpp"
#include "ddstage/tool/shard_plan.hpp"
#include "ddstage/tool/store_cleanup.hpp"

namespace ddstage {

/// What a status request learnt of one rank.
enum class RankState {
  up,             ///< answered (through rank 0)
  not_answering,  ///< the store did not answer, but this rank's lock is held (on this host)
  /// rank 0 marked it lost (store.yaml), has not heard from it for peer_timeout, or the store
  /// did not answer and this rank's lock is not held (on this host)
  lost,
  unknown,  ///< the store did not answer and the rank runs on another host
};
std::string_view state_name(RankState s);

/// One rank in a status report.
struct RankStatus {
  RankInfo info;
  RankState state = RankState::unknown;
  uint64_t memory_used = 0;  ///< bytes of shard regions it holds
  double last_heard = -1;    ///< seconds since rank 0 last heard from it; -1: not reported
  /// Bytes of the regions it holds (store.yaml), by tier: "memory", "nvme".
  std::map<std::string, uint64_t> bytes_by_tier;
};

/// One dataset in a status report.
struct DatasetStatus {
  std::string name;
  std::filesystem::path index;
  uint64_t samples = 0;
  std::vector<uint64_t> samples_per_rank;  ///< by rank, over its regions
  std::vector<uint64_t> bytes_per_rank;    ///< by rank, over its regions
  int replicas = 1;                        ///< copies asked; replicas_per_node: one per host
  std::string state;                       ///< "healthy", "degraded" or "lost" (Coverage::state)
  std::vector<int> lost_ranks;             ///< lost ranks that held a region of it
  uint64_t samples_short = 0;              ///< samples with fewer live copies than asked
  uint64_t samples_lost = 0;               ///< samples with no live copy
  std::vector<ShardRange> short_ranges;    ///< which: [first, last) ranges, in order
  std::vector<ShardRange> lost_ranges;
  /// Staged on first touch (load --lazy): samples staged so far over its live regions (a
  /// sample counts once per copy), and how many of them were read from origin.
  bool lazy = false;
  uint64_t staged = 0;
  uint64_t origin_reads = 0;
};

struct StoreStatus {
  std::string control;
  std::string started;
  /// Why the store is not healthy: rank 0 did not answer (answered is false), a rank is silent
  /// that rank 0 has not marked lost yet, or a dataset is degraded or lost. Empty when healthy
  /// (a rank marked lost whose datasets were repaired leaves the store healthy).
  std::string error;
  bool answered = true;  ///< rank 0 answered the request
  /// The command the store was running when it answered ("load"): memory_used is then as of
  /// the command before. Empty when it was idle.
  std::string busy;
  std::vector<RankStatus> ranks;
  std::vector<DatasetStatus> datasets;
};

/// What a load did.
struct LoadResult {
  std::string name;
  uint64_t samples = 0;
  uint64_t bytes = 0;
  double seconds = 0;  ///< slowest rank's load time
  bool verified = false;
  /// What the store wants the user to know: e.g. copies that share a host (a node's loss can
  /// cost several). Empty when nothing.
  std::string warning;
};

/// How far a load has come, as rank 0 estimates it: its own shard's fraction done scaled to
/// the dataset (shards are balanced by bytes, so the ranks advance at about the same rate).
struct LoadProgress {
  uint64_t bytes_done = 0;
  uint64_t bytes_total = 0;
  uint64_t samples_total = 0;
};

struct LoadRequest {
  std::filesystem::path index;  ///< DATASET.ddx, readable by every server rank
  std::string name;             ///< default: the index's dataset name
  bool verify = false;          ///< check every entry's checksum while loading
  bool replace = false;         ///< replace a loaded dataset of the same name
  bool allow_stale = false;
  uint64_t mem_limit = 0;  ///< bytes per rank for this load; 0 = the server's --mem-limit
  unsigned streams = 0;    ///< reader threads per rank; 0 = the server's default
  /// Copies of every sample, each on ranks of other hosts when there are enough;
  /// replicas_per_node (0): one copy per host.
  int replicas = 1;
  /// Return at once; each sample is staged from origin by its owner on first touch. A server
  /// without lazy loads ignores it and loads whole: its regions are then not marked lazy.
  bool lazy = false;
  bool prefetch = false;  ///< lazy: also fill the rest in the background
  /// Called as the store reports progress (a few times a second). With or without it, the
  /// store sends a report at least every 5 s, and the request's timeout bounds the wait
  /// between reports rather than the whole load.
  std::function<void(const LoadProgress&)> progress;
};

/// A rank that rank 0 could not reach when it was told to stop.
struct UnreachableRank {
  int rank = 0;
  std::string host;
  double last_heard = -1;  ///< seconds since rank 0 last heard from it; -1: unknown
};

/// What `stop` did.
struct StopResult {
  std::vector<int> stopped;                  ///< ranks known to have ended (or to be ending)
  std::vector<UnreachableRank> unreachable;  ///< ranks that may still run
  /// Ranks rank 0 could not reach that are proven gone (their lock on this host is free): lost
  /// earlier, killed. Nothing of them runs.
  std::vector<int> gone;
  /// Empty when rank 0 answered. Else why it did not: the ranks on this host were then ended
  /// by signal (those their lock proves to be this store's) and their files removed.
  std::string no_answer;
  std::vector<std::pair<int, int64_t>> signalled;  ///< (rank, pid) ended by signal
  CleanReport cleaned;                             ///< this store's files removed on this node
  bool descriptor_removed = false;
};

/// Sends control requests to the store in DIR. Every call is one request/response over TCP to
/// rank 0; a request fails when the store sends nothing for control_timeout (a load keeps
/// itself alive with interim messages).
class StoreControl {
 public:
  /// UsageError if DIR holds no store descriptor.
  explicit StoreControl(const std::filesystem::path& dir,
                        std::chrono::milliseconds control_timeout = std::chrono::seconds(30),
                        std::chrono::milliseconds peer_timeout = std::chrono::seconds(30));

  LoadResult load(const LoadRequest& request);
  /// Brings the datasets short of copies (request.name; empty: all) back to their copies from
  /// origin, on live ranks (request.index and replicas unused: the store knows them). One
  /// result per dataset repaired; empty when nothing needed repair.
  std::vector<LoadResult> repair(const LoadRequest& request);
  void unload(const std::string& name);
  StoreStatus status();
  /// Shuts every rank down; they remove their segments and rank 0 the descriptor. When rank 0
  /// does not answer and runs on this host, ends this store's ranks on this host instead
  /// (clean_up_dead_store). Error when rank 0 does not answer from another host: only there
  /// can it be stopped, and the descriptor is kept.
  StopResult stop();

 private:
  std::filesystem::path m_dir;
  StoreDescriptor m_descriptor;
  std::chrono::milliseconds m_timeout;
  std::chrono::milliseconds m_peer_timeout;
};

/// What clean_up_dead_store did.
struct DeadStoreCleanup {
  std::vector<std::pair<int, int64_t>> signalled;  ///< (rank, pid) ended by signal
  CleanReport files;
  bool descriptor_removed = false;
};

/// What a store that does not answer leaves on this node: ends its ranks here that their lock
/// proves to be this store's (SIGCONT and SIGTERM, SIGKILL after 5 s; a pid is never signalled
/// on the descriptor's word alone), removes this store's files here (clean_dead_ranks), and
/// removes the descriptor once rank 0 ran here and is gone (clean_store_descriptor).
DeadStoreCleanup clean_up_dead_store(const std::filesystem::path& dir,
                                     const StoreDescriptor& descriptor);

}  // namespace ddstage
