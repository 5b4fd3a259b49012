// The zip central directory of a .npz (formats/npy/zip_directory.cpp): the input is the whole
// archive, read the way flatten reads a file (a bounded tail, the directory, each local header).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "fuzz_support.hpp"
#include "npy/zip_directory.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddstage;
  const auto read_at = [&](std::span<std::byte> out, uint64_t offset) {
    // The parser checks every offset against the archive's size before it reads.
    if (offset > size || out.size() > size - offset) fuzz::violated("a read past the archive");
    std::memcpy(out.data(), data + offset, out.size());
  };
  fuzz::expect_clean([&] {
    for (const auto& m : formats::read_zip_directory(size, read_at, "fuzz.npz")) {
      // Callers read compressed_size bytes at data_offset without further checks.
      if (m.data_offset > size || m.compressed_size > size - m.data_offset)
        fuzz::violated("member '" + m.name + "' lies past the archive");
      if (m.header_offset >= m.data_offset)
        fuzz::violated("member '" + m.name + "' has its data before its local header");
    }
  });
  return 0;
}
