// DIR/store.yaml: how clients and control commands find a running store.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace ddstage {

/// Version of store.yaml this build writes and reads.
inline constexpr uint32_t store_format_version = 1;

/// One server rank as clients see it.
struct RankInfo {
  int rank = 0;
  std::string host;
  int64_t pid = 0;
  std::vector<std::string> transports;  ///< e.g. {"local", "shm", "fabric"}
  uint64_t memory_limit = 0;            ///< bytes this rank may hold
  std::string fabric_provider;  ///< libfabric provider of its endpoint ("tcp;ofi_rxm"); empty: none
  std::string fabric_address;   ///< its endpoint's fi_getname bytes, lower-case hex
};

/// One loaded dataset: where its index is, how it is sharded, and each rank's region.
struct StoreDataset {
  std::string name;
  std::filesystem::path index;         ///< the DATASET.ddx it was loaded from (absolute)
  std::vector<uint64_t> boundaries;    ///< ShardPlan boundaries, ranks + 1 values
  std::vector<std::string> segments;   ///< per rank: shared-memory segment name
  std::vector<uint64_t> region_bytes;  ///< per rank: bytes of its shard region
  uint64_t index_fingerprint = 0;      ///< Index::fingerprint() of what was loaded
  /// Per rank, when the ranks serve over libfabric: the region's registration key, and its
  /// address as readers name it (its virtual address, or 0 for offsets: the provider's
  /// FI_MR_VIRT_ADDR mode). Empty otherwise.
  std::vector<uint64_t> fabric_keys;
  std::vector<uint64_t> fabric_bases;
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
