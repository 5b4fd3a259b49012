// index.bin (libcore/src/index.cpp), opened by Index::open beside a manifest.yaml that agrees
// with its header. The harness writes the header's checksums and size over what the input says,
// so mutations reach the section offsets, file table and entries instead of dying at a checksum
// (bad checksums themselves are unit-tested in tests/unit/test_index.cpp).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include <xxhash.h>

#include "ddstage/index.hpp"
#include "index_contract.hpp"
#include "index_layout.hpp"
#include "manifest.hpp"

namespace {

using ddstage::detail::IndexHeader;

/// A manifest declaring the header's sample count and (up to 8) variable-length byte fields, so
/// that Index::open gets past the comparison of the two.
ddstage::detail::Manifest manifest_for(const uint8_t* data, size_t size) {
  ddstage::detail::Manifest m;
  m.info = {.name = "fuzz", .format = "files", .root = "/nonexistent", .tool_version = "fuzz"};
  uint32_t fields = 1;
  if (size >= ddstage::detail::header_bytes_v1) {
    IndexHeader h{};
    std::memcpy(&h, data, ddstage::detail::header_bytes_v1);
    m.samples = h.samples;
    fields = std::clamp<uint32_t>(h.fields, 1, 8);
  }
  for (uint32_t i = 0; i < fields; ++i) {
    m.fields.push_back(
        {.name = "f" + std::to_string(i), .dtype = ddstage::DType::bytes, .variable = true});
  }
  return m;
}

/// The input with file_bytes, body_checksum, fields_checksum (format 2 on) and header_checksum
/// made to match it and the manifest.
std::vector<uint8_t> repaired(const uint8_t* data, size_t size,
                              const ddstage::detail::Manifest& m) {
  std::vector<uint8_t> bytes(data, data + size);
  if (size < ddstage::detail::header_bytes_v1) return bytes;
  IndexHeader h{};
  const size_t header = std::min(size, sizeof h);
  std::memcpy(&h, bytes.data(), header);
  h.file_bytes = size;
  if (h.entries_offset <= size)
    h.body_checksum = XXH3_64bits(bytes.data() + h.entries_offset, size - h.entries_offset);
  if (h.version >= 2) h.fields_checksum = ddstage::detail::fields_checksum(m.fields);
  h.header_checksum = 0;
  h.header_checksum = XXH3_64bits(&h, std::min<size_t>(h.header_bytes, header));
  std::memcpy(bytes.data(), &h, header);
  return bytes;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddstage;
  const auto dir = fuzz::scratch_dir() / "index.ddx";
  std::filesystem::create_directories(dir);
  const auto manifest = manifest_for(data, size);
  fuzz::write_file(dir / "index.bin", repaired(data, size, manifest));
  detail::write_manifest(dir / "manifest.yaml", manifest, {});
  fuzz::expect_clean([&] { fuzz::check_index_contract(Index::open(dir)); });
  return 0;
}
