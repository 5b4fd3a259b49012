#include "ddstage/tool/store_cleanup.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <utility>

#include <fmt/format.h>

#include "ddstage/tool/tier_set.hpp"
#include "process.hpp"
#include "rank_lock.hpp"

namespace ddstage {
namespace {

namespace fs = std::filesystem;
using detail::RankPresence;
using Outcome = DescriptorCleanup::Outcome;

/// One rank's files on this node, as list_store_files() found them.
struct RankFiles {
  std::vector<fs::path> segments;
  fs::path lock;  ///< empty when it has none
};

struct stat lstat_of(const fs::path& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) st.st_size = 0;
  return st;
}

/// Unlinks path (unless dry_run) and records it; a file someone else removed first is no failure.
void remove_file(CleanedFile file, bool dry_run, CleanReport& report) {
  file.bytes = static_cast<uint64_t>(lstat_of(file.path).st_size);
  if (!dry_run && ::unlink(file.path.c_str()) != 0) {
    if (errno != ENOENT)
      report.failures.push_back(
          fmt::format("cannot remove {}: {}", file.path.string(), std::strerror(errno)));
    return;
  }
  report.removed.push_back(std::move(file));
}

/// libfabric's shm provider keeps each endpoint's queues in /dev/shm/PID:...; a rank that died
/// cannot remove its own. Only while no process runs under that pid: a new one may own them.
void remove_fabric_queues(const std::string& id, int rank, const fs::path& lock, bool dry_run,
                          CleanReport& report) {
  const auto pid = detail::recorded_pid(lock);
  if (pid <= 0 || detail::process_alive(pid)) return;
  for (const auto& queue : detail::fabric_queues(pid, lstat_of(lock).st_uid))
    remove_file({CleanedFile::Kind::fabric_queue, id, rank, queue}, dry_run, report);
}

/// The tier files ("DIR/ddstage-ID-...-rR") of a rank, in the directories its TierRecord lists,
/// then the record: only regular files owned by whoever owns the rank's other files.
void remove_tier_files(const std::string& id, int rank, const RankFiles& files, bool dry_run,
                       CleanReport& report) {
  const auto record = TierRecord::path_for(id, rank);
  const auto owner = lstat_of(files.lock.empty() ? files.segments.front() : files.lock).st_uid;
  const auto dirs = read_tier_record(record, owner);
  if (dirs.empty()) return;
  const std::string prefix = "ddstage-" + id + "-";
  const std::string suffix = "-r" + std::to_string(rank);
  for (const auto& dir : dirs) {
    std::error_code ec;
    for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
      const auto name = it->path().filename().native();
      if (!name.starts_with(prefix) || !name.ends_with(suffix)) continue;
      const auto st = lstat_of(it->path());
      if (S_ISREG(st.st_mode) && st.st_uid == owner)
        remove_file({CleanedFile::Kind::segment, id, rank, it->path()}, dry_run, report);
    }
  }
  remove_file({CleanedFile::Kind::tier_record, id, rank, record}, dry_run, report);
}

void clean_rank(const std::string& id, int rank, const RankFiles& files, bool dry_run,
                CleanReport& report) {
  for (const auto& segment : files.segments)
    remove_file({CleanedFile::Kind::segment, id, rank, segment}, dry_run, report);
  remove_tier_files(id, rank, files, dry_run, report);
  if (files.lock.empty()) return;
  remove_fabric_queues(id, rank, files.lock, dry_run, report);
  // Last: while it is there, whatever else this rank left is still known to be a dead rank's.
  remove_file({CleanedFile::Kind::lock, id, rank, files.lock}, dry_run, report);
}

}  // namespace

CleanReport clean_dead_ranks(const std::string& store_id, bool dry_run, bool force) {
  std::map<std::pair<std::string, int>, RankFiles> ranks;
  for (auto& file : detail::list_store_files()) {
    if (!store_id.empty() && file.store_id != store_id) continue;
    auto& rank = ranks[{file.store_id, file.rank}];
    if (file.is_lock) {
      rank.lock = file.path;
    } else {
      rank.segments.push_back(file.path);
    }
  }
  CleanReport report;
  // Listed before the locks are tried: a segment seen above was created after its rank's lock,
  // so a rank that starts meanwhile is either live here or has nothing listed.
  for (const auto& [key, files] : ranks) {
    const auto& [id, rank] = key;
    if (detail::rank_presence(id, rank) == RankPresence::live) {
      auto pid = detail::rank_lock_holder(id, rank);
      if (pid == 0 && !files.lock.empty()) pid = detail::recorded_pid(files.lock);
      report.kept.push_back({id, rank, pid});
      continue;
    }
    if (files.lock.empty() && !force) {
      report.unlocked.push_back({id, rank, 0});
      continue;
    }
    clean_rank(id, rank, files, dry_run, report);
  }
  return report;
}

DescriptorCleanup clean_store_descriptor(const fs::path& dir, const StoreDescriptor& descriptor,
                                         bool dry_run) {
  const auto path = StoreDescriptor::path_in(dir);
  const auto& rank0 = descriptor.ranks.front();
  if (descriptor.id.empty()) {
    return {Outcome::kept,
            fmt::format(
                "kept {}: it names no store id (an older ddstage wrote it), so nothing proves its "
                "store gone",
                path.string())};
  }
  if (rank0.host != detail::host_name()) {
    return {Outcome::kept,
            fmt::format("kept {}: its rank 0 ran on {}; run `ddstage clean --store {}` there",
                        path.string(), rank0.host, dir.string())};
  }
  if (!detail::rank_gone_here(descriptor.id, 0, rank0.pid)) {
    return {Outcome::kept,
            fmt::format("kept {}: its store's rank 0 (pid {}) still runs or is not proven gone",
                        path.string(), rank0.pid)};
  }
  if (!dry_run) {
    std::error_code ec;
    if (!remove_descriptor_of(dir, descriptor.id, ec)) {
      if (ec)
        return {Outcome::failed, fmt::format("cannot remove {}: {}", path.string(), ec.message())};
      return {Outcome::kept,
              fmt::format("{} is gone already or names another store now", path.string())};
    }
  }
  return {Outcome::removed,
          fmt::format("{} {} (store {}, whose rank 0 is gone)",
                      dry_run ? "would remove" : "removed", path.string(), descriptor.id)};
}

bool remove_descriptor_of(const fs::path& dir, const std::string& id,
                          std::error_code& ec) noexcept {
  ec.clear();
  if (id.empty()) return false;
  const auto path = StoreDescriptor::path_in(dir);
  try {
    // read() bounds what it parses and refuses a file others could have planted.
    if (StoreDescriptor::read(dir).id != id) return false;
  } catch (const std::exception&) {
    return false;  // absent, unreadable or untrusted: not proven this store's
  }
  return fs::remove(path, ec);
}

void remove_empty_store_directory(const fs::path& dir) noexcept {
  ::rmdir(dir.c_str());
}

}  // namespace ddstage
