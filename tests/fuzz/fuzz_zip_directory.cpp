// The zip central directory of a .npz (formats/npy/zip_directory.cpp): the input is the whole
// archive, read the way flatten reads a file (a bounded tail, the directory, each local header).
// Then each member's .npy header is read as flatten reads it (formats/npy/npy_header.cpp):
// stored members in place (and their CRC-32 checked), deflated ones through zlib
// (formats/npy/zip_inflate.cpp), inflated to their end, so the CRC and size checks run too.
#include <fcntl.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "npy/npy_header.hpp"
#include "npy/zip_directory.hpp"
#include "npy/zip_inflate.hpp"

namespace {

/// Inflated bytes read per call: a deflated member's claimed size is not bounded by the input.
constexpr uint64_t piece_bytes = 1u << 16;

void read_member(const ddstage::FileDescriptor& fd, const ddstage::formats::ZipMember& m) {
  using namespace ddstage;
  const std::string name = "fuzz.npz (member " + m.name + ")";
  if (m.method == 0) {
    const auto h = formats::read_npy_header(fd, m.data_offset, m.size, name);
    if (h.data_offset - m.data_offset > m.size) fuzz::violated("header past the stored member");
    formats::check_stored_crc(fd, m, name, 4096);
    return;
  }
  if (m.method != 8) return;
  formats::ZipInflater inflater(fd, m, name, 4096);
  uint64_t read = 0;
  const auto read_next = [&](std::span<std::byte> out) {
    inflater.read(out);
    read += out.size();
  };
  const auto h = formats::read_npy_header(read_next, m.size, name);
  if (read != h.data_offset || h.data_offset > m.size)
    fuzz::violated("the header read is not the header: " + std::to_string(read) + " bytes");
  std::vector<std::byte> piece(piece_bytes);
  for (uint64_t left = m.size - read; left > 0;) {
    const auto out = std::span(piece).first(std::min<uint64_t>(left, piece.size()));
    inflater.read(out);
    left -= out.size();
  }
  inflater.finish();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddstage;
  const auto read_at = [&](std::span<std::byte> out, uint64_t offset) {
    // The parser checks every offset against the archive's size before it reads.
    if (offset > size || out.size() > size - offset) fuzz::violated("a read past the archive");
    std::memcpy(out.data(), data + offset, out.size());
  };
  std::vector<formats::ZipMember> members;
  fuzz::expect_clean([&] { members = formats::read_zip_directory(size, read_at, "fuzz.npz"); });
  for (const auto& m : members) {
    // Callers read compressed_size bytes at data_offset without further checks.
    if (m.data_offset > size || m.compressed_size > size - m.data_offset)
      fuzz::violated("member '" + m.name + "' lies past the archive");
    if (m.header_offset >= m.data_offset)
      fuzz::violated("member '" + m.name + "' has its data before its local header");
  }
  if (members.empty()) return 0;
  const auto path = fuzz::scratch_dir() / "fuzz.npz";
  fuzz::write_file(path, std::span(data, size));
  const auto fd = FileDescriptor::open(path, O_RDONLY);
  for (const auto& m : members) fuzz::expect_clean([&] { read_member(fd, m); });
  return 0;
}
