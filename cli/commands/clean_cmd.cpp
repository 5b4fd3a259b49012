#include "commands/clean_cmd.hpp"

#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "ddstage/error.hpp"
#include "ddstage/store_descriptor.hpp"
#include "ddstage/tool/store_cleanup.hpp"
#include "support/progress_line.hpp"

namespace ddstage::cli {
namespace {

namespace fs = std::filesystem;

struct CleanCmdOptions {
  std::string store;
  bool dry_run = false;
  bool force = false;
};

std::string_view kind_name(CleanedFile::Kind kind) {
  switch (kind) {
    case CleanedFile::Kind::segment:
      return "segment";
    case CleanedFile::Kind::lock:
      return "lock";
    case CleanedFile::Kind::fabric_queue:
      return "libfabric shm queue";
    case CleanedFile::Kind::tier_record:
      return "tier list";
  }
  return "file";
}

std::string plural(std::size_t n, const std::string& word) {
  return fmt::format("{} {}{}", n, word, n == 1 ? "" : "s");
}

/// "removed 3 segments (2.4 GiB) and 2 other files of 1 dead store; 1 live store kept".
std::string summary(const CleanReport& r, bool dry_run) {
  std::set<std::string> dead;
  std::set<std::string> live;
  std::size_t segments = 0;
  uint64_t bytes = 0;
  for (const auto& f : r.removed) {
    dead.insert(f.store_id);
    if (f.kind != CleanedFile::Kind::segment) continue;
    ++segments;
    bytes += f.bytes;
  }
  for (const auto& k : r.kept) live.insert(k.store_id);
  std::string out =
      r.removed.empty()
          ? "nothing to clean"
          : fmt::format("{} {} ({}) and {} other file{} of {}",
                        dry_run ? "would remove" : "removed", plural(segments, "segment"),
                        human_bytes(static_cast<double>(bytes)), r.removed.size() - segments,
                        r.removed.size() - segments == 1 ? "" : "s",
                        plural(dead.size(), "dead store"));
  if (!live.empty()) out += fmt::format("; {} kept", plural(live.size(), "live store"));
  if (!r.unlocked.empty())
    out += fmt::format("; {} without a lock file kept", plural(r.unlocked.size(), "rank"));
  return out;
}

/// With --store: the descriptor of a store whose rank 0 ran here and is gone, then the empty
/// directory (a job's store directory must not outlive it).
bool clean_descriptor(const std::string& dir, bool dry_run, const CliContext& out) {
  std::error_code ec;
  bool ok = true;
  if (fs::exists(fs::symlink_status(StoreDescriptor::path_in(dir), ec))) {
    const auto result = clean_store_descriptor(dir, StoreDescriptor::read(dir), dry_run);
    out.note("{}\n", result.message);
    ok = result.outcome != DescriptorCleanup::Outcome::failed;
  }
  if (!dry_run) remove_empty_store_directory(dir);
  return ok;
}

/// The id of the store at `dir` (its store.yaml), or empty when there is none to read.
std::string store_id_in(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(StoreDescriptor::path_in(dir), ec))) return {};
  return StoreDescriptor::read(dir).id;
}

void run_clean(const CleanCmdOptions& opts, const CliContext& ctx) {
  const auto settings = ctx.resolve_settings();
  const auto dir = opts.store.empty() ? settings.get_string("store") : opts.store;
  // A dry run's list is what it exists to print: -q keeps it.
  CliContext out = ctx;
  out.quiet = ctx.quiet && !opts.dry_run;
  // --store on the command line: that store's files only, so that a user cleaning up after
  // their own job leaves other dead stores to their owners; without it (an epilogue, or the
  // store setting alone), every dead store on this node. So does --store once the descriptor is
  // gone: `clean --store` run on every node of a job finds it removed by rank 0's node's.
  const auto only = opts.store.empty() ? std::string() : store_id_in(opts.store);
  if (!opts.store.empty() && only.empty())
    out.note("no store.yaml in {}: cleaning every dead store on this node\n", opts.store);
  const auto report = clean_dead_ranks(only, opts.dry_run, opts.force);
  for (const auto& f : report.removed) {
    out.note("{} {} {} ({}; store {} rank {})\n", opts.dry_run ? "would remove" : "removed",
             kind_name(f.kind), f.path.string(), human_bytes(static_cast<double>(f.bytes)),
             f.store_id, f.rank);
  }
  for (const auto& k : report.kept)
    out.note("store {} rank {}: live (pid {}), kept\n", k.store_id, k.rank, k.pid);
  for (const auto& k : report.unlocked) {
    out.note(
        "store {} rank {}: segments without a lock file (a ddstage older than rank locks?), kept; "
        "--force removes them\n",
        k.store_id, k.rank);
  }
  const bool descriptor_ok = dir.empty() || clean_descriptor(dir, opts.dry_run, out);
  out.note("{}\n", summary(report, opts.dry_run));
  for (const auto& failure : report.failures) fmt::print(stderr, "ddstage: warning: {}\n", failure);
  if (!report.failures.empty()) {
    throw Error(ErrorKind::runtime,
                fmt::format("{} could not be removed: {}", plural(report.failures.size(), "file"),
                            report.failures.front()));
  }
  if (!descriptor_ok)
    throw Error(ErrorKind::runtime, "cannot remove " + StoreDescriptor::path_in(dir).string());
}

}  // namespace

void setup_clean(CLI::App& app, CliContext& ctx) {
  auto opts = std::make_shared<CleanCmdOptions>();
  auto* sub =
      app.add_subcommand("clean",
                         "Remove, on this node, the shared memory of stores whose ranks are gone "
                         "(safe in a job epilogue)");
  sub->add_option("--store", opts->store,
                  "Only that store's files, and DIR/store.yaml when its rank 0 ran on this node "
                  "and is gone (without it: every dead store's files, and the descriptor of the "
                  "setting store, DDSTAGE_STORE, if set)");
  sub->add_flag("--dry-run", opts->dry_run, "Print what would be removed; remove nothing");
  sub->add_flag(
      "--force", opts->force,
      "Also remove segments that have no lock file (left by a ddstage older than rank locks); "
      "never those of a live rank");
  sub->callback([opts, &ctx] { run_clean(*opts, ctx); });
}

}  // namespace ddstage::cli
