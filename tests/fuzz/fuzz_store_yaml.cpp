// DIR/store.yaml (libcore/src/store_descriptor.cpp): what clients, `status`, `load` and `stop`
// read to find a running store. Another user's or a crashed writer's file must be refused
// cleanly, and a parsed one must have only regions of its own ranks, each a range of samples.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <sys/stat.h>

#include "ddstage/error.hpp"
#include "ddstage/store_descriptor.hpp"
#include "ddstage/tool/placement.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddstage;
  const auto dir = fuzz::scratch_dir() / "store";
  std::filesystem::create_directories(dir);
  ::chmod(dir.c_str(), 0700);
  const auto file = StoreDescriptor::path_in(dir);
  fuzz::write_file(file, std::span(data, size));
  ::chmod(file.c_str(), 0600);
  fuzz::expect_clean([&] {
    const auto d = StoreDescriptor::read(dir);
    for (const auto& ds : d.datasets) {
      const std::size_t ranks = d.ranks.size();
      std::vector<PlacedRange> ranges;
      uint64_t samples = 0;
      for (const auto& g : ds.regions) {
        if (g.rank < 0 || static_cast<std::size_t>(g.rank) >= ranks || g.first > g.last)
          fuzz::violated("dataset '" + ds.name + "' has a region of no rank or a reversed range");
        ranges.push_back({g.rank, g.first, g.last});
        samples = std::max(samples, g.last);
      }
      // What a reader builds next: an IndexError for regions that leave samples uncovered or
      // overlap past the lookup's cap, never a crash.
      try {
        const Placement placement(ranges, samples);
        for (std::size_t s = 0; s < placement.stretches(); ++s) {
          for (uint32_t g : placement.holders(s)) {
            if (g >= ranges.size()) fuzz::violated("a stretch names a region that does not exist");
          }
        }
      } catch (const IndexError&) {
      }
      if (d.dataset(ds.name).name != ds.name)
        fuzz::violated("dataset '" + ds.name + "' not found by name");
    }
    d.dataset("no such dataset");
  });
  return 0;
}
