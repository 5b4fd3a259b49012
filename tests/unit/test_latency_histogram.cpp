#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <vector>

#include "ddstage/latency_histogram.hpp"

using ddstage::LatencyHistogram;

TEST_CASE("histogram: small values are exact, summaries match the data", "[histogram]") {
  LatencyHistogram h;
  CHECK(h.percentile(0.5) == 0);
  for (uint64_t v = 1; v <= 10; ++v) h.record(v);
  CHECK(h.count() == 10);
  CHECK(h.sum() == 55);
  CHECK(h.min() == 1);
  CHECK(h.max() == 10);
  CHECK(h.percentile(0.5) == 5);
  CHECK(h.percentile(0.99) == 10);
  CHECK(h.percentile(0.0) == 1);
}

TEST_CASE("histogram: percentiles within 1/16 over a wide range, merge equals one series",
          "[histogram]") {
  std::mt19937_64 rng(7);
  std::lognormal_distribution<double> dist(10.0, 2.0);
  std::vector<uint64_t> values(200000);
  LatencyHistogram whole, a, b;
  for (std::size_t i = 0; i < values.size(); ++i) {
    values[i] = static_cast<uint64_t>(dist(rng));
    whole.record(values[i]);
    (i % 2 ? a : b).record(values[i]);
  }
  a.merge(b);
  std::sort(values.begin(), values.end());
  for (double p : {0.5, 0.9, 0.99, 0.999}) {
    const auto exact = static_cast<double>(values[static_cast<std::size_t>(p * values.size()) - 1]);
    const auto got = static_cast<double>(whole.percentile(p));
    CHECK(std::abs(got - exact) <= exact / 16 + 1);
    CHECK(a.percentile(p) == whole.percentile(p));
  }
  CHECK(whole.percentile(1.0) == values.back());
  CHECK(a.count() == whole.count());
  CHECK(a.sum() == whole.sum());
  CHECK(a.max() == whole.max());
  CHECK(a.min() == whole.min());
}

TEST_CASE("histogram: percentiles are ordered and the largest values do not overflow",
          "[histogram]") {
  LatencyHistogram h;
  h.record(UINT64_MAX);
  h.record(uint64_t{1} << 40);
  h.record(3);
  CHECK(h.percentile(0.5) <= h.percentile(0.99));
  CHECK(h.percentile(1.0) == UINT64_MAX);
  CHECK(h.percentile(0.5) >= (uint64_t{1} << 40) - (uint64_t{1} << 36));
}
