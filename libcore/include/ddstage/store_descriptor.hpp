// DIR/store.yaml: how clients and control commands find a running store.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ddstage {

/// Version of store.yaml this build writes and reads.
/// Version 2: a dataset is a list of regions (several copies, several regions per rank), ranks
/// have their own control address and may be marked lost.
inline constexpr uint32_t store_format_version = 2;

/// One server rank as clients see it.
struct RankInfo {
  int rank = 0;
  std::string host;
  int64_t pid = 0;
  std::vector<std::string> transports;  ///< e.g. {"local", "shm", "fabric"}
  uint64_t memory_limit = 0;            ///< bytes this rank may hold
  std::string fabric_provider;  ///< libfabric provider of its endpoint ("tcp;ofi_rxm"); empty: none
  std::string fabric_address;   ///< its endpoint's fi_getname bytes, lower-case hex
  std::string control;          ///< "HOST:PORT" of the rank's own control socket; empty: none
  /// Where it may keep regions: "memory", "nvme:DIR" (serve --tier).
  std::vector<std::string> tiers;
  /// Rank 0 found it gone (silent past peer_timeout, or refusing a command): readers skip it.
  bool lost = false;
};

/// One region of a dataset: samples [first, last) held by one rank, in a shared-memory segment
/// or a file on a tier, laid out by ShardLayout.
struct StoreRegion {
  int rank = 0;
  uint64_t first = 0;
  uint64_t last = 0;
  /// Shared-memory name ("/ddstage-..."), or the absolute path of its file on a tier.
  std::string segment;
  uint64_t bytes = 0;           ///< of the region
  std::string tier = "memory";  ///< "memory" or the tier's kind ("nvme")
  /// Filled on first touch: a reader asks the rank to stage samples before reading them.
  bool lazy = false;
  /// Its libfabric registration when the ranks serve over libfabric: the key, and its address
  /// as readers name it (its virtual address, or 0 for offsets: FI_MR_VIRT_ADDR).
  bool fabric = false;
  uint64_t fabric_key = 0;
  uint64_t fabric_base = 0;
};

/// One loaded dataset: where its index is, how many copies were asked, and its regions.
struct StoreDataset {
  std::string name;
  std::filesystem::path index;     ///< the DATASET.ddx it was loaded from (absolute)
  uint64_t index_fingerprint = 0;  ///< Index::fingerprint() of what was loaded
  int replicas = 1;                ///< copies asked for; 0: one per node (load --replicas node)
  /// Every copy's regions; together they hold every sample at least once (checked on read).
  /// While the dataset is loaded, a repair appends regions and drops lost ranks' ones; no other
  /// region goes: readers notice a replace by a live rank's segment they opened going missing,
  /// and name a region by its segment.
  std::vector<StoreRegion> regions;
};

/// Everything in store.yaml. The token authorises control requests; the file is mode 0600.
struct StoreDescriptor {
  uint32_t format_version = store_format_version;
  std::string token;  ///< 32 hex digits (128 random bits)
  /// Names this store's shared-memory segments (/dev/shm/ddstage-ID-...), which every user can
  /// list: random like the token, but no part of it, and not secret. Empty in descriptors
  /// from before it existed.
  std::string id;
  std::string control;  ///< "HOST:PORT" of rank 0's control socket
  std::string started;  ///< UTC time
  std::vector<RankInfo> ranks;
  std::vector<StoreDataset> datasets;

  /// Path of the descriptor inside a store directory.
  static std::filesystem::path path_in(const std::filesystem::path& dir) {
    return dir / "store.yaml";
  }
  /// Reads DIR/store.yaml. UsageError when there is none ("no store at DIR"), or when DIR or
  /// store.yaml is not the user's own: owned by another uid (root included), writable by group
  /// or others, or store.yaml a symbolic link or not a regular file. IndexError when it is
  /// damaged, past the YAML limits (16 MiB, no aliases) or from a newer ddstage.
  static StoreDescriptor read(const std::filesystem::path& dir);
  /// For serve: creates DIR, and missing parents, with mode 0700 whatever the umask, and checks
  /// that DIR is the user's own and writable by no one else (UsageError otherwise, also for an
  /// existing DIR).
  static void prepare_directory(const std::filesystem::path& dir);
  /// Writes DIR/store.yaml atomically (temporary file, mode 0600, rename).
  void write(const std::filesystem::path& dir) const;
  /// The dataset by name; UsageError listing the loaded ones when there is none.
  const StoreDataset& dataset(const std::string& name) const;
};

/// 128 random bits from the kernel as 32 hex digits.
std::string random_token();

}  // namespace ddstage
