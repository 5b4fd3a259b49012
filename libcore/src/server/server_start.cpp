// Start-up: rank 0 makes sure DIR holds no live store and opens the control socket, every rank
// claims its lock, and the ranks start watching each other.
#include <algorithm>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "control/control_channel.hpp"
#include "ddstage/tool/store_cleanup.hpp"
#include "ddstage/tool/store_control.hpp"
#include "mpi/mpi_agree.hpp"
#include "mpi/mpi_exchange.hpp"
#include "process.hpp"
#include "rank_lock.hpp"
#include "server/server_rank.hpp"

namespace ddstage::detail {
namespace {

namespace fs = std::filesystem;

/// True when the store `old` describes can be replaced: its rank 0 ran on this host and is
/// proven gone. Only this host can tell; a descriptor without an id (an older ddstage) has no
/// lock to prove it by, so its rank 0's pid must be dead.
bool proven_gone(const StoreDescriptor& old) {
  const auto& rank0 = old.ranks.front();
  if (rank0.host != host_name()) return false;
  if (old.id.empty()) return !process_alive(rank0.pid);
  return rank_gone_here(old.id, 0, rank0.pid);
}

/// Rank 0, when DIR/store.yaml exists: UsageError unless it names a store proven gone, whose
/// files on this node are then removed.
void replace_old_store(const fs::path& dir) {
  const auto path = StoreDescriptor::path_in(dir);
  StoreDescriptor old;
  try {
    old = StoreDescriptor::read(dir);
  } catch (const IndexError& e) {
    throw UsageError(fmt::format(
        "{} is not a store descriptor this ddstage can read ({}), so nothing proves its "
        "store gone: if no store uses {} any more, remove it",
        path.string(), e.what(), dir.string()));
  }
  try {
    control_request(old.control, old.token, status_request(), std::chrono::seconds(2));
  } catch (const UsageError&) {
    // It answered, if only to refuse: it runs.
  } catch (const Error& e) {
    if (!proven_gone(old)) {
      const auto& host = old.ranks.front().host;
      throw UsageError(fmt::format(
          "the store at {} does not answer (rank 0 on {}, control {}) but is not proven "
          "gone: run `ddstage stop --store {}` (or `ddstage clean --store {}` on {} once "
          "it has ended)",
          dir.string(), host, old.control, dir.string(), dir.string(), host));
    }
    spdlog::warn("replacing the stale store descriptor {} ({})", path.string(), e.what());
    clean_up_dead_store(dir, old);
    return;
  }
  throw UsageError(
      fmt::format("a store is already running at {} (control {}); stop it first with "
                  "`ddstage stop --store {}`",
                  dir.string(), old.control, dir.string()));
}

}  // namespace

std::string ServerRank::start_rank0() {
  StoreDescriptor::prepare_directory(m_options.dir);
  if (fs::exists(StoreDescriptor::path_in(m_options.dir))) replace_old_store(m_options.dir);
  m_token = random_token();
  m_peers.emplace(
      m_mpi.size(), m_peer_timeout, [this](int rank, std::chrono::milliseconds silence) {
        const auto why =
            fmt::format("no heartbeat for {:.0f} s", static_cast<double>(silence.count()) / 1000.0);
        // Before MPI is finalised the others may wait for it in a collective.
        if (!m_serving) lost(fmt::format("lost {} ({})", rank_label(rank), why));
        mark_lost(rank, why);
      });
  m_control.emplace(
      m_options.listen, m_token,
      [this](const Message& request, bool busy) { return front_desk(request, busy); },
      ControlServerLimits{}, stage_divert());
  return random_token().substr(0, 12);
}

Startup ServerRank::start() {
  // Rank 0 decides whether to serve; every rank learns the outcome, the store id and where to
  // send its heartbeats.
  Startup startup;
  agree(caught([&] {
          if (!is_root()) return;
          m_store_id = start_rank0();
          startup = {m_store_id, m_control->address(), m_token};
        }),
        [](int) { return std::string(); });
  startup = broadcast(startup, comm());
  m_store_id = startup.id;
  m_token = startup.token;
  // Before any segment exists: from here on, every way out frees what this rank holds.
  agree(caught([&] {
          m_exit.claim(m_store_id, m_mpi.rank(), is_root() ? m_options.dir : fs::path());
        }),
        [](int rank) { return fmt::format("rank {}: ", rank); });
  return startup;
}

void ServerRank::start_watching(const Startup& startup) {
  if (is_root()) {
    m_peers->watch();
    return;
  }
  m_heartbeat.emplace(
      startup.control, startup.token, m_mpi.rank(), m_peer_timeout,
      [this, control = startup.control](std::chrono::milliseconds silence,
                                        const std::optional<std::string>& refusal) {
        if (refusal) {
          lost(fmt::format("{} (control {}) no longer counts this rank in the store ({})",
                           rank_label(0), control, *refusal));
        }
        lost(fmt::format("lost {} (control {}: no answer for {:.0f} s)", rank_label(0), control,
                         static_cast<double>(silence.count()) / 1000.0));
      });
}

void ServerRank::prepare_serving(const Startup& startup) {
  agree(caught([&] {
          m_tiers.emplace(parse_tier_spec(m_options.settings.get_string("tier")), m_mem_limit);
          m_tier_record_name =
              m_exit.track(TierRecord::path_for(m_store_id, m_mpi.rank()).string());
          m_tier_record = TierRecord(m_store_id, m_mpi.rank(), *m_tiers);
          if (is_root()) return;
          // Nothing but rank 0's parts comes here; the front desk queues them all.
          m_control.emplace(
              listen_beside(startup.control), m_token,
              [](const Message&, bool) { return std::nullopt; }, ControlServerLimits{},
              stage_divert());
        }),
        [this](int rank) { return rank_label(rank) + ": "; });
}

void ServerRank::learn_hosts() {
  const auto hosts = allgather(m_host, comm());
  {
    std::lock_guard lock(m_hosts_mutex);
    m_hosts = hosts;
  }
  // Memory: an explicit limit, or 80% of what is available now, shared by this node's ranks.
  const auto on_node = std::max<std::ptrdiff_t>(1, std::count(hosts.begin(), hosts.end(), m_host));
  m_mem_limit =
      m_options.mem_limit ? m_options.mem_limit : default_mem_limit(static_cast<int>(on_node));
}

}  // namespace ddstage::detail
