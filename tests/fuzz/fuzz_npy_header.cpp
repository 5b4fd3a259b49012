// The .npy header (formats/npy/npy_header.cpp): parsed from memory, and read from a file the
// way flatten does (a short first read, then the whole header).
#include <fcntl.h>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "fuzz_support.hpp"
#include "npy/npy_header.hpp"

namespace {

/// What callers index and allocate with: sizes that agree and fit in a file.
void check(const ddstage::formats::NpyHeader& h) {
  const uint64_t rows = h.shape.empty() ? 1 : h.shape[0];
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(h.row_bytes, rows, &bytes) || bytes != h.data_bytes) {
    ddstage::fuzz::violated("data_bytes " + std::to_string(h.data_bytes) +
                            " is not rows x row_bytes");
  }
  if (h.data_bytes > UINT64_MAX - h.data_offset)
    ddstage::fuzz::violated("data_offset + data_bytes overflows");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddstage;
  const auto bytes = std::as_bytes(std::span(data, size));
  fuzz::expect_clean([&] {
    const auto h = formats::parse_npy_header(bytes, "fuzz.npy");
    if (h.data_offset > size) fuzz::violated("data_offset past the bytes parsed");
    check(h);
  });
  const auto path = fuzz::scratch_dir() / "fuzz.npy";
  fuzz::write_file(path, std::span(data, size));
  fuzz::expect_clean(
      [&] { check(formats::read_npy_header(FileDescriptor::open(path, O_RDONLY))); });
  return 0;
}
