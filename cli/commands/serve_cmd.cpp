#include "commands/serve_cmd.hpp"

#include <memory>
#include <string>

#include "ddstage/config.hpp"
#include "ddstage/error.hpp"
#include "ddstage/settings.hpp"
#include "support/error_line.hpp"
#include "support/store_access.hpp"
#if DDSTAGE_HAVE_MPI
#include "ddstage/tool/store_server.hpp"
#endif

namespace ddstage::cli {
namespace {

struct ServeOptions {
  std::string store;
  std::string listen;
  std::string mem_limit;
};

void run_serve(const ServeOptions& opts, const CliContext& ctx) {
  auto settings = ctx.resolve_settings();
  const auto dir = store_dir(opts.store, settings);
#if DDSTAGE_HAVE_MPI
  const auto transport = settings.get_string("transport");
  run_store_server({dir, opts.listen, transport, parse_mem_limit(opts.mem_limit),
                    std::move(settings), report_exception},
                   ctx.argc, ctx.argv);
#else
  throw UsageError(
      "this ddstage was built without MPI (DDSTAGE_WITH_MPI=OFF): it cannot serve a store");
#endif
}

}  // namespace

void setup_serve(CLI::App& app, CliContext& ctx) {
  auto opts = std::make_shared<ServeOptions>();
  auto* sub = app.add_subcommand(
      "serve", "Run a store: one rank per MPI process (mpiexec/srun), until `stop`");
  add_store_option(*sub, opts->store);
  sub->add_option("--listen", opts->listen,
                  "Control socket HOST[:PORT] on rank 0 (default: this host's name, any port)");
  add_setting_option(
      *sub, ctx, "--transport", "transport",
      "What the ranks offer besides shared memory: auto (libfabric when on several hosts), shm, or "
      "fabric (setting transport)");
  add_setting_option(*sub, ctx, "--tier", "tier",
                     "Where each rank keeps its regions, first with room first: memory (up to "
                     "--mem-limit), then files on node-local storage, nvme:DIR[:SIZE] (setting "
                     "tier)");
  sub->add_option(
      "--mem-limit", opts->mem_limit,
      "Bytes each rank may hold, e.g. 8G or 8GiB (binary either way; default: 80% of available "
      "memory / ranks on the node)");
  sub->callback([opts, &ctx] { run_serve(*opts, ctx); });
}

}  // namespace ddstage::cli
