#include "ddstage/tool/tier_set.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <utility>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddstage/error.hpp"
#include "ddstage/settings.hpp"
#include "ddstage/store_descriptor.hpp"
#include "ddstage/tool/atomic_file.hpp"
#include "ddstage/tool/file_descriptor.hpp"
#include "ddstage/tool/human_bytes.hpp"
#include "rank_lock.hpp"

namespace ddstage {
namespace {

namespace fs = std::filesystem;

/// A record lists a few directories: anything longer is not one.
constexpr std::size_t max_record_bytes = 64 << 10;

UsageError bad_spec(std::string_view text, std::string_view part, std::string_view why) {
  return UsageError(
      fmt::format("bad tier '{}' in --tier '{}': {} (expected memory, nvme:DIR or nvme:DIR:SIZE, "
                  "comma-separated)",
                  part, text, why));
}

/// "nvme:DIR" or "nvme:DIR:SIZE": the part after the last ':' is a limit when it reads as a size
/// (so a directory whose name ends in ":1G" cannot be a tier; none needs to).
TierSpec parse_nvme(std::string_view text, std::string_view part) {
  TierSpec tier{.kind = TierSpec::Kind::nvme};
  std::string_view dir = part.substr(part.find(':') + 1);
  if (const auto colon = dir.rfind(':'); colon != std::string_view::npos) {
    const auto size = parse_size(dir.substr(colon + 1));
    if (!size) throw bad_spec(text, part, "the part after the last ':' is not a size");
    if (*size == 0) throw bad_spec(text, part, "a tier limit must be more than 0 bytes");
    tier.limit = *size;
    dir = dir.substr(0, colon);
  }
  if (dir.empty() || dir.front() != '/')
    throw bad_spec(text, part, "its directory must be an absolute path");
  tier.dir = fs::path(dir).lexically_normal();
  // "/x/" and "/x" are one directory; its files are then named "/x/ddstage-...".
  if (tier.dir.has_parent_path() && !tier.dir.has_filename()) tier.dir = tier.dir.parent_path();
  if (tier.dir == "/") throw bad_spec(text, part, "the root directory cannot be a tier");
  return tier;
}

/// Bytes its file system lets this user write in dir.
uint64_t disk_free(const fs::path& dir) {
  struct statvfs st {};
  if (::statvfs(dir.c_str(), &st) != 0)
    throw IoError("statvfs tier directory " + dir.string(), errno);
  return static_cast<uint64_t>(st.f_bavail) * st.f_frsize;
}

}  // namespace

std::string TierSpec::name() const {
  return kind == Kind::memory ? "memory" : "nvme:" + dir.string();
}

std::string_view TierSpec::label() const noexcept {
  return kind == Kind::memory ? "memory" : "nvme";
}

std::vector<TierSpec> parse_tier_spec(std::string_view text) {
  std::vector<TierSpec> tiers;
  std::size_t at = 0;
  for (;;) {
    const auto comma = text.find(',', at);
    auto part = text.substr(at, comma == std::string_view::npos ? comma : comma - at);
    // "memory, nvme:/x" as typed in a config file.
    while (part.starts_with(' ')) part.remove_prefix(1);
    while (part.ends_with(' ')) part.remove_suffix(1);
    if (part == "memory") {
      if (!tiers.empty()) {
        throw bad_spec(text, part,
                       "memory must come first (regions go to the first tier with room)");
      }
      tiers.push_back({});
    } else if (part.starts_with("nvme:")) {
      auto tier = parse_nvme(text, part);
      for (const auto& t : tiers) {
        if (t.dir == tier.dir) throw bad_spec(text, part, "its directory is named twice");
      }
      tiers.push_back(std::move(tier));
    } else {
      throw bad_spec(text, part, part.empty() ? "empty" : "unknown kind");
    }
    if (comma == std::string_view::npos) break;
    at = comma + 1;
  }
  return tiers;
}

TierSet::Reservation::Reservation(Reservation&& other) noexcept
    : m_set(std::exchange(other.m_set, nullptr)),
      m_tier(other.m_tier),
      m_bytes(std::exchange(other.m_bytes, 0)),
      m_segment(std::move(other.m_segment)) {}

TierSet::Reservation& TierSet::Reservation::operator=(Reservation&& other) noexcept {
  if (this != &other) {
    release();
    m_set = std::exchange(other.m_set, nullptr);
    m_tier = other.m_tier;
    m_bytes = std::exchange(other.m_bytes, 0);
    m_segment = std::move(other.m_segment);
  }
  return *this;
}

TierSet::Reservation::~Reservation() {
  release();
}

void TierSet::Reservation::release() noexcept {
  if (m_set) m_set->release(m_tier, m_bytes);
  m_set = nullptr;
}

std::string_view TierSet::Reservation::label() const noexcept {
  return m_set ? m_set->m_tiers[m_tier].label() : std::string_view();
}

std::string TierSet::Reservation::tier_name() const {
  return m_set ? m_set->m_tiers[m_tier].name() : std::string();
}

TierSet::TierSet(std::vector<TierSpec> tiers, uint64_t mem_limit)
    : m_tiers(std::move(tiers)), m_mem_limit(mem_limit), m_used(m_tiers.size(), 0) {
  if (m_tiers.empty()) throw std::logic_error("TierSet without a tier");
  // Who can write a tier directory decides what readers map: the store directory's rule.
  for (const auto& t : m_tiers) {
    if (t.kind == TierSpec::Kind::nvme) StoreDescriptor::prepare_directory(t.dir);
  }
}

uint64_t TierSet::free_on(std::size_t i, uint64_t ignored, uint64_t mem_limit) const {
  const auto& t = m_tiers[i];
  const uint64_t used = m_used[i] - std::min(m_used[i], ignored);
  if (t.kind == TierSpec::Kind::memory) return mem_limit - std::min(mem_limit, used);
  uint64_t room = std::numeric_limits<uint64_t>::max();
  if (t.limit) room = t.limit - std::min(t.limit, used);
  // What the disk has free already excludes files created so far (their blocks are reserved),
  // but not the one being replaced: it is freed only after its successor is filled.
  return std::min(room, disk_free(t.dir));
}

TierSet::Reservation TierSet::allocate(std::string_view base, uint64_t bytes,
                                       const Request& request) {
  const auto* replacing = request.replacing;
  const uint64_t mem_limit = request.mem_limit ? request.mem_limit : m_mem_limit;
  std::lock_guard lock(m_mutex);
  std::string free;
  for (std::size_t i = 0; i < m_tiers.size(); ++i) {
    const bool replaces_here = replacing && replacing->m_set == this && replacing->m_tier == i;
    const uint64_t room = free_on(i, replaces_here ? replacing->m_bytes : 0, mem_limit);
    if (bytes <= room) {
      m_used[i] += bytes;
      Reservation r;
      r.m_set = this;
      r.m_tier = i;
      r.m_bytes = bytes;
      r.rename(base);
      return r;
    }
    const auto& t = m_tiers[i];
    const uint64_t limit = t.kind == TierSpec::Kind::memory ? mem_limit : t.limit;
    free += fmt::format("{}{} {} free", free.empty() ? "" : ", ", t.name(),
                        human_bytes(static_cast<double>(room)));
    if (limit) free += " of " + human_bytes(static_cast<double>(limit));
  }
  throw UsageError(fmt::format("{} does not fit: it needs {} ({} bytes); {} (--mem-limit, --tier)",
                               request.what, human_bytes(static_cast<double>(bytes)), bytes, free));
}

void TierSet::Reservation::rename(std::string_view base) {
  if (base.starts_with('/')) base.remove_prefix(1);
  const auto& t = m_set->m_tiers[m_tier];
  m_segment = t.kind == TierSpec::Kind::memory ? "/" + std::string(base)
                                               : (t.dir / std::string(base)).string();
}

void TierSet::release(std::size_t tier, uint64_t bytes) noexcept {
  std::lock_guard lock(m_mutex);
  m_used[tier] -= std::min(m_used[tier], bytes);
}

std::vector<TierSet::Usage> TierSet::bytes_by_tier() const {
  std::lock_guard lock(m_mutex);
  std::vector<Usage> out;
  for (std::size_t i = 0; i < m_tiers.size(); ++i) {
    const auto& t = m_tiers[i];
    out.push_back({t.name(), m_used[i], t.kind == TierSpec::Kind::memory ? m_mem_limit : t.limit});
  }
  return out;
}

std::vector<std::string> TierSet::names() const {
  std::vector<std::string> out;
  for (const auto& t : m_tiers) out.push_back(t.name());
  return out;
}

std::vector<fs::path> TierSet::directories() const {
  std::vector<fs::path> out;
  for (const auto& t : m_tiers) {
    if (t.kind == TierSpec::Kind::nvme) out.push_back(t.dir);
  }
  return out;
}

fs::path TierRecord::path_for(const std::string& store_id, int rank) {
  return detail::shm_directory() / fmt::format("ddstage-{}-r{}.tiers", store_id, rank);
}

TierRecord::TierRecord(const std::string& store_id, int rank, const TierSet& tiers) {
  const auto dirs = tiers.directories();
  if (dirs.empty()) return;
  std::string text;
  for (const auto& d : dirs) text += d.string() + "\n";
  AtomicFile file(path_for(store_id, rank), 0600);
  file.write(text);
  file.commit();
  m_path = path_for(store_id, rank);
}

TierRecord::TierRecord(TierRecord&& other) noexcept : m_path(std::exchange(other.m_path, {})) {}

TierRecord& TierRecord::operator=(TierRecord&& other) noexcept {
  if (this != &other) {
    TierRecord gone(std::move(*this));
    m_path = std::exchange(other.m_path, {});
  }
  return *this;
}

TierRecord::~TierRecord() {
  if (!m_path.empty() && ::unlink(m_path.c_str()) != 0 && errno != ENOENT)
    spdlog::warn("cannot remove {}: errno {}", m_path.string(), errno);
}

std::vector<fs::path> read_tier_record(const fs::path& record, uid_t owner) {
  const int raw = ::open(record.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (raw < 0) return {};
  FileDescriptor fd(raw, record);
  struct stat st {};
  if (::fstat(raw, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != owner ||
      static_cast<uint64_t>(st.st_size) > max_record_bytes)
    return {};
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  try {
    fd.pread_exact(std::as_writable_bytes(std::span(text)), 0);
  } catch (const Error&) {
    return {};
  }
  std::vector<fs::path> dirs;
  for (std::size_t at = 0; at < text.size();) {
    const auto end = std::min(text.find('\n', at), text.size());
    const fs::path dir = text.substr(at, end - at);
    if (dir.is_absolute() && dir != "/") dirs.push_back(dir);
    at = end + 1;
  }
  return dirs;
}

}  // namespace ddstage
