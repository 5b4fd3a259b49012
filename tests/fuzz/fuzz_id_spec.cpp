// --ids SPEC and --ids @FILE (libcore/src/id_spec.cpp). The first byte picks the form and the
// dataset's size; the rest is the spec, or the id file's contents.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "ddstage/tool/id_spec.hpp"
#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddstage;
  if (size == 0) return 0;
  // Datasets of at most ~4000 samples: a range item then costs at most 32 KB, so a few thousand
  // items stay inside the RSS limit (a huge range of a huge dataset is a request, not a bug).
  const uint64_t limit = uint64_t{data[0] & 0x7fu} * 32;
  const bool from_file = (data[0] & 0x80u) != 0;
  const std::span<const uint8_t> rest(data + 1, size - 1);
  std::string spec;
  if (from_file) {
    const auto path = fuzz::scratch_dir() / "ids.txt";
    fuzz::write_file(path, rest);
    spec = "@" + path.string();
  } else {
    spec.assign(reinterpret_cast<const char*>(rest.data()), rest.size());
  }
  fuzz::expect_clean([&] {
    for (uint64_t id : parse_ids(spec, limit)) {
      if (id >= limit)
        fuzz::violated("id " + std::to_string(id) + " returned for a dataset of " +
                       std::to_string(limit));
    }
  });
  return 0;
}
