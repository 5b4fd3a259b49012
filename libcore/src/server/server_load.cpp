// Loads and repairs. Rank 0 plans the regions (placement.hpp) and stages them in agreed parts,
// so that either every live rank holds its new regions or none does (a dataset they replace
// stays): check, fill, commit, publish. A repair stages the regions that bring a dataset back to
// its copies, beside those held now.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddstage/tool/human_bytes.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "ddstage/tool/shard_loader.hpp"
#include "server/server_rank.hpp"

namespace ddstage::detail {
namespace {

/// Characters safe in a shared-memory name; the dataset name itself is kept as given.
std::string segment_safe(const std::string& name) {
  std::string out;
  for (char c : name.substr(0, 48))
    out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_';
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Error lost_during_load(const std::string& rank) {
  return Error(ErrorKind::runtime, fmt::format("{} was lost during the load; nothing was loaded: "
                                               "load again to place its regions elsewhere",
                                               rank));
}

uint64_t region_bytes(const Index& index, const RegionSpan& span) {
  return ShardLayout(index, ShardRange{span.first, span.last}).total_bytes();
}

/// The index a part names, as rank 0 saw it: IndexError when this rank sees other bytes (an
/// index rewritten meanwhile, or another file system view), which would mix two datasets.
Index open_as_rank0_saw(const PartCommand& command, int rank) {
  auto index = Index::open(command.load.index, Index::Holding::copied);
  if (index.fingerprint() != command.fingerprint) {
    throw IndexError(
        fmt::format("rank {} sees another index at {} than rank 0 did (it changed "
                    "meanwhile, or the ranks see different files)",
                    rank, command.load.index));
  }
  for (const auto& span : command.regions) {
    if (span.first > span.last || span.last > index.samples())
      throw UsageError(
          fmt::format("region {}..{} is not in {}", span.first, span.last, command.load.index));
  }
  return index;
}

}  // namespace

uint64_t ServerRank::memory_used() const {
  uint64_t used = 0;
  for (const auto* held : {&m_loaded, &m_pending}) {
    for (const auto& [name, shards] : *held)
      for (const auto& shard : shards) used += shard.bytes().size();
  }
  return used;
}

void ServerRank::check_regions(const PartCommand& command) {
  const auto index = open_as_rank0_saw(command, m_mpi.rank());
  if (!command.load.allow_stale) index.check_all_fresh();
  // A trial: the reservations go again at once, the fill makes its own.
  reserve(command, index, false);
}

std::vector<TierSet::Reservation> ServerRank::reserve(const PartCommand& command,
                                                      const Index& index, bool name_new) {
  std::vector<const TierSet::Reservation*> old;
  if (!command.add) {
    if (const auto held = m_loaded.find(command.dataset); held != m_loaded.end())
      for (const auto& shard : held->second) old.push_back(&shard.reservation);
  }
  const auto what =
      fmt::format("dataset '{}' on rank {} on {}", command.dataset, m_mpi.rank(), m_host);
  std::vector<TierSet::Reservation> out;
  for (std::size_t k = 0; k < command.regions.size(); ++k) {
    // The generation makes each region's name new on this rank; the rank ends it, for `clean`.
    const uint64_t generation = name_new ? ++m_generation : m_generation + 1 + k;
    out.push_back(m_tiers->allocate(segment_base(command.dataset, generation),
                                    region_bytes(index, command.regions[k]),
                                    {.what = what,
                                     .replacing = k < old.size() ? old[k] : nullptr,
                                     .mem_limit = command.load.mem_limit}));
  }
  return out;
}

std::string ServerRank::segment_base(const std::string& dataset, uint64_t generation) const {
  return fmt::format("ddstage-{}-{}-g{}-{}-r{}", m_store_id, segment_safe(dataset), generation,
                     random_token().substr(0, 12), m_mpi.rank());
}

std::pair<RankExit::Tracked, ShmSegment> ServerRank::create_segment(
    TierSet::Reservation& reservation, const std::string& dataset, uint64_t bytes) {
  constexpr int attempts = 4;
  for (int attempt = 1;; ++attempt) {
    // Tracked before it exists: a signal during the load frees it too.
    auto tracked = m_exit.track(reservation.segment());
    try {
      return {std::move(tracked), ShmSegment::create(reservation.segment(), bytes)};
    } catch (const IoError& e) {
      if (e.native_code() != EEXIST || attempt == attempts) throw;
      spdlog::warn("rank {}: {} exists, and not as this store's: taking another name", m_mpi.rank(),
                   reservation.segment());
      reservation.rename(segment_base(dataset, m_generation));
    }
  }
}

std::optional<PublishedFabric> ServerRank::register_fabric([[maybe_unused]] LoadedShard& shard) {
#if DDSTAGE_HAVE_FABRIC
  if (!m_fabric) return std::nullopt;
  shard.fabric.emplace(*m_fabric, shard.bytes());
  return PublishedFabric{shard.fabric->info().key, shard.fabric->info().base};
#else
  return std::nullopt;
#endif
}

std::vector<PublishedRegion> ServerRank::fill_regions(
    const PartCommand& command,
    const std::function<void(uint64_t done, uint64_t total)>& progress) {
  const auto index = open_as_rank0_saw(command, m_mpi.rank());
  uint64_t total = 0;
  for (const auto& span : command.regions) total += region_bytes(index, span);
  auto reservations = reserve(command, index, true);
  std::vector<LoadedShard> shards;
  std::vector<PublishedRegion> published;
  uint64_t before = 0;
  for (std::size_t k = 0; k < command.regions.size(); ++k) {
    const auto& span = command.regions[k];
    const uint64_t need = region_bytes(index, span);
    auto [tracked, created] = create_segment(reservations[k], command.dataset, need);
    const std::string segment = reservations[k].segment();
    const std::string tier(reservations[k].label());
    ShardLoadOptions options{.verify = command.load.verify,
                             .allow_stale = command.load.allow_stale,
                             .streams = command.load.streams};
    options.progress = [&](uint64_t done, uint64_t of) {
      const double f = of ? static_cast<double>(done) / static_cast<double>(of) : 1.0;
      progress(before + static_cast<uint64_t>(f * static_cast<double>(need)), total);
    };
    const ShardRange range{span.first, span.last};
    // A lazy region is laid out empty: its rows come from origin as readers ask for them.
    LoadedShard shard{
        std::move(tracked), range, std::move(reservations[k]),
        command.load.lazy ? ShmSegment() : load_shard(index, range, std::move(created), options)};
    if (command.load.lazy) {
      shard.lazy = LazyRegions::Entry(
          m_lazy, command.dataset, std::move(created), open_as_rank0_saw(command, m_mpi.rank()),
          ShardLayout(index, range),
          {.allow_stale = command.load.allow_stale, .verify = command.load.verify});
    }
    published.push_back({span, need, segment, tier, register_fabric(shard), command.load.lazy});
    shards.push_back(std::move(shard));
    before += need;
  }
  progress(total, total);
  m_pending[command.dataset] = std::move(shards);
  return published;
}

std::vector<StoreRegion> ServerRank::stage(const std::string& name, const LoadCommand& args,
                                           uint64_t fingerprint,
                                           const std::vector<PlacedRange>& placed, bool add,
                                           LoadReporter& reporter) {
  const PartCommand base{
      .op = "check", .load = args, .dataset = name, .add = add, .fingerprint = fingerprint};
  const auto hosts = live_hosts();
  std::map<int, PartCommand> parts;
  // A load reaches every live rank: each drops what it held of a dataset the load replaces.
  for (std::size_t r = 0; !add && r < hosts.size(); ++r)
    if (!hosts[r].empty()) parts.emplace(static_cast<int>(r), base);
  for (const auto& p : placed)
    parts.try_emplace(p.rank, base).first->second.regions.push_back({p.first, p.last});
  auto turn_to = [&](const char* op) {
    const auto live = live_hosts();
    std::erase_if(
        parts, [&](const auto& p) { return live.at(static_cast<std::size_t>(p.first)).empty(); });
    for (auto& [rank, part] : parts) part.op = op;
  };

  // Check: nothing is allocated yet.
  raise_failure(on_ranks(parts, m_peer_timeout));

  // Fill: the client hears the slowest rank's progress.
  std::mutex progress_mutex;
  std::map<int, double> fractions;
  for (const auto& [rank, part] : parts)
    if (!part.regions.empty()) fractions[rank] = 0;
  auto progress = [&](int rank, double fraction) {
    std::lock_guard lock(progress_mutex);
    fractions[rank] = fraction;
    double slowest = 1;
    for (const auto& [r, f] : fractions) slowest = std::min(slowest, f);
    reporter.update(static_cast<uint64_t>(slowest * 1e6), 1000000);
  };
  // A rank lost since its check would leave its regions out: the load would start degraded.
  const auto live = live_hosts();
  for (const auto& [rank, part] : parts) {
    if (live.at(static_cast<std::size_t>(rank)).empty()) throw lost_during_load(rank_label(rank));
  }
  turn_to("fill");
  const auto filled = on_ranks(parts, m_peer_timeout, progress);
  // A rank lost since its fill's reply is one whose regions nobody could read.
  std::optional<int> lost_since;
  const auto still = live_hosts();
  for (const auto& [rank, part] : parts)
    if (!part.regions.empty() && still.at(static_cast<std::size_t>(rank)).empty())
      lost_since = rank;
  if (filled.failure || lost_since) {
    turn_to("abort");
    on_ranks(parts, m_peer_timeout);
    if (filled.failure) raise_failure(filled);
    throw lost_during_load(rank_label(*lost_since));
  }

  // Commit: a rank lost now leaves its new regions published with it lost (the dataset is then
  // degraded, as after any later loss).
  turn_to("commit");
  if (const auto committed = on_ranks(parts, m_peer_timeout); committed.failure) {
    spdlog::warn("'{}': {} could not serve its new regions: {}", name,
                 rank_label(committed.failure->first), committed.failure->second.text);
  }
  std::vector<StoreRegion> regions;
  for (const auto& [rank, reply] : filled.replies) {
    for (const auto& r : reply.regions) {
      regions.push_back({.rank = rank,
                         .first = r.span.first,
                         .last = r.span.last,
                         .segment = r.segment,
                         .bytes = r.bytes,
                         .tier = r.tier,
                         .lazy = r.lazy,
                         .fabric = r.fabric.has_value(),
                         .fabric_key = r.fabric ? r.fabric->key : 0,
                         .fabric_base = r.fabric ? r.fabric->base : 0});
    }
  }
  return regions;
}

std::optional<StoreDataset> ServerRank::dataset_named(const std::string& name) const {
  std::lock_guard lock(m_descriptor_mutex);
  for (const auto& d : m_descriptor.datasets)
    if (d.name == name) return d;
  return std::nullopt;
}

Message ServerRank::load(const LoadCommand& args) {
  // Started before the index is opened: checking a large tree can outlast control_timeout.
  std::optional<LoadReporter> reporter;
  reporter.emplace(args.progress ? m_client : nullptr, std::chrono::seconds(5), true);
  const auto t0 = std::chrono::steady_clock::now();
  const auto index = Index::open(args.index, Index::Holding::copied);
  const auto& manifest = index.manifest();
  const std::string name = args.name.empty() ? manifest.name : args.name;
  reporter->describe(name, manifest.total_bytes, index.samples());
  if (dataset_named(name) && !args.replace)
    throw UsageError("dataset '" + name + "' is already loaded; pass --replace to replace it");
  std::string warning;
  const auto placed = plan_copies(index, live_hosts(), args.replicas, &warning);
  if (!warning.empty()) spdlog::warn("'{}': {}", name, warning);
  auto regions = stage(name, args, index.fingerprint(), placed, false, *reporter);
  reporter.reset();  // its last word (100%) before the result's
  const double seconds = seconds_since(t0);
  publish_dataset({.name = name,
                   .index = std::filesystem::absolute(args.index),
                   .index_fingerprint = index.fingerprint(),
                   .replicas = args.replicas,
                   .regions = std::move(regions)});
  const LoadResult result{name,    index.samples(), manifest.total_bytes,
                          seconds, args.verify,     warning};
  spdlog::info("loaded '{}': {} samples, {} in {:.2f} s", result.name, result.samples,
               human_bytes(static_cast<double>(result.bytes)), seconds);
  return load_reply(result);
}

Message ServerRank::repair(const ControlCommand& command) {
  std::vector<StoreDataset> datasets;
  {
    std::lock_guard lock(m_descriptor_mutex);
    datasets = m_descriptor.datasets;
  }
  if (!command.dataset.empty()) {
    std::erase_if(datasets, [&](const auto& d) { return d.name != command.dataset; });
    if (datasets.empty()) throw UsageError("no dataset '" + command.dataset + "' is loaded");
  }
  std::vector<LoadResult> repaired;
  for (auto& d : datasets) {
    std::optional<LoadReporter> reporter;
    reporter.emplace(command.load.progress ? m_client : nullptr, std::chrono::seconds(5), true);
    const auto t0 = std::chrono::steady_clock::now();
    const auto index = Index::open(d.index, Index::Holding::copied);
    if (index.fingerprint() != d.index_fingerprint) {
      throw UsageError(fmt::format(
          "dataset '{}': its index {} changed since it was loaded, so a repair would mix two "
          "datasets: load it again with --replace",
          d.name, d.index.string()));
    }
    const auto hosts = live_hosts();
    std::vector<PlacedRange> held;
    for (const auto& g : d.regions) held.push_back({g.rank, g.first, g.last});
    const auto added = plan_repair(index, held, hosts, d.replicas);
    if (added.empty()) continue;
    reporter->describe(d.name, index.manifest().total_bytes, index.samples());
    LoadCommand args = command.load;
    args.index = d.index.string();
    args.name = d.name;
    auto regions = stage(d.name, args, d.index_fingerprint, added, true, *reporter);
    reporter.reset();
    LoadResult result{.name = d.name, .seconds = seconds_since(t0), .verified = args.verify};
    for (const auto& g : regions) {
      result.samples += g.last - g.first;
      result.bytes += g.bytes;
    }
    // A lost rank is never taken back: its regions go once others hold its samples.
    std::erase_if(d.regions, [&](const auto& g) {
      return hosts.at(static_cast<std::size_t>(g.rank)).empty();
    });
    d.regions.insert(d.regions.end(), regions.begin(), regions.end());
    publish_dataset(std::move(d));
    spdlog::info("repaired '{}': {} samples, {} added in {:.2f} s", result.name, result.samples,
                 human_bytes(static_cast<double>(result.bytes)), result.seconds);
    repaired.push_back(result);
  }
  return repair_reply(repaired);
}

Message ServerRank::unload(const std::string& name) {
  if (!dataset_named(name)) throw UsageError("no dataset '" + name + "' is loaded");
  std::map<int, PartCommand> parts;
  const auto hosts = live_hosts();
  for (std::size_t r = 0; r < hosts.size(); ++r)
    if (!hosts[r].empty())
      parts.emplace(static_cast<int>(r), PartCommand{.op = "unload", .dataset = name});
  // A rank lost meanwhile has freed its regions with its process.
  on_ranks(parts, m_peer_timeout);
  std::lock_guard lock(m_descriptor_mutex);
  std::erase_if(m_descriptor.datasets, [&](const auto& d) { return d.name == name; });
  publish_locked();
  return ok_reply();
}

}  // namespace ddstage::detail
