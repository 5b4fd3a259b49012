// manifest.yaml (libcore/src/manifest.cpp), opened by Index::open beside a valid index.bin of
// 3 samples of one uint8[4] field (the shape of the seeds: `ddstage-gen npy --samples 3
// --shape 4 --dtype uint8`, flattened). The manifest is the unchecksummed half of an index, so
// whatever it says must be parsed safely and checked against index.bin.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <vector>

#include "ddstage/tool/index_writer.hpp"
#include "index_contract.hpp"

namespace {

/// The index every input's manifest is paired with: built once, its manifest then overwritten.
std::filesystem::path make_index() {
  using namespace ddstage;
  const auto dir = fuzz::scratch_dir() / "manifest.ddx";
  IndexWriter writer({.out = dir, .name = "fuzz"});
  writer.define({{.name = "x", .dtype = DType::uint8, .shape = {4}, .row_bytes = 4}}, 3);
  for (uint64_t s = 0; s < 3; ++s) {
    const std::vector<std::byte> row(4, std::byte(s));
    writer.put_packed(s, 0, row);
  }
  writer.commit();
  return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddstage;
  static const std::filesystem::path dir = make_index();
  fuzz::write_file(dir / "manifest.yaml", std::span(data, size));
  fuzz::expect_clean([&] { fuzz::check_index_contract(Index::open(dir)); });
  return 0;
}
