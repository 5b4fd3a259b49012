#include "bench_cmd.hpp"

#include "bench_flatten.hpp"
#include "bench_loader.hpp"
#include "bench_load.hpp"
#include "bench_store.hpp"

namespace ddstage::cli {

void setup_bench(CLI::App& app, CliContext& ctx) {
  auto* bench = app.add_subcommand("bench", "Measure read and flatten speed against same-run baselines");
  bench->require_subcommand(1);

  auto origin = std::make_shared<BenchOriginOptions>();
  auto* o = bench->add_subcommand("origin", "Per-sample reads: index + pread vs the HDF5 API, same samples");
  o->add_option("dataset", origin->dataset, "The index directory (DATASET.ddx)")->required();
  o->add_option("--samples", origin->samples, "Random samples to read")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  o->add_option("--seed", origin->seed, "Seed for the random sample choice")->capture_default_str();
  o->add_option("--json", origin->json, "Also write every figure as JSON to this file");
  o->add_flag("--allow-stale", origin->allow_stale, "Read sources that changed after flattening");
  o->callback([origin, &ctx] { run_bench_origin(*origin, ctx); });

  setup_bench_store(*bench, ctx);
  setup_bench_flatten(*bench, ctx);
  setup_bench_load(*bench, ctx);
  setup_bench_loader(*bench, ctx);
}

}  // namespace ddstage::cli
