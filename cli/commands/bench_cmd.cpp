#include "commands/bench_cmd.hpp"

#include "bench/bench_control.hpp"
#include "bench/bench_fabric_raw.hpp"
#include "bench/bench_failover.hpp"
#include "bench/bench_flatten.hpp"
#include "bench/bench_index.hpp"
#include "bench/bench_load.hpp"
#include "bench/bench_loader.hpp"
#include "bench/bench_origin.hpp"
#include "bench/bench_store.hpp"
#include "bench/bench_tier.hpp"

namespace ddstage::cli {

void setup_bench(CLI::App& app, CliContext& ctx) {
  auto* bench =
      app.add_subcommand("bench", "Measure read and flatten speed against same-run baselines");
  bench->require_subcommand(1);

  setup_bench_origin(*bench, ctx);
  setup_bench_store(*bench, ctx);
  setup_bench_fabric_raw(*bench, ctx);
  setup_bench_control(*bench, ctx);
  setup_bench_failover(*bench, ctx);
  setup_bench_flatten(*bench, ctx);
  setup_bench_index(*bench, ctx);
  setup_bench_load(*bench, ctx);
  setup_bench_loader(*bench, ctx);
  setup_bench_tier(*bench, ctx);
}

}  // namespace ddstage::cli
