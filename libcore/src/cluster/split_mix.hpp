// A small seeded generator whose output is fixed by its seed on every platform (the standard
// distributions are not), so a simulation with a given seed replays exactly anywhere.
#pragma once

#include <cstdint>

namespace ddstage::detail {

class SplitMix {
 public:
  explicit SplitMix(uint64_t seed) : m_state(seed) {}
  uint64_t next() {
    uint64_t z = (m_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  /// Uniform in [0, 1).
  double unit() { return static_cast<double>(next() >> 11) * 0x1.0p-53; }
  /// Uniform in [0, n); n > 0.
  uint64_t below(uint64_t n) { return next() % n; }

 private:
  uint64_t m_state;
};

}  // namespace ddstage::detail
