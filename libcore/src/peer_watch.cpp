#include "peer_watch.hpp"

#include <algorithm>

#include "stoppable_sleep.hpp"

namespace ddstage::detail {

using std::chrono::milliseconds;

milliseconds heartbeat_interval(milliseconds peer_timeout) {
  return std::max(milliseconds(500), peer_timeout / 10);
}

PeerWatch::PeerWatch(int ranks, milliseconds peer_timeout, OnLost on_lost)
    : m_timeout(peer_timeout),
      m_on_lost(std::move(on_lost)),
      m_last(static_cast<std::size_t>(ranks), Clock::now()),
      m_forgotten(static_cast<std::size_t>(ranks), false) {}

void PeerWatch::watch() {
  {
    std::lock_guard lock(m_mutex);
    std::fill(m_last.begin(), m_last.end(), Clock::now());
  }
  m_thread = std::jthread([this](std::stop_token stop) { run(stop); });
}

bool PeerWatch::heard(int rank) {
  std::lock_guard lock(m_mutex);
  const auto r = static_cast<std::size_t>(rank);
  if (rank <= 0 || r >= m_last.size() || m_forgotten[r]) return false;
  m_last[r] = Clock::now();
  return true;
}

void PeerWatch::forget(int rank) {
  std::lock_guard lock(m_mutex);
  if (rank > 0 && static_cast<std::size_t>(rank) < m_forgotten.size())
    m_forgotten[static_cast<std::size_t>(rank)] = true;
}

std::vector<double> PeerWatch::silence_seconds() const {
  const auto now = Clock::now();
  std::lock_guard lock(m_mutex);
  std::vector<double> out;
  for (std::size_t r = 0; r < m_last.size(); ++r) {
    out.push_back(r == 0 ? 0.0 : std::chrono::duration<double>(now - m_last[r]).count());
  }
  return out;
}

std::vector<int> PeerWatch::silent_for(milliseconds limit) const {
  const auto now = Clock::now();
  std::lock_guard lock(m_mutex);
  std::vector<int> out;
  for (std::size_t r = 1; r < m_last.size(); ++r) {
    if (!m_forgotten[r] && now - m_last[r] > limit) out.push_back(static_cast<int>(r));
  }
  return out;
}

void PeerWatch::run(const std::stop_token& stop) {
  const auto check_every = heartbeat_interval(m_timeout) / 2;
  for (;;) {
    if (!sleep_unless_stopped(stop, check_every)) return;
    const auto now = Clock::now();
    int lost = -1;
    Clock::duration silence{};
    {
      std::lock_guard lock(m_mutex);
      for (std::size_t r = 1; r < m_last.size() && lost < 0; ++r) {
        if (!m_forgotten[r] && now - m_last[r] > m_timeout) {
          lost = static_cast<int>(r);
          silence = now - m_last[r];
          m_forgotten[r] = true;
        }
      }
    }
    // One a turn: the next turn comes at once for another silent rank (check_every is short).
    if (lost > 0) m_on_lost(lost, std::chrono::duration_cast<milliseconds>(silence));
  }
}

}  // namespace ddstage::detail
