// DIR/store.yaml (libcore/src/store_descriptor.cpp): what clients, `status`, `load` and `stop`
// read to find a running store. Another user's or a crashed writer's file must be refused
// cleanly, and a parsed one must have only regions of its own ranks, each a range of samples.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

#include <sys/stat.h>

#include "ddstage/store_descriptor.hpp"
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
      for (const auto& g : ds.regions) {
        if (g.rank < 0 || static_cast<std::size_t>(g.rank) >= ranks || g.first > g.last)
          fuzz::violated("dataset '" + ds.name + "' has a region of no rank or a reversed range");
      }
      if (d.dataset(ds.name).name != ds.name)
        fuzz::violated("dataset '" + ds.name + "' not found by name");
    }
    d.dataset("no such dataset");
  });
  return 0;
}
