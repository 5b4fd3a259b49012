// What stores that died leave on a node, found by name and owner and removed: `ddstage clean`,
// and `stop` or `serve` meeting a store that does not answer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <system_error>
#include <vector>

#include "ddstage/store_descriptor.hpp"

namespace ddstage {

/// One file a clean removed (or, for a dry run, would remove).
struct CleanedFile {
  /// segment: a region's shared memory or tier file; tier_record: a rank's TierRecord.
  enum class Kind { segment, lock, fabric_queue, tier_record };
  Kind kind = Kind::segment;
  std::string store_id;
  int rank = 0;
  std::filesystem::path path;
  uint64_t bytes = 0;
};

/// A rank whose lock is held: it lives, and its files stay.
struct KeptRank {
  std::string store_id;
  int rank = 0;
  int64_t pid =
      0;  ///< the lock's holder, 0 when not visible (another user's, another PID namespace)
};

struct CleanReport {
  std::vector<CleanedFile> removed;
  std::vector<KeptRank> kept;
  /// Ranks whose segments have no lock file at all (pid 0): a ddstage older than rank locks, or
  /// something else nothing proves dead; kept unless forced.
  std::vector<KeptRank> unlocked;
  std::vector<std::string> failures;  ///< one line per file that could not be removed
};

/// Removes, on this node, the files of every rank whose lock nobody holds: its shared-memory
/// segments, its tier files (in the directories its TierRecord lists) and that record, its
/// lock file, and the libfabric shm queues ("PID:...") of the pid the lock
/// recorded once no process runs under it. Ranks whose lock is held are kept. Segments with no
/// lock file at all are kept (CleanReport::unlocked) unless `force`.
/// store_id empty: every store of this user (every user's, for root); else only that store.
/// dry_run: reports what it would remove and removes nothing.
CleanReport clean_dead_ranks(const std::string& store_id = {}, bool dry_run = false,
                             bool force = false);

/// Removes DIR/store.yaml only while it names store `id`: a new store may have taken the
/// directory since. Every removal of a descriptor goes through here. True when removed; false
/// when it is absent or names another store, or (`ec` set) could not be removed.
bool remove_descriptor_of(const std::filesystem::path& dir, const std::string& id,
                          std::error_code& ec) noexcept;

/// What clean_store_descriptor decided.
struct DescriptorCleanup {
  enum class Outcome { removed, kept, failed };
  Outcome outcome = Outcome::kept;  ///< removed: DIR/store.yaml was (dry run: would be) removed
  std::string message;  ///< one line for the user: what was removed, why it was kept or failed
};

/// Removes DIR/store.yaml when it names a store whose rank 0 ran on this host and is proven
/// gone (detail::rank_gone_here). A store whose rank 0 ran on another host is left alone: only
/// that host can tell whether it still runs.
DescriptorCleanup clean_store_descriptor(const std::filesystem::path& dir,
                                         const StoreDescriptor& descriptor, bool dry_run = false);

/// Removes the store directory DIR if it is empty (serve created it; stop and clean must not
/// leave one per job behind). Anything else in it keeps it.
void remove_empty_store_directory(const std::filesystem::path& dir) noexcept;

}  // namespace ddstage
