// Loads and unloads. A load goes in agreed phases, so that either every rank holds the new
// shard or none does (a dataset it replaces stays): check, fill, register, publish.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddstage/tool/human_bytes.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "ddstage/tool/shard_loader.hpp"
#include "mpi/mpi_agree.hpp"
#include "mpi/mpi_exchange.hpp"
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

}  // namespace

LoadPlan ServerRank::plan_load(const LoadCommand& args, LoadReporter* reporter) const {
  LoadPlan plan{Index::open(args.index), args.name};
  const auto& manifest = plan.index.manifest();
  if (plan.name.empty()) plan.name = manifest.name;
  if (reporter) reporter->describe(plan.name, manifest.total_bytes, plan.index.samples());
  if (m_loaded.contains(plan.name) && !args.replace) {
    throw UsageError("dataset '" + plan.name + "' is already loaded; pass --replace to replace it");
  }
  if (!args.allow_stale) plan.index.check_all_fresh();
  plan.range = ShardPlan::balance(plan.index, m_mpi.size()).range(m_mpi.rank());
  plan.need = ShardLayout(plan.index, plan.range).total_bytes();
  const uint64_t limit = args.mem_limit ? args.mem_limit : m_mem_limit;
  uint64_t used = 0;
  for (const auto& [n, shard] : m_loaded) used += n == plan.name ? 0 : shard.segment.bytes().size();
  if (used + plan.need > limit) {
    throw UsageError(fmt::format(
        "dataset '{}' does not fit: rank {} on {} needs {} bytes, has {} of {} free "
        "(--mem-limit)",
        plan.name, m_mpi.rank(), m_host, plan.need, limit - std::min(limit, used), limit));
  }
  return plan;
}

std::optional<PublishedRegion> ServerRank::register_fabric([[maybe_unused]] LoadedShard& shard) {
#if DDSTAGE_HAVE_FABRIC
  if (!m_fabric) return std::nullopt;
  shard.fabric.emplace(*m_fabric, shard.segment.bytes());
  return PublishedRegion{shard.fabric->info().key, shard.fabric->info().base};
#else
  return std::nullopt;
#endif
}

Message ServerRank::load(const LoadCommand& args) {
  std::optional<LoadReporter> reporter;
  if (is_root()) reporter.emplace(args.progress ? m_client : nullptr);
  LoadReporter* const report = reporter ? &*reporter : nullptr;
  // Phase 1, nothing allocated yet: can every rank open the index and hold its shard?
  std::optional<LoadPlan> plan;
  agree_on_command(caught([&] { plan.emplace(plan_load(args, report)); }));

  // Phase 2: every rank loads; if one fails, all drop what they loaded (the old dataset stays).
  const auto t0 = std::chrono::steady_clock::now();
  const std::string segment = fmt::format("/ddstage-{}-{}-g{}-r{}", m_store_id,
                                          segment_safe(plan->name), ++m_generation, m_mpi.rank());
  // Tracked before it exists: a signal during the load frees it too.
  auto tracked = m_exit.track(segment);
  std::optional<ShmSegment> filled;
  agree_on_command(caught([&] {
    ShardLoadOptions options{
        .verify = args.verify, .allow_stale = args.allow_stale, .streams = args.streams};
    if (report)
      options.progress = [report](uint64_t done, uint64_t total) { report->update(done, total); };
    filled = load_shard(plan->index, plan->range, segment, options);
  }));
  const double seconds = max_over_ranks(seconds_since(t0), comm());
  reporter.reset();  // kept until every rank is done: its keepalives cover the wait for the slowest
  LoadedShard shard{std::move(tracked), std::filesystem::absolute(args.index), plan->range,
                    std::move(*filled)};
  std::optional<PublishedRegion> region;
  agree_on_command(caught([&] { region = register_fabric(shard); }));
  // A replaced shard is destroyed, not move-assigned: its registration goes before its memory
  // (clients could still read it by its old key) and its tracking after (a signal in between
  // must still find the old segment's name).
  m_loaded.erase(plan->name);
  m_loaded.emplace(plan->name, std::move(shard));

  const auto shards = gather(PublishedShard{plan->need, segment, region}, comm());
  if (!is_root()) return {};
  publish_dataset(*plan, args.index, shards);
  const LoadResult result{plan->name, plan->index.samples(), plan->index.manifest().total_bytes,
                          seconds, args.verify};
  spdlog::info("loaded '{}': {} samples, {} in {:.2f} s", result.name, result.samples,
               human_bytes(static_cast<double>(result.bytes)), seconds);
  return load_reply(result);
}

Message ServerRank::unload(const std::string& name) {
  if (!m_loaded.contains(name)) throw UsageError("no dataset '" + name + "' is loaded");
  m_loaded.erase(name);  // unlinks this rank's segment
  if (is_root()) {
    std::erase_if(m_descriptor.datasets, [&](const auto& d) { return d.name == name; });
    publish();
  }
  return ok_reply();
}

}  // namespace ddstage::detail
