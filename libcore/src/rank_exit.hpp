// What one server rank leaves behind on its node, and the way out that removes it.
#pragma once

#include <atomic>
#include <filesystem>
#include <mutex>
#include <set>
#include <string>

#include "rank_lock.hpp"

namespace ddstage::detail {

/// Removes what this store's ranks that died on this node (SIGKILL) left: only ranks their
/// lock proves gone (clean_dead_ranks); logs what it removed.
void sweep_dead_ranks(const std::string& store_id) noexcept;

/// This rank's claim on its node (its RankLock) and the names of the shared-memory segments it
/// holds or is filling, kept apart from the ShmSegment objects so that a thread other than the
/// main one (a signal, a lost peer) can free them while the main thread is blocked in a
/// collective or in the middle of a load. Thread-safe.
class RankExit {
 public:
  /// A segment name on the list for as long as this object lives: taken before the segment is
  /// created, dropped after it is unlinked. Move-only.
  class Tracked {
   public:
    Tracked() = default;
    Tracked(RankExit& owner, std::string name);
    Tracked(Tracked&& other) noexcept;
    Tracked& operator=(Tracked&& other) noexcept;
    Tracked(const Tracked&) = delete;
    Tracked& operator=(const Tracked&) = delete;
    ~Tracked();

   private:
    RankExit* m_owner = nullptr;
    std::string m_name;
  };

  RankExit() = default;
  RankExit(const RankExit&) = delete;
  RankExit& operator=(const RankExit&) = delete;

  /// Takes this rank's RankLock once the store id is known, before any segment exists.
  /// `store_dir` holds the store.yaml this rank removes on its way out (rank 0), or is empty.
  void claim(const std::string& store_id, int rank, std::filesystem::path store_dir);
  Tracked track(std::string name) { return Tracked(*this, std::move(name)); }

  /// Runs `write` (rank 0 publishing store.yaml) unless the rank is on its way out, so that a
  /// descriptor removed by leave() is not written again while the process ends.
  template <class F>
  void unless_leaving(F&& write) {
    std::lock_guard lock(m_mutex);
    if (!m_leaving.test()) write();
  }

  /// Unlinks every tracked segment, this process's libfabric shm queues ("/dev/shm/PID:*")
  /// and its lock file, and (rank 0) store.yaml if it still names this store; removes what this
  /// store's ranks that died on this node left (clean_dead_ranks); then _exit(code).
  /// Safe from any thread; a second caller waits for the first to end the process.
  [[noreturn]] void leave(int code) noexcept;

 private:
  void unlink_tracked() noexcept;
  void remove_descriptor() noexcept;

  std::mutex m_mutex;  ///< guards the members below
  std::set<std::string> m_segments;
  RankLock m_lock;
  std::string m_store_id;
  std::filesystem::path m_store_dir;
  std::atomic_flag m_leaving;
};

}  // namespace ddstage::detail
