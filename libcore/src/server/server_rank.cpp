#include "server/server_rank.hpp"

#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "ddstage/tool/file_descriptor.hpp"
#include "mpi/mpi_agree.hpp"
#include "mpi/mpi_exchange.hpp"
#include "process.hpp"

namespace ddstage::detail {

ServerRank::ServerRank(const ServeOptions& options, std::optional<TransportId> transport,
                       MpiSession& mpi, RankExit& exit)
    : m_options(options),
      m_transport(transport),
      m_mpi(mpi),
      m_exit(exit),
      m_peer_timeout(options.settings.get_duration("peer_timeout")),
      m_host(host_name()) {}

void ServerRank::run() {
  // Rank 0 opens a connection per rank for each command: at the common soft limit of 1,024
  // descriptors a store of a thousand ranks would run out, so take what the hard limit allows.
  spdlog::debug("rank {}: open-file limit {}", m_mpi.rank(), raise_open_file_limit());
  const auto startup = start();
  learn_hosts();
  // Before any heartbeat goes to rank 0's control address: were it one only rank 0's host
  // reaches, a rank on another host would count rank 0 lost while the refusal is on its way.
  refuse_loopback(is_root() ? m_control->address() : "", "");
  start_watching(startup);
  prepare_serving(startup);
  const auto fabric = start_transports();
  const auto ranks = gather(
      RankStartup{m_host, ::getpid(), m_mem_limit, fabric, m_control->address(), m_tiers->names()},
      comm());
  // Every rank serves: from here on MPI is no part of the store, so that a rank's death is
  // nobody else's error (with mpiexec --enable-recovery, or srun --kill-on-bad-exit=0 --no-kill,
  // the launcher lets the others run too).
  m_mpi.finalize();
  m_serving = true;
  if (m_mpi.size() > 1) {
    m_launcher.emplace([this](pid_t launcher) {
      spdlog::info("the process that launched this rank (pid {}) is gone: the job is over",
                   launcher);
      m_exit.leave(0);
    });
  }
  // From here on an error has no caller to go to: the rank frees what it holds and ends.
  try {
    if (is_root()) {
      {
        std::lock_guard lock(m_descriptor_mutex);
        describe(ranks);
        publish_locked();
      }
      spdlog::info("serving {} rank(s) at {} (control {})", m_mpi.size(), m_options.dir.string(),
                   m_control->address());
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
