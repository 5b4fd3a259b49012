#include "bench_cmd.hpp"

#include "bench_flatten.hpp"
#include "bench_loader.hpp"
#include "bench_load.hpp"

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

  auto store = std::make_shared<BenchStoreOptions>();
  auto* s = bench->add_subcommand("store", "get_batch from a running store per row and batched, vs a memcpy floor");
  s->add_option("--store", store->store, "The store directory")->required();
  s->add_option("--dataset", store->dataset, "The loaded dataset")->required();
  s->add_option("--field", store->field, "Field (required when the dataset has several)");
  s->add_option("--batch", store->batches, "Batch sizes, comma-separated")->delimiter(',')->capture_default_str();
  s->add_option("--samples", store->samples, "Random rows to read per batch size")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  s->add_option("--seed", store->seed, "Seed for the random rows")->capture_default_str();
  s->add_option("--json", store->json, "Also write every figure as JSON to this file");
  s->callback([store, &ctx] { run_bench_store(*store, ctx); });

  setup_bench_flatten(*bench, ctx);
  setup_bench_load(*bench, ctx);
  setup_bench_loader(*bench, ctx);
}

}  // namespace ddstage::cli
