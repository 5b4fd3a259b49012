#include "ddstage/store_control.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <csignal>
#include <fstream>

#include <spdlog/spdlog.h>

#include "control/control_channel.hpp"
#include "process.hpp"
#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "ddstage/shard_plan.hpp"

namespace ddstage {
namespace {

using detail::Message;

/// Sends one request and returns the reply, turning a refusal into the server's error (with
/// the kind the server gave it, so exit codes survive the round trip).
Message send(const StoreDescriptor& d, const Message& request, std::chrono::milliseconds timeout,
             const std::function<void(const Message&)>& on_interim = {}) {
  Message reply = detail::control_request(d.control, d.token, request, timeout, on_interim);
  if (!reply["ok"] || !reply["ok"].as<bool>()) {
    const auto message = reply["error"] ? reply["error"].as<std::string>() : "the store refused the request";
    const bool usage = reply["kind"] && reply["kind"].as<std::string>() == "usage";
    throw Error(usage ? ErrorKind::usage : ErrorKind::runtime, message);
  }
  return reply;
}

DatasetStatus dataset_status(const StoreDataset& d) {
  DatasetStatus s{d.name, d.index};
  auto plan = ShardPlan::from_boundaries(d.boundaries);
  s.samples = plan.samples();
  for (int r = 0; r < plan.ranks(); ++r) s.samples_per_rank.push_back(plan.range(r).count());
  s.bytes_per_rank = d.region_bytes;
  return s;
}

}  // namespace

std::string_view state_name(RankState s) {
  switch (s) {
    case RankState::up: return "up";
    case RankState::not_answering: return "not answering";
    case RankState::lost: return "lost";
    case RankState::unknown: break;
  }
  return "unknown";
}

StoreControl::StoreControl(const std::filesystem::path& dir, std::chrono::milliseconds timeout)
    : m_dir(dir), m_descriptor(StoreDescriptor::read(dir)), m_timeout(timeout) {}

LoadResult StoreControl::load(const LoadRequest& request) {
  // A damaged index is refused here, where the user asked, before any rank opens it or allocates
  // for it. The ranks check it again when they open it: they may see other bytes.
  Index::open(request.index);
  Message m;
  m["op"] = "load";
  m["index"] = std::filesystem::absolute(request.index).string();
  m["name"] = request.name;
  m["verify"] = request.verify;
  m["replace"] = request.replace;
  m["allow_stale"] = request.allow_stale;
  m["mem_limit"] = request.mem_limit;
  if (request.streams) m["streams"] = request.streams;
  if (request.progress) m["progress"] = true;
  std::function<void(const Message&)> on_interim;
  if (request.progress) {
    on_interim = [&](const Message& interim) {
      request.progress({interim["progress"].as<uint64_t>(), interim["total"].as<uint64_t>(),
                        interim["samples"].as<uint64_t>()});
    };
  }
  auto reply = send(m_descriptor, m, m_timeout, on_interim);
  return {reply["name"].as<std::string>(), reply["samples"].as<uint64_t>(), reply["bytes"].as<uint64_t>(),
          reply["seconds"].as<double>(), reply["verified"].as<bool>()};
}

void StoreControl::unload(const std::string& name) {
  Message m;
  m["op"] = "unload";
  m["name"] = name;
  send(m_descriptor, m, m_timeout);
}

StoreStatus StoreControl::status() {
  Message m;
  m["op"] = "status";
  StoreStatus status{m_descriptor.control, m_descriptor.started};
  Message reply;
  std::string lost;
  try {
    reply = send(m_descriptor, m, std::min(m_timeout, std::chrono::milliseconds(10000)));
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::usage) throw;
    lost = e.what();  // report the ranks as lost rather than failing: that is what status is for
  }
  // The descriptor was rewritten by the load/unload that came last: read it again.
  if (lost.empty()) m_descriptor = StoreDescriptor::read(m_dir);
  const auto here = detail::host_name();
  for (std::size_t r = 0; r < m_descriptor.ranks.size(); ++r) {
    RankStatus rs{m_descriptor.ranks[r]};
    if (lost.empty()) {
      // Rank 0 answers a status without asking the other ranks: one whose process is gone from
      // this host is lost even though rank 0 answered.
      rs.state = rs.info.host != here || detail::process_alive(rs.info.pid) ? RankState::up : RankState::lost;
      if (rs.state == RankState::lost && status.error.empty()) {
        status.error = fmt::format("rank {} on {} (pid {}) is gone", r, here, rs.info.pid);
      }
      if (reply["memory_used"] && r < reply["memory_used"].size()) rs.memory_used = reply["memory_used"][r].as<uint64_t>();
    } else if (rs.info.host == here) {
      // Which rank died is what a user needs to know: its process is gone, the others' are not.
      rs.state = detail::process_alive(rs.info.pid) ? RankState::not_answering : RankState::lost;
    }
    status.ranks.push_back(rs);
  }
  for (const auto& d : m_descriptor.datasets) status.datasets.push_back(dataset_status(d));
  if (lost.empty() && reply["busy"]) status.busy = reply["busy"].as<std::string>();
  if (!lost.empty()) status.error = lost;
  return status;
}

bool StoreControl::stop() {
  Message m;
  m["op"] = "stop";
  try {
    send(m_descriptor, m, m_timeout);
    return true;
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::usage) throw;
    spdlog::warn("the store at {} is not answering ({}); cleaning up after it", m_dir.string(), e.what());
  }
  clean_up_dead_store(m_dir, m_descriptor);
  return false;
}

bool store_process_alive(const StoreDescriptor& descriptor) {
  if (descriptor.ranks.empty()) return false;
  const auto& r0 = descriptor.ranks.front();
  return r0.host == detail::host_name() && r0.pid > 0 && detail::is_ddstage_process(r0.pid);
}

void remove_store_segments(const StoreDescriptor& descriptor) {
  const auto host = detail::host_name();
  for (const auto& d : descriptor.datasets) {
    for (std::size_t r = 0; r < d.segments.size() && r < descriptor.ranks.size(); ++r) {
      if (descriptor.ranks[r].host == host && ::shm_unlink(d.segments[r].c_str()) == 0) {
        spdlog::info("removed shared memory {}", d.segments[r]);
      }
    }
  }
}

void clean_up_dead_store(const std::filesystem::path& dir, const StoreDescriptor& descriptor) {
  const auto host = detail::host_name();
  for (const auto& rank : descriptor.ranks) {
    if (rank.host != host || rank.pid <= 0 || !detail::is_ddstage_process(rank.pid)) continue;
    spdlog::warn("ending server rank {} (pid {})", rank.rank, rank.pid);
    ::kill(static_cast<pid_t>(rank.pid), SIGKILL);
  }
  remove_store_segments(descriptor);
  // libfabric's shm provider keeps each endpoint's queues in /dev/shm/PID:...; dead ranks
  // that served over it cannot remove theirs.
  std::error_code ec;
  for (const auto& rank : descriptor.ranks) {
    if (rank.host != host || rank.fabric_provider != "shm" || detail::process_alive(rank.pid)) continue;
    const std::string prefix = std::to_string(rank.pid) + ":";
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
      if (e.path().filename().string().starts_with(prefix)) std::filesystem::remove(e.path(), ec);
    }
  }
  std::filesystem::remove(StoreDescriptor::path_in(dir), ec);
}

}  // namespace ddstage
