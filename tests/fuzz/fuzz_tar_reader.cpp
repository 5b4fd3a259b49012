// The tar reader (formats/tar/tar_reader.cpp): lists the members of an archive held in memory.
// Flatten trusts what it returns to reference bytes in place, so besides "only a one-line
// ddstage::Error escapes", every member must lie inside the archive and every name offset must
// point at the name's own bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "fuzz_support.hpp"
#include "tar/tar_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddstage;
  const auto read_at = [&](std::span<std::byte> dest, uint64_t offset) {
    if (offset > size || dest.size() > size - offset)
      fuzz::violated("read past the archive: " + std::to_string(offset) + "+" +
                     std::to_string(dest.size()) + " of " + std::to_string(size));
    std::memcpy(dest.data(), data + offset, dest.size());
  };
  fuzz::expect_clean([&] {
    for (const auto& m : formats::list_tar_members(size, read_at, "fuzz.tar")) {
      if (m.data_offset > size || m.size > size - m.data_offset)
        fuzz::violated("member '" + m.name + "' runs past the archive");
      if (m.data_offset % 512 != 0) fuzz::violated("member data not on a 512-byte block");
      if (m.name_offset && (*m.name_offset > size || m.name.size() > size - *m.name_offset ||
                            std::memcmp(data + *m.name_offset, m.name.data(), m.name.size()) != 0))
        fuzz::violated("name offset of '" + m.name + "' does not hold its name");
    }
  });
  return 0;
}
