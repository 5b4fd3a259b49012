// Where a server rank's shard regions live: memory (POSIX shared memory, bounded by
// --mem-limit) and node-local tiers (files on NVMe, bounded by a limit and their disk).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <filesystem>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

namespace ddstage {

/// One tier of a `--tier` spec.
struct TierSpec {
  enum class Kind { memory, nvme };
  Kind kind = Kind::memory;
  std::filesystem::path dir;  ///< nvme: the directory its files go in (absolute)
  uint64_t limit = 0;         ///< nvme: bytes it may hold; 0 = whatever its file system has free
  /// "memory" or "nvme:DIR": how the spec, status and errors name it.
  std::string name() const;
  /// "memory" or "nvme": the kind, as a region records it.
  std::string_view label() const noexcept;
};

/// Parses a `--tier` spec (setting `tier`): a comma list of tiers in order of preference,
/// `memory` (first, if at all) and `nvme:DIR` or `nvme:DIR:SIZE` (DIR absolute; SIZE as for
/// --mem-limit, e.g. 500G). A spec without `memory` keeps every region on the tiers named.
/// UsageError naming the part that is wrong (an unknown kind, a relative or repeated DIR, a
/// zero or malformed SIZE, memory after a file tier).
std::vector<TierSpec> parse_tier_spec(std::string_view text);

/// One rank's tiers and what it has placed on each. Thread-safe; neither copied nor moved
/// (reservations point at it).
class TierSet {
 public:
  /// Bytes placed on a tier, released when destroyed. Move-only; must not outlive its TierSet.
  class Reservation {
   public:
    Reservation() = default;
    Reservation(Reservation&& other) noexcept;
    Reservation& operator=(Reservation&& other) noexcept;
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;
    ~Reservation();

    /// The ShmSegment name to create: "/BASE" in memory, "DIR/BASE" on an nvme tier.
    const std::string& segment() const noexcept { return m_segment; }
    /// The same room under another name (BASE as for allocate): when the first was taken.
    void rename(std::string_view base);
    /// "memory" or "nvme".
    std::string_view label() const noexcept;
    /// The tier's name(): "memory" or "nvme:DIR".
    std::string tier_name() const;
    uint64_t bytes() const noexcept { return m_bytes; }
    explicit operator bool() const noexcept { return m_set != nullptr; }

   private:
    friend class TierSet;
    void release() noexcept;
    TierSet* m_set = nullptr;
    std::size_t m_tier = 0;
    uint64_t m_bytes = 0;
    std::string m_segment;
  };

  /// What one tier holds, for status.
  struct Usage {
    std::string tier;    ///< name(): "memory", "nvme:DIR"
    uint64_t used = 0;   ///< bytes reserved on it
    uint64_t limit = 0;  ///< its bound (memory: mem_limit); 0 = its file system's free space
  };

  /// Creates each nvme tier's directory (mode 0700, and missing parents) and checks that it is
  /// the user's own and writable by no one else, as for a store directory (UsageError).
  TierSet(std::vector<TierSpec> tiers, uint64_t mem_limit);
  TierSet(const TierSet&) = delete;
  TierSet& operator=(const TierSet&) = delete;

  /// What an allocation is for, beyond its size.
  struct Request {
    std::string_view what = "a region";  ///< how errors name it ("dataset 'x' on rank 2")
    /// A reservation of this set about to be dropped (a dataset being replaced): its bytes
    /// count as free.
    const Reservation* replacing = nullptr;
    uint64_t mem_limit = 0;  ///< memory's bound for this one (load --mem-limit); 0: the set's
  };

  /// Places `bytes` on the first tier, in spec order, with room: memory while its reservations
  /// plus bytes stay within mem_limit, an nvme tier while they stay within its limit and its
  /// file system has them free. `base` names the file ("ddstage-ID-NAME-gN-rR"; a leading '/'
  /// is ignored). UsageError beginning with request.what and naming each tier's free bytes
  /// when none has room.
  Reservation allocate(std::string_view base, uint64_t bytes, const Request& request);
  Reservation allocate(std::string_view base, uint64_t bytes) {
    return allocate(base, bytes, Request{});
  }

  std::vector<Usage> bytes_by_tier() const;
  /// Every tier's name() in spec order: what store.yaml records for the rank.
  std::vector<std::string> names() const;
  const std::vector<TierSpec>& tiers() const noexcept { return m_tiers; }
  /// The nvme tiers' directories: what a TierRecord writes down.
  std::vector<std::filesystem::path> directories() const;

 private:
  /// Bytes free for one more reservation on tier i, given `ignored` bytes about to be freed
  /// there and memory's bound. Caller holds m_mutex.
  uint64_t free_on(std::size_t i, uint64_t ignored, uint64_t mem_limit) const;
  void release(std::size_t tier, uint64_t bytes) noexcept;

  std::vector<TierSpec> m_tiers;
  uint64_t m_mem_limit = 0;
  mutable std::mutex m_mutex;
  std::vector<uint64_t> m_used;  ///< per tier, guarded by m_mutex
};

/// A rank's nvme tier directories, written down on its node ("ddstage-ID-rR.tiers" beside its
/// rank lock in /dev/shm, mode 0600, one directory per line), so that `clean` and the ranks
/// that outlive it find the tier files of a rank that was SIGKILLed: tier directories are
/// named only on serve's command line. Removed when destroyed; a rank tracks path_for() with
/// its RankExit before writing it, as a segment, so its own way out removes it too. Move-only.
class TierRecord {
 public:
  TierRecord() = default;
  /// Writes the record (atomically) when `tiers` has nvme tiers; nothing otherwise.
  TierRecord(const std::string& store_id, int rank, const TierSet& tiers);
  TierRecord(TierRecord&& other) noexcept;
  TierRecord& operator=(TierRecord&& other) noexcept;
  TierRecord(const TierRecord&) = delete;
  TierRecord& operator=(const TierRecord&) = delete;
  ~TierRecord();

  /// "/dev/shm/ddstage-ID-rR.tiers".
  static std::filesystem::path path_for(const std::string& store_id, int rank);

 private:
  std::filesystem::path m_path;  ///< empty when nothing was written
};

/// The directories a TierRecord lists, trusted only when it is a regular file (not a link)
/// owned by `owner`; empty when it is missing, untrusted or unreadable.
std::vector<std::filesystem::path> read_tier_record(const std::filesystem::path& record,
                                                    uid_t owner);

}  // namespace ddstage
