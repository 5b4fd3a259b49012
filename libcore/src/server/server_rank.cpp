#include "server/server_rank.hpp"

#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "mpi/mpi_agree.hpp"
#include "mpi/mpi_exchange.hpp"
#include "process.hpp"

namespace ddstage::detail {

ServerRank::ServerRank(const ServeOptions& options, std::optional<TransportId> transport,
                       const MpiSession& mpi, RankExit& exit)
    : m_options(options),
      m_transport(transport),
      m_mpi(mpi),
      m_exit(exit),
      m_peer_timeout(options.settings.get_duration("peer_timeout")),
      m_host(host_name()) {}

void ServerRank::run() {
  start_watching(start());
  learn_hosts();
  const auto fabric = start_transports();
  const auto ranks = gather(RankStartup{m_host, ::getpid(), m_mem_limit, fabric}, comm());
  record_memory();  // what a status answered during the first command reports
  // From here on an error has no caller to go to that could keep the ranks in step (MPI_Finalize
  // would wait for ranks still serving): the rank frees what it holds and ends.
  try {
    if (is_root()) {
      describe(ranks);
      publish();
      spdlog::info("serving {} rank(s) at {} (control {})", m_mpi.size(), m_options.dir.string(),
                   m_descriptor.control);
      serve_rank0();
    } else {
      serve_others();
    }
  } catch (const std::exception& e) {
    lost(fmt::format("rank {} on {} cannot go on serving: {}", m_mpi.rank(), m_host, e.what()));
  }
}

void ServerRank::agree(const std::exception_ptr& failure,
                       const std::function<std::string(int rank)>& prefix) const {
  if (const auto first = first_error(failure, comm())) first->error.raise(prefix(first->rank));
}

void ServerRank::agree_on_command(const std::exception_ptr& failure) const {
  agree(failure,
        [this](int rank) { return m_mpi.size() == 1 ? std::string() : rank_label(rank) + ": "; });
}

void ServerRank::lost(const std::string& why) {
  spdlog::error("{}: freeing this rank's memory and ending", why);
  m_exit.leave(1);
}

std::string ServerRank::rank_label(int rank) const {
  std::lock_guard lock(m_hosts_mutex);
  const auto r = static_cast<std::size_t>(rank);
  return r < m_hosts.size() ? fmt::format("rank {} on {}", rank, m_hosts[r])
                            : fmt::format("rank {}", rank);
}

}  // namespace ddstage::detail
