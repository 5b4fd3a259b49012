#include "ddstage/tool/store_server.hpp"

#include <cstring>

#include <spdlog/spdlog.h>

#include "mpi/mpi_session.hpp"
#include "rank_exit.hpp"
#include "server/server_rank.hpp"
#include "signal_watch.hpp"
#include "transport/transport_registry.hpp"

namespace ddstage {

void run_store_server(const ServeOptions& options, int* argc, char*** argv) {
  using detail::TransportId;
  constexpr TransportId offered[] = {TransportId::shm, TransportId::fabric};
  // The name only: whether the fabric is there is asked after MPI_Init, in an agreed step.
  const auto transport =
      detail::parse_transport_name(options.transport, offered, true, "serve --transport");
  detail::RankExit exit;
  // Before MPI_Init: the threads MPI starts inherit the blocked signals, so only the watch
  // takes them, whatever the main thread is blocked in.
  detail::SignalWatch signals([&exit](int sig) {
    spdlog::info("signal {} ({}): freeing this rank's memory and ending", sig, ::strsignal(sig));
    exit.leave(0);
  });
  // Only the main thread calls MPI, and only until every rank serves (ServerRank::run).
  detail::MpiSession mpi(argc, argv, MPI_THREAD_FUNNELED);
  try {
    detail::ServerRank(options, transport, mpi, exit).run();
  } catch (...) {
    if (options.report_failure) options.report_failure(std::current_exception());
    throw;
  }
}

}  // namespace ddstage
