#include "ddstage/tool/store_control.hpp"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <span>
#include <thread>

#include <fmt/format.h>

#include <spdlog/spdlog.h>

#include "control/control_channel.hpp"
#include "control/control_messages.hpp"
#include "control/stage_messages.hpp"
#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "ddstage/tool/file_descriptor.hpp"
#include "ddstage/tool/placement.hpp"
#include "ddstage/tool/store_cleanup.hpp"
#include "process.hpp"
#include "rank_lock.hpp"

namespace ddstage {
namespace {

using detail::Message;

/// Sends one request and returns the reply, turning a refusal into the server's error (of the
/// class the server gave it, so that exit codes survive the round trip).
Message send(const StoreDescriptor& d, const Message& request, std::chrono::milliseconds timeout,
             const std::function<void(const Message&)>& on_interim = {}) {
  Message reply = detail::control_request(d.control, d.token, request, timeout, on_interim);
  if (const auto failure = detail::failure_of(reply)) failure->raise();
  return reply;
}

/// A dataset's regions and health; `live` and `hosts` by rank.
DatasetStatus dataset_status(const StoreDataset& d, const std::vector<bool>& live,
                             std::span<const std::string> hosts) {
  DatasetStatus s{.name = d.name, .index = d.index, .replicas = d.replicas};
  s.samples_per_rank.assign(hosts.size(), 0);
  s.bytes_per_rank.assign(hosts.size(), 0);
  std::vector<PlacedRange> held;
  for (const auto& g : d.regions) {
    const auto r = static_cast<std::size_t>(g.rank);
    s.samples = std::max(s.samples, g.last);
    s.samples_per_rank.at(r) += g.last - g.first;
    s.bytes_per_rank.at(r) += g.bytes;
    held.push_back({g.rank, g.first, g.last});
  }
  const auto cover = coverage(held, live, hosts, d.replicas, s.samples);
  s.state = cover.state();
  s.lost_ranks = cover.lost_ranks;
  s.samples_short = cover.samples_short;
  s.samples_lost = cover.samples_lost;
  s.short_ranges = cover.short_ranges;
  s.lost_ranges = cover.lost_ranges;
  return s;
}

/// How far a lazily staged dataset is: each live owner of a lazy region says, asked with an
/// empty stage request (a rank that does not answer is left out: it is lost, or soon will be).
void add_staging(DatasetStatus& s, const StoreDataset& d, const std::vector<bool>& live,
                 const StoreDescriptor& store, std::chrono::milliseconds timeout) {
  for (const auto& g : d.regions) {
    if (!g.lazy) continue;
    s.lazy = true;
    const auto r = static_cast<std::size_t>(g.rank);
    if (!live.at(r) || store.ranks.at(r).control.empty()) continue;
    try {
      const auto reply = detail::request_stage(store.ranks[r].control, store.token, d.name,
                                               g.segment, {}, timeout);
      s.staged += reply.staged;
      s.origin_reads += reply.origin_reads;
    } catch (const Error& e) {
      spdlog::debug("status: rank {} did not say how far '{}' is staged: {}", r, d.name, e.what());
    }
  }
}

/// The only proof that a rank runs: its lock on this node is held.
bool rank_live(const StoreDescriptor& d, int rank) {
  return !d.id.empty() && detail::rank_presence(d.id, rank) == detail::RankPresence::live;
}

/// Polls (bounded) until none of the ranks holds its lock any more.
void wait_unlocked(const StoreDescriptor& d, const std::vector<std::pair<int, int64_t>>& ranks,
                   std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto any_live = [&] {
    return std::any_of(ranks.begin(), ranks.end(),
                       [&](const auto& r) { return rank_live(d, r.first); });
  };
  while (any_live() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

/// A rank of this store on this node and a pidfd of its process: signals go through the pidfd,
/// which stays bound to the process it was opened on, so a pid freed and reused by another
/// process between the proof and the signal is never hit.
struct ProvenRank {
  int rank = 0;
  int64_t pid = 0;
  FileDescriptor process;
};

/// The rank's lock holder, pinned by a pidfd that is opened first and proven after: the pidfd's
/// process held the rank's lock once the pidfd existed. Empty when no live process proves it.
std::optional<ProvenRank> prove_rank(const StoreDescriptor& d, int rank) {
  const auto pid = detail::rank_lock_holder(d.id, rank);
  if (pid <= 0) return std::nullopt;
  // The raw syscall: Debian 12's <sys/pidfd.h> lacks C linkage for C++.
  const auto fd = ::syscall(SYS_pidfd_open, static_cast<pid_t>(pid), 0u);
  if (fd < 0) return std::nullopt;  // it ended since
  ProvenRank proven{rank, pid,
                    FileDescriptor(static_cast<int>(fd), fmt::format("pidfd of pid {}", pid))};
  if (detail::rank_lock_holder(d.id, rank) != pid) return std::nullopt;
  return proven;
}

void send_signal(const ProvenRank& r, int sig) {
  if (::syscall(SYS_pidfd_send_signal, r.process.get(), sig, nullptr, 0u) == 0 || errno == ESRCH)
    return;
  spdlog::warn("pidfd_send_signal({}, {}) for rank {} (pid {}): {}", r.process.get(),
               ::strsignal(sig), r.rank, r.pid, std::strerror(errno));
}

/// Ends the ranks of d whose lock on this node proves who they are: SIGCONT (a stopped rank
/// cannot act on SIGTERM), SIGTERM, and SIGKILL for any still holding its lock after 5 s.
std::vector<std::pair<int, int64_t>> end_proven_ranks(const StoreDescriptor& d) {
  std::vector<ProvenRank> proven;
  for (const auto& rank : d.ranks) {
    auto r = prove_rank(d, rank.rank);
    if (!r) continue;
    spdlog::warn("ending rank {} (pid {}) of store {}", r->rank, r->pid, d.id);
    send_signal(*r, SIGCONT);
    send_signal(*r, SIGTERM);
    proven.push_back(std::move(*r));
  }
  std::vector<std::pair<int, int64_t>> ended;
  for (const auto& r : proven) ended.emplace_back(r.rank, r.pid);
  wait_unlocked(d, ended, std::chrono::seconds(5));
  for (const auto& r : proven) {
    if (!rank_live(d, r.rank)) continue;
    spdlog::warn("rank {} (pid {}) did not end within 5 s of SIGTERM: SIGKILL", r.rank, r.pid);
    send_signal(r, SIGKILL);
  }
  wait_unlocked(d, ended, std::chrono::seconds(5));
  return ended;
}

}  // namespace

std::string_view state_name(RankState s) {
  switch (s) {
    case RankState::up:
      return "up";
    case RankState::not_answering:
      return "not answering";
    case RankState::lost:
      return "lost";
    case RankState::unknown:
      break;
  }
  return "unknown";
}

StoreControl::StoreControl(const std::filesystem::path& dir,
                           std::chrono::milliseconds control_timeout,
                           std::chrono::milliseconds peer_timeout)
    : m_dir(dir),
      m_descriptor(StoreDescriptor::read(dir)),
      m_timeout(control_timeout),
      m_peer_timeout(peer_timeout) {}

LoadResult StoreControl::load(const LoadRequest& request) {
  // A damaged index is refused here, where the user asked, before any rank opens it or allocates
  // for it. The ranks check it again when they open it: they may see other bytes.
  Index::open(request.index);
  // progress asked for even when nobody shows it: the interim messages (at least every 5 s) are
  // what keeps a load longer than control_timeout from failing, in a job script as on a terminal.
  const detail::LoadCommand load{.index = std::filesystem::absolute(request.index).string(),
                                 .name = request.name,
                                 .verify = request.verify,
                                 .replace = request.replace,
                                 .allow_stale = request.allow_stale,
                                 .mem_limit = request.mem_limit,
                                 .streams = request.streams,
                                 .progress = true,
                                 .replicas = request.replicas,
                                 .lazy = request.lazy,
                                 .prefetch = request.prefetch};
  auto on_interim = [&](const Message& interim) {
    if (request.progress) request.progress(detail::progress_of(interim));
  };
  return detail::load_result_of(
      send(m_descriptor, detail::load_request(load), m_timeout, on_interim));
}

std::vector<LoadResult> StoreControl::repair(const LoadRequest& request) {
  const detail::LoadCommand options{.verify = request.verify,
                                    .allow_stale = request.allow_stale,
                                    .mem_limit = request.mem_limit,
                                    .streams = request.streams,
                                    .progress = true,
                                    .lazy = request.lazy,
                                    .prefetch = request.prefetch};
  auto on_interim = [&](const Message& interim) {
    if (request.progress) request.progress(detail::progress_of(interim));
  };
  return detail::repair_results_of(
      send(m_descriptor, detail::repair_request(options, request.name), m_timeout, on_interim));
}

void StoreControl::unload(const std::string& name) {
  send(m_descriptor, detail::unload_request(name), m_timeout);
}

StoreStatus StoreControl::status() {
  StoreStatus status{m_descriptor.control, m_descriptor.started};
  detail::StatusReply reply;
  std::string lost;
  try {
    reply = detail::status_of(send(m_descriptor, detail::status_request(), m_timeout));
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::usage) throw;
    lost = e.what();  // report the ranks as lost rather than failing: that is what status is for
  }
  // The descriptor was rewritten by the load/unload that came last: read it again.
  if (lost.empty()) m_descriptor = StoreDescriptor::read(m_dir);
  const auto here = detail::host_name();
  const double peer_timeout = std::chrono::duration<double>(m_peer_timeout).count();
  std::vector<bool> live;
  std::vector<std::string> hosts;
  for (std::size_t r = 0; r < m_descriptor.ranks.size(); ++r) {
    RankStatus rs{m_descriptor.ranks[r]};
    if (rs.info.lost) {
      // Rank 0 marked it: the store went on without it, and reports it as it was.
      rs.state = RankState::lost;
      if (r < reply.last_heard.size()) rs.last_heard = reply.last_heard[r];
    } else if (lost.empty()) {
      if (r < reply.memory_used.size()) rs.memory_used = reply.memory_used[r];
      if (r < reply.last_heard.size()) rs.last_heard = reply.last_heard[r];
      // Rank 0 answers a status without asking the other ranks: one it has not heard from for
      // peer_timeout, or one whose lock on this host is free, is lost though rank 0 answered
      // (and has not marked it yet).
      const bool gone_here = rs.info.host == here && !m_descriptor.id.empty() &&
                             !rank_live(m_descriptor, static_cast<int>(r));
      const bool silent = rs.last_heard > peer_timeout;
      rs.state = gone_here || silent ? RankState::lost : RankState::up;
      if (rs.state == RankState::lost && status.error.empty()) {
        status.error = gone_here
                           ? fmt::format("rank {} on {} (pid {}) is gone", r, here, rs.info.pid)
                           : fmt::format("rank 0 has not heard from rank {} on {} for {:.0f} s", r,
                                         rs.info.host, rs.last_heard);
      }
    } else if (rs.info.host == here) {
      // Which rank died is what a user needs to know: its lock is free, the others' are held.
      rs.state =
          rank_live(m_descriptor, static_cast<int>(r)) ? RankState::not_answering : RankState::lost;
    }
    live.push_back(rs.state != RankState::lost);
    hosts.push_back(rs.info.host);
    status.ranks.push_back(rs);
  }
  for (const auto& d : m_descriptor.datasets) {
    for (const auto& g : d.regions)
      status.ranks.at(static_cast<std::size_t>(g.rank)).bytes_by_tier[g.tier] += g.bytes;
    status.datasets.push_back(dataset_status(d, live, hosts));
    // Asked of each owner in turn: a rank that does not answer soon costs little.
    add_staging(status.datasets.back(), d, live, m_descriptor,
                std::min(m_timeout, std::chrono::milliseconds(2000)));
    const auto& ds = status.datasets.back();
    if (status.error.empty() && ds.state != "healthy") {
      status.error = fmt::format("dataset '{}' is {}: {} sample(s) short of copies, {} without any",
                                 ds.name, ds.state, ds.samples_short, ds.samples_lost);
    }
  }
  if (lost.empty()) status.busy = reply.busy;
  if (!lost.empty()) status.error = lost;
  status.answered = lost.empty();
  return status;
}

StopResult StoreControl::stop() {
  std::string why;
  try {
    std::vector<int> all_ranks;
    for (const auto& rank : m_descriptor.ranks) all_ranks.push_back(rank.rank);
    auto result =
        detail::stop_result_of(send(m_descriptor, detail::stop_request(), m_timeout), all_ranks);
    // A rank lost earlier that died on this host is no rank that may still run.
    const auto here = detail::host_name();
    std::erase_if(result.unreachable, [&](const UnreachableRank& u) {
      const bool gone =
          u.host == here && !m_descriptor.id.empty() &&
          detail::rank_presence(m_descriptor.id, u.rank) != detail::RankPresence::live;
      if (gone) result.gone.push_back(u.rank);
      return gone;
    });
    remove_empty_store_directory(m_dir);
    return result;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::usage) throw;
    why = e.what();
  }
  const auto& rank0 = m_descriptor.ranks.front();
  if (rank0.host != detail::host_name()) {
    throw Error(
        ErrorKind::runtime,
        fmt::format(
            "rank 0 on {} does not answer (control {}); run `ddstage stop --store {}` on {}, or "
            "`ddstage clean --store {}` there once it has ended",
            rank0.host, m_descriptor.control, m_dir.string(), rank0.host, m_dir.string()));
  }
  spdlog::warn("rank 0 of the store at {} does not answer ({}): ending its ranks on this host",
               m_dir.string(), why);
  auto cleanup = clean_up_dead_store(m_dir, m_descriptor);
  remove_empty_store_directory(m_dir);  // whoever removed store.yaml (rank 0 may have, on SIGTERM)
  StopResult result{.no_answer = why,
                    .signalled = cleanup.signalled,
                    .cleaned = std::move(cleanup.files),
                    .descriptor_removed = cleanup.descriptor_removed};
  const auto here = detail::host_name();
  for (const auto& rank : m_descriptor.ranks) {
    if (rank.host == here && !rank_live(m_descriptor, rank.rank)) {
      result.stopped.push_back(rank.rank);
    } else {
      result.unreachable.push_back({rank.rank, rank.host, -1});
    }
  }
  return result;
}

DeadStoreCleanup clean_up_dead_store(const std::filesystem::path& dir,
                                     const StoreDescriptor& descriptor) {
  DeadStoreCleanup out;
  if (descriptor.id.empty()) return out;  // no lock names its ranks: nothing proves them gone
  out.signalled = end_proven_ranks(descriptor);
  out.files = clean_dead_ranks(descriptor.id);
  if (!out.files.removed.empty()) {
    spdlog::info("removed {} file(s) of the store at {} on this node", out.files.removed.size(),
                 dir.string());
  }
  for (const auto& failure : out.files.failures) spdlog::warn("{}", failure);
  const auto descriptor_cleanup = clean_store_descriptor(dir, descriptor);
  out.descriptor_removed = descriptor_cleanup.outcome == DescriptorCleanup::Outcome::removed;
  if (!out.descriptor_removed) spdlog::info("{}", descriptor_cleanup.message);
  return out;
}

}  // namespace ddstage
