// The served store's watch: every batch checks that the server ranks it touches are still
// there and still serve the segments this reader opened; a failed transfer asks store.yaml
// whether a replace or an unload explains it.
#include <poll.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include <fmt/format.h>

#include "control/stage_messages.hpp"
#include "process.hpp"
#include "read/served_dataset.hpp"

namespace ddstage::detail {
namespace {

/// A replace unlinks (or deregisters) each rank's old shard moments before rank 0 publishes the
/// new names: a reader that meets that gap waits this long at most for store.yaml to say so,
/// asking every withdrawn_poll (N readers on a parallel file system's metadata server).
constexpr auto withdrawn_wait = std::chrono::seconds(1);
constexpr auto withdrawn_poll = std::chrono::milliseconds(200);

class ServedWatch final : public RouteWatch {
 public:
  explicit ServedWatch(const ServedDataset& data) : m_data(data) {}

  void check(std::span<const int> owners) override;
  void explain(const Error& error, std::chrono::steady_clock::time_point started) override;
  bool alive(int r) const override { return !exited(r); }
  void stage(uint32_t region, std::span<const uint64_t> ids) override;

 private:
  /// One poll() on the watched pidfds: throw_gone for the first rank whose process has exited.
  void poll_processes();
  [[noreturn]] void throw_gone(int rank) const;
  /// Whether rank r's process is known to have exited (only ranks on this host are known).
  bool exited(int r) const;
  /// store.yaml's word on why the dataset is no longer served, asked every withdrawn_poll until
  /// `deadline` (at least once); throw_gone as soon as `rank`, if given, has exited.
  std::string wait_verdict(std::optional<int> rank,
                           std::chrono::steady_clock::time_point deadline) const;
  /// A region's segment was unlinked: says whether the dataset was replaced, unloaded or stopped.
  [[noreturn]] void throw_withdrawn(uint32_t region);
  /// Remembers why the dataset is gone for good (every later batch says the same at once).
  [[noreturn]] void throw_withdrawn(std::string why);

  const ServedDataset& m_data;
  std::vector<uint64_t> m_unstaged;  // a stage call's ids this process has not seen staged
  std::vector<pollfd> m_watched;     // pidfds of the batch's ranks
  std::vector<int> m_watched_ranks;
  std::string m_withdrawn;
};

void ServedWatch::check(std::span<const int> owners) {
  if (!m_withdrawn.empty()) throw Error(ErrorKind::runtime, m_withdrawn);
  m_watched.clear();
  m_watched_ranks.clear();
  for (int r : owners) {
    const ServedRank& rank = m_data.ranks[r];
    // A remote rank that died shows as a read time-out; one not read at all is unreachable.
    if (!rank.on_this_host) continue;
    // A shared mapping outlives its server, so only the process tells whether the store is
    // still whole.
    if (!rank.process && !process_alive(rank.info.pid)) throw_gone(r);
    if (rank.process) {
      m_watched.push_back({.fd = rank.process.get(), .events = POLLIN, .revents = 0});
      m_watched_ranks.push_back(r);
    }
  }
  poll_processes();
  // After the processes: a stopping store's ranks unlink their segments before they exit. A
  // mapping outlives its name, so without this a reader would go on returning a replaced
  // dataset's old rows.
  for (int r : owners) {
    for (uint32_t g : m_data.regions_of[static_cast<std::size_t>(r)]) {
      const ServedRegion& region = m_data.regions[g];
      if (region.mapped() && region.segment.unlinked()) throw_withdrawn(g);
    }
  }
}

void ServedWatch::stage(uint32_t g, std::span<const uint64_t> ids) {
  const ServedRegion& region = m_data.regions[g];
  StagedSamples& staged = *region.staged;
  if (staged.complete()) return;
  m_unstaged.clear();
  for (uint64_t id : ids)
    if (!staged.has(id)) m_unstaged.push_back(id);
  if (m_unstaged.empty()) return;
  const RankInfo& rank = m_data.ranks[static_cast<std::size_t>(region.info.rank)].info;
  StageReply reply;
  try {
    // A first touch reads origin: bounded like a control request, not like a read.
    reply = request_stage(rank.control, m_data.token, m_data.name, region.info.segment, m_unstaged,
                          m_data.table.settings.get_duration("control_timeout"));
  } catch (const Error& e) {
    // What the owner found wrong with the data (a changed source, a bad checksum) stands; any
    // other failure is this rank's, so that a reader with another copy goes there.
    if (dynamic_cast<const StaleError*>(&e) || dynamic_cast<const ChecksumError*>(&e)) throw;
    if (exited(region.info.rank)) throw_gone(region.info.rank);
    throw Error(ErrorKind::runtime,
                fmt::format("rank {} on {} did not stage samples of '{}': {}", rank.rank, rank.host,
                            m_data.name, e.what()),
                {.rank = rank.rank});
  }
  staged.add(m_unstaged);
  if (reply.complete) staged.set_complete();
}

void ServedWatch::poll_processes() {
  if (m_watched.empty()) return;
  int ready = 0;
  do {
    ready = ::poll(m_watched.data(), m_watched.size(), 0);
  } while (ready < 0 && errno == EINTR);
  if (ready < 0) throw IoError("poll on the store's process handles", errno);
  for (std::size_t i = 0; ready > 0 && i < m_watched.size(); ++i) {
    if (m_watched[i].revents != 0) throw_gone(m_watched_ranks[i]);
  }
}

void ServedWatch::throw_gone(int r) const {
  throw Error(ErrorKind::runtime, rank_gone_message(m_data.ranks[r].info, m_data.store),
              {.rank = r});
}

bool ServedWatch::exited(int r) const {
  const ServedRank& rank = m_data.ranks[r];
  if (rank.info.lost) return true;
  if (!rank.process) return rank.on_this_host && !process_alive(rank.info.pid);
  pollfd process{.fd = rank.process.get(), .events = POLLIN, .revents = 0};
  return ::poll(&process, 1, 0) > 0;
}

std::string ServedWatch::wait_verdict(std::optional<int> rank,
                                      std::chrono::steady_clock::time_point deadline) const {
  for (;;) {
    if (rank && exited(*rank)) throw_gone(*rank);
    if (auto why = why_withdrawn(m_data); !why.empty()) return why;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return {};
    std::this_thread::sleep_for(
        std::min<std::chrono::steady_clock::duration>(withdrawn_poll, deadline - now));
  }
}

void ServedWatch::explain(const Error& error, std::chrono::steady_clock::time_point started) {
  // A replace deregisters the old regions: libfabric reports a refused key or a broken
  // connection, which a rank that died gives too; store.yaml or the rank's process (on this
  // host) tells which, once rank 0 has published it or the process is reaped. A time-out has
  // waited read_timeout already: store.yaml as it is now.
  auto deadline = std::chrono::steady_clock::now();
  const auto* transport = dynamic_cast<const TransportError*>(&error);
  if (transport && transport->may_be_withdrawn()) {
    deadline = std::min(deadline + withdrawn_wait,
                        started + m_data.table.settings.get_duration("read_timeout"));
  }
  if (auto why = wait_verdict(error.context().rank, deadline); !why.empty())
    throw_withdrawn(std::move(why));
}

void ServedWatch::throw_withdrawn(uint32_t g) {
  const auto wait = std::min<std::chrono::steady_clock::duration>(
      withdrawn_wait, m_data.table.settings.get_duration("read_timeout"));
  auto why = wait_verdict(std::nullopt, std::chrono::steady_clock::now() + wait);
  if (why.empty()) {
    why = fmt::format(
        "dataset '{}' is no longer served: rank {}'s shared memory {} was removed (is the store at "
        "{} stopping?)",
        m_data.name, m_data.regions[g].info.rank, m_data.regions[g].info.segment,
        m_data.store.string());
  }
  throw_withdrawn(std::move(why));
}

void ServedWatch::throw_withdrawn(std::string why) {
  m_withdrawn = std::move(why);
  throw Error(ErrorKind::runtime, m_withdrawn);
}

}  // namespace

namespace {

std::vector<ServedRegion> served_regions(const StoreDataset& info) {
  std::vector<ServedRegion> out;
  out.reserve(info.regions.size());
  for (const auto& g : info.regions) {
    out.push_back({g, {}, nullptr});
    if (g.lazy) out.back().staged = std::make_unique<StagedSamples>(ShardRange{g.first, g.last});
  }
  return out;
}

std::vector<PlacedRange> ranges_of(const StoreDataset& info) {
  std::vector<PlacedRange> out;
  out.reserve(info.regions.size());
  for (const auto& g : info.regions) out.push_back({g.rank, g.first, g.last});
  return out;
}

}  // namespace

ServedDataset::ServedDataset(std::string name_, std::filesystem::path store_, Index index_,
                             const StoreDataset& info)
    : name(std::move(name_)),
      store(std::move(store_)),
      index(std::move(index_)),
      regions(served_regions(info)),
      placement(ranges_of(info), index.samples()) {
  table.index = &index;
  table.placement = &placement;
}

std::unique_ptr<RouteWatch> ServedDataset::watch() const {
  return std::make_unique<ServedWatch>(*this);
}

std::string why_withdrawn(const ServedDataset& data) {
  StoreDescriptor now;
  try {
    now = StoreDescriptor::read(data.store);
  } catch (const Error&) {
    return fmt::format("dataset '{}' is gone: the store at {} has stopped", data.name,
                       data.store.string());
  }
  for (const auto& d : now.datasets) {
    if (d.name != data.name) continue;
    // A repair drops the regions of ranks lost since: those may go, any other may not.
    const auto listed = [&](const ServedRegion& mine) {
      const auto r = static_cast<std::size_t>(mine.info.rank);
      return (r < now.ranks.size() && now.ranks[r].lost) ||
             std::any_of(d.regions.begin(), d.regions.end(),
                         [&](const StoreRegion& g) { return g.segment == mine.info.segment; });
    };
    if (std::all_of(data.regions.begin(), data.regions.end(), listed)) return {};
    return fmt::format(
        "dataset '{}' was replaced in the store at {} (`ddstage load --replace`) after this reader "
        "opened it; "
        "reopen it",
        data.name, data.store.string());
  }
  return fmt::format("dataset '{}' was unloaded from the store at {}", data.name,
                     data.store.string());
}

std::string rank_gone_message(const RankInfo& rank, const std::filesystem::path& store) {
  const auto what = fmt::format("rank {} (pid {} on {}) is gone: its process has exited", rank.rank,
                                rank.pid, rank.host);
  if (rank.rank == 0)
    return fmt::format("{}, and the store at {} with it; restart the store", what, store.string());
  return fmt::format(
      "{}; once the store marks it lost (peer_timeout), `ddstage load --store {} "
      "--repair` restages its samples on the live ranks",
      what, store.string());
}

}  // namespace ddstage::detail
