#include "rank_exit.hpp"

#include <sys/mman.h>
#include <unistd.h>

#include <thread>

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

namespace ddstage::detail {
namespace fs = std::filesystem;

RankExit::Tracked::Tracked(RankExit& owner, std::string name) : m_owner(&owner), m_name(std::move(name)) {
  std::lock_guard lock(owner.m_mutex);
  owner.m_segments.insert(m_name);
}

RankExit::Tracked::Tracked(Tracked&& other) noexcept
    : m_owner(std::exchange(other.m_owner, nullptr)), m_name(std::move(other.m_name)) {}

RankExit::Tracked& RankExit::Tracked::operator=(Tracked&& other) noexcept {
  if (this != &other) {
    Tracked gone(std::move(*this));
    m_owner = std::exchange(other.m_owner, nullptr);
    m_name = std::move(other.m_name);
  }
  return *this;
}

RankExit::Tracked::~Tracked() {
  if (!m_owner) return;
  std::lock_guard lock(m_owner->m_mutex);
  m_owner->m_segments.erase(m_name);
}

namespace {

constexpr auto exit_grace = std::chrono::milliseconds(300);

/// libfabric's shm provider names an endpoint's queues "PID:..." in shm_directory().
void remove_fabric_queues(int64_t pid) noexcept {
  const std::string prefix = std::to_string(pid) + ":";
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(shm_directory(), ec)) {
    if (e.path().filename().string().starts_with(prefix)) fs::remove(e.path(), ec);
  }
}

}  // namespace

void remove_dead_ranks_files(const std::string& store_id) noexcept {
  try {
    std::set<int> dead;
    const auto files = list_store_files();
    for (const auto& f : files) {
      if (f.store_id == store_id && f.is_lock && rank_presence(store_id, f.rank) == RankPresence::gone) {
        dead.insert(f.rank);
        // Its pid is free (or reused by a process that cannot own this rank's queues).
        if (const auto pid = recorded_pid(f.path); pid > 0 && !fs::exists("/proc/" + std::to_string(pid))) {
          remove_fabric_queues(pid);
        }
      }
    }
    std::error_code ec;
    for (const auto& f : files) {
      if (f.store_id == store_id && dead.contains(f.rank) && fs::remove(f.path, ec)) {
        spdlog::info("removed {}, left by rank {} that died on this node", f.path.string(), f.rank);
      }
    }
  } catch (const std::exception& e) {
    spdlog::warn("could not look for dead ranks' files: {}", e.what());
  }
}

void RankExit::claim(const std::string& store_id, int rank, fs::path descriptor) {
  RankLock lock(store_id, rank);
  std::lock_guard guard(m_mutex);
  m_lock = std::move(lock);
  m_store_id = store_id;
  m_descriptor = std::move(descriptor);
}

void RankExit::unlink_tracked() noexcept {
  for (const auto& name : m_segments) {
    if (::shm_unlink(name.c_str()) == 0) spdlog::info("removed shared memory {}", name);
  }
}

void RankExit::remove_descriptor() noexcept {
  if (m_descriptor.empty() || m_store_id.empty()) return;
  // A new store may have taken the directory since: only this store's descriptor goes.
  try {
    if (YAML::LoadFile(m_descriptor.string())["id"].as<std::string>() != m_store_id) return;
  } catch (const std::exception&) {
    return;
  }
  std::error_code ec;
  fs::remove(m_descriptor, ec);
}

void RankExit::leave(int code) noexcept {
  if (m_leaving.test_and_set()) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  std::lock_guard guard(m_mutex);
  unlink_tracked();
  // _exit skips libfabric's own clean-up.
  remove_fabric_queues(::getpid());
  remove_descriptor();
  // A load between tracking a name and creating its segment may have created it just now.
  unlink_tracked();
  m_lock = RankLock();
  if (!m_store_id.empty()) remove_dead_ranks_files(m_store_id);
  spdlog::default_logger()->flush();
  // mpiexec SIGKILLs the job's other ranks as soon as one ends (OpenMPI's wait between SIGTERM
  // and SIGKILL is cut short by the first SIGCHLD): a moment's grace lets the ranks that got
  // the same SIGTERM finish freeing their memory. The mutex stays held: the main thread can
  // neither track a new segment nor publish a descriptor meanwhile.
  std::this_thread::sleep_for(exit_grace);
  ::_exit(code);
}

}  // namespace ddstage::detail
