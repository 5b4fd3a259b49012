// Control requests to a running store (load, unload, status, stop), sent to rank 0 with the
// descriptor's token.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "ddstage/store_descriptor.hpp"

namespace ddstage {

/// What a status request learnt of one rank.
enum class RankState {
  up,             ///< answered (through rank 0)
  not_answering,  ///< the store did not answer, but this rank's process runs (on this host)
  lost,           ///< the store did not answer and this rank's process is gone (on this host)
  unknown,        ///< the store did not answer and the rank runs on another host
};
std::string_view state_name(RankState s);

/// One rank in a status report.
struct RankStatus {
  RankInfo info;
  RankState state = RankState::unknown;
  uint64_t memory_used = 0;  ///< bytes of shard regions it holds
};

/// One dataset in a status report.
struct DatasetStatus {
  std::string name;
  std::filesystem::path index;
  uint64_t samples = 0;
  std::vector<uint64_t> samples_per_rank;
  std::vector<uint64_t> bytes_per_rank;
};

struct StoreStatus {
  std::string control;
  std::string started;
  std::string error;  ///< why the ranks are reported lost (rank 0 did not answer); empty when healthy
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
  uint64_t mem_limit = 0;       ///< bytes per rank for this load; 0 = the server's --mem-limit
  unsigned streams = 0;         ///< reader threads per rank; 0 = the server's default
  /// Called as the store reports progress (a few times a second); the request's timeout then
  /// bounds the wait between reports rather than the whole load.
  std::function<void(const LoadProgress&)> progress;
};

/// Sends control requests to the store in DIR. Every call is one request/response over TCP to
/// rank 0, bounded by `timeout`; errors come back as the server's one-line message.
class StoreControl {
 public:
  /// UsageError if DIR holds no store descriptor.
  explicit StoreControl(const std::filesystem::path& dir,
                        std::chrono::milliseconds timeout = std::chrono::seconds(600));

  LoadResult load(const LoadRequest& request);
  void unload(const std::string& name);
  StoreStatus status();
  /// Shuts every rank down; they remove their segments and rank 0 the descriptor. When the
  /// store does not answer, cleans up after it on this node instead (clean_up_dead_store) and
  /// returns false; true when the store stopped itself.
  bool stop();

 private:
  std::filesystem::path m_dir;
  StoreDescriptor m_descriptor;
  std::chrono::milliseconds m_timeout;
};

/// What a store that died leaves on this node: ends its server processes still running here
/// (pids from the descriptor that are still ddstage processes), removes the shared-memory
/// segments the descriptor names, and removes the descriptor. Logs what it did.
void clean_up_dead_store(const std::filesystem::path& dir, const StoreDescriptor& descriptor);

/// Removes the shared-memory segments the descriptor names for ranks on this host (those
/// already gone are skipped): what a rank that died could not remove itself.
void remove_store_segments(const StoreDescriptor& descriptor);

/// True if the descriptor's rank 0 runs on this host and its pid is a live ddstage process
/// (it may be busy, e.g. in a long load, rather than dead).
bool store_process_alive(const StoreDescriptor& descriptor);

}  // namespace ddstage
