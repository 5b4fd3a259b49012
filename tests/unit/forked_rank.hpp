// A server rank's traces without a server: a forked child that takes a rank lock and creates a
// segment, as a rank does, then waits to be killed.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "ddstage/tool/shm_segment.hpp"
#include "ddstage/tool/tier_set.hpp"
#include "rank_lock.hpp"

namespace ddstage::test {

class ForkedRank {
 public:
  /// Returns once the child holds the lock of `rank` and its segment "/ddstage-ID-train-g1-rR",
  /// and with a tier_dir, its TierRecord and tier file tier_file_name().
  ForkedRank(const std::string& id, int rank, const std::filesystem::path& tier_dir = {}) {
    int ready[2];
    REQUIRE(::pipe(ready) == 0);
    m_pid = ::fork();
    if (m_pid == 0) {
      detail::RankLock lock(id, rank);
      auto segment = ShmSegment::create(segment_name(id, rank), 8192);
      std::optional<TierSet> tiers;
      TierRecord record;
      ShmSegment tier_file;
      if (!tier_dir.empty()) {
        tiers.emplace(std::vector<TierSpec>{{.kind = TierSpec::Kind::nvme, .dir = tier_dir}}, 0);
        record = TierRecord(id, rank, *tiers);
        tier_file = ShmSegment::create(tier_file_name(id, rank, tier_dir), 8192);
      }
      char c = 1;
      (void)!::write(ready[1], &c, 1);
      ::pause();
      ::_exit(0);
    }
    char c = 0;
    const auto n = ::read(ready[0], &c, 1);
    ::close(ready[0]);
    ::close(ready[1]);
    REQUIRE(n == 1);
  }
  ForkedRank(const ForkedRank&) = delete;
  ForkedRank& operator=(const ForkedRank&) = delete;
  ~ForkedRank() { kill(); }

  static std::string segment_name(const std::string& id, int rank) {
    return "/ddstage-" + id + "-train-g1-r" + std::to_string(rank);
  }
  static std::string tier_file_name(const std::string& id, int rank,
                                    const std::filesystem::path& dir) {
    return (dir / ("ddstage-" + id + "-train-g2-r" + std::to_string(rank))).string();
  }
  pid_t pid() const noexcept { return m_pid; }
  /// SIGKILL, as a launcher or the OOM killer ends a rank: its files stay. Reaped.
  void kill() noexcept {
    if (m_reaped) return;
    ::kill(m_pid, SIGKILL);
    ::waitpid(m_pid, nullptr, 0);
    m_reaped = true;
  }

 private:
  pid_t m_pid = -1;
  bool m_reaped = false;
};

}  // namespace ddstage::test
