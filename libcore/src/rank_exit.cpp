#include "rank_exit.hpp"

#include <unistd.h>

#include <thread>

#include <spdlog/spdlog.h>

#include "ddstage/tool/shm_segment.hpp"
#include "ddstage/tool/store_cleanup.hpp"

namespace ddstage::detail {
namespace fs = std::filesystem;

RankExit::Tracked::Tracked(RankExit& owner, std::string name)
    : m_owner(&owner), m_name(std::move(name)) {
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

}  // namespace

void sweep_dead_ranks(const std::string& store_id) noexcept {
  try {
    const auto report = clean_dead_ranks(store_id);
    for (const auto& f : report.removed)
      spdlog::info("removed {}, left by rank {} that died on this node", f.path.string(), f.rank);
    for (const auto& failure : report.failures) spdlog::warn("{}", failure);
  } catch (const std::exception& e) {
    spdlog::warn("could not look for dead ranks' files: {}", e.what());
  }
}

void RankExit::claim(const std::string& store_id, int rank, fs::path store_dir) {
  RankLock lock(store_id, rank);
  std::lock_guard guard(m_mutex);
  m_lock = std::move(lock);
  m_store_id = store_id;
  m_store_dir = std::move(store_dir);
}

void RankExit::unlink_tracked() noexcept {
  for (const auto& name : m_segments) {
    if (ShmSegment::remove(name)) spdlog::info("removed {}", name);
  }
}

void RankExit::remove_descriptor() noexcept {
  if (m_store_dir.empty()) return;
  std::error_code ec;
  remove_descriptor_of(m_store_dir, m_store_id, ec);
}

void RankExit::leave(int code) noexcept {
  if (m_leaving.test_and_set()) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  std::lock_guard guard(m_mutex);
  unlink_tracked();
  // _exit skips libfabric's own clean-up.
  std::error_code ec;
  for (const auto& queue : fabric_queues(::getpid(), ::geteuid())) fs::remove(queue, ec);
  remove_descriptor();
  // A load between tracking a name and creating its segment may have created it just now.
  unlink_tracked();
  m_lock = RankLock();
  if (!m_store_id.empty()) sweep_dead_ranks(m_store_id);
  spdlog::default_logger()->flush();
  // mpiexec SIGKILLs the job's other ranks as soon as one ends (OpenMPI's wait between SIGTERM
  // and SIGKILL is cut short by the first SIGCHLD): a moment's grace lets the ranks that got
  // the same SIGTERM finish freeing their memory. The mutex stays held: the main thread can
  // neither track a new segment nor publish a descriptor meanwhile.
  std::this_thread::sleep_for(exit_grace);
  ::_exit(code);
}

}  // namespace ddstage::detail
