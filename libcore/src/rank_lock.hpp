// A server rank's claim on its node, and what `clean` and `stop` learn from it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "ddstage/tool/file_descriptor.hpp"

namespace ddstage::detail {

/// Where POSIX shared memory lives on Linux: the segments, their locks and libfabric's shm
/// queues. A node's reboot (or a simulated node's private tmpfs) clears them all together.
std::filesystem::path shm_directory();

/// A live server rank's claim on its node: the file "ddstage-ID-rR.lock" in shm_directory(),
/// mode 0600, holding the rank's pid, flock()ed exclusively for the rank's whole life. The
/// kernel drops the lock when the process ends, however it ends (SIGKILL, OOM killer, its PID
/// namespace torn down), so a lock file that nobody holds proves the rank is gone from this
/// node without trusting a pid: the only proof `clean` and `stop` act on.
class RankLock {
 public:
  RankLock() = default;
  /// Creates and locks the file (under a private name first, renamed once locked, so no one can
  /// see it unlocked). IoError if that fails.
  RankLock(const std::string& store_id, int rank);
  RankLock(RankLock&&) noexcept = default;
  RankLock& operator=(RankLock&& other) noexcept;
  RankLock(const RankLock&) = delete;
  RankLock& operator=(const RankLock&) = delete;
  /// Removes the name, then closes (which drops the lock).
  ~RankLock();

  /// "ddstage-ID-rR.lock".
  static std::string file_name(const std::string& store_id, int rank);

 private:
  void release() noexcept;
  FileDescriptor m_fd;
};

/// A file some store's rank left in shm_directory(), recognised by its name: the rank's lock
/// ("ddstage-ID-rR.lock") or one of its dataset segments ("ddstage-ID-NAME-gN-rR").
struct StoreFile {
  std::string store_id;
  int rank = 0;
  std::filesystem::path path;
  bool is_lock = false;
};

/// The store files in shm_directory() owned by this user (by any user, for root).
std::vector<StoreFile> list_store_files();

enum class RankPresence {
  live,    ///< its lock file is held now
  gone,    ///< its lock file is here and nobody holds it: the rank died on this node
  absent,  ///< no lock file on this node (another node's rank, or one that ended cleanly)
};
RankPresence rank_presence(const std::string& store_id, int rank);

/// The pid holding that rank's lock on this node, checked in /proc/PID/fd (so a reused pid is
/// never mistaken for the rank), or 0 when the lock is not held or its holder is not visible.
int64_t rank_lock_holder(const std::string& store_id, int rank);

/// The one proof that `store_id`'s `rank`, which recorded `pid`, is gone from this host:
/// its lock file here is unheld; or there is none and no process `pid` runs with that lock in
/// its own /dev/shm (a rank in another mount namespace on this host, e.g. Slurm's
/// job_container/tmpfs, keeps its lock out of ours). No lock file and a dead pid: gone (a
/// rebooted node, a fresh /dev/shm). Anything this host cannot see (EACCES): not proven.
bool rank_gone_here(const std::string& store_id, int rank, int64_t pid);

/// libfabric's shm provider names an endpoint's queues "PID:..." in shm_directory(): those of
/// `pid` that `owner` owns.
std::vector<std::filesystem::path> fabric_queues(int64_t pid, uid_t owner);

/// The pid a lock file records (for the libfabric shm queues "PID:..." a dead rank leaves), or 0.
int64_t recorded_pid(const std::filesystem::path& lock_file);

}  // namespace ddstage::detail
