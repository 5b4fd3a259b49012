// OriginDataset: the public Reader over a dataset's origin files, with no store: the same rows
// as a store's reader, the same checks, and device destinations staged or refused by name.
#include <catch2/catch.hpp>

#include "client_test_store.hpp"
#include "ddstage/error.hpp"
#include "ddstage/origin_dataset.hpp"
#include "ddstage/tool/device_allocation.hpp"
#include "ddstage/tool/gpu_info.hpp"

using namespace ddstage;
using namespace ddstage::test;
using Catch::Contains;

TEST_CASE("origin dataset: batches equal a store's, fixed and variable, in the order asked",
          "[origin]") {
  TestStore store;
  const OriginDataset origin(store.dir() / "d.ddx");
  CHECK(origin.name() == "d");
  CHECK(origin.index().samples() == samples);
  auto reader = origin.reader();
  auto served = Client(store.dir()).open("d").reader();
  const std::vector<uint64_t> ids{239, 0, 5, 5, 6, 7, 100};
  for (const std::string field : {"x", "g"}) {
    CHECK(store_batch(reader, field, ids) == store_batch(served, field, ids));
    std::vector<uint64_t> sizes(ids.size()), served_sizes(ids.size());
    reader.row_sizes(field, ids, sizes);
    served.row_sizes(field, ids, served_sizes);
    CHECK(sizes == served_sizes);
  }
  CHECK(store_batch(reader, "x", ids) == origin_batch(store.index(), 0, ids));
  Bytes checked(reader.batch_bytes("g", ids));
  reader.get_batch("g", ids, checked, true);
  CHECK(checked == origin_batch(store.index(), 1, ids));
}

TEST_CASE("origin dataset: bad input is the caller's error before a byte is written", "[origin]") {
  TestStore store;
  auto reader = OriginDataset(store.dir() / "d.ddx").reader();
  const std::vector<uint64_t> bad{1, samples};
  Bytes dest(2 * x_bytes, std::byte{0xee});
  CHECK_THROWS_WITH(reader.get_batch("x", bad, dest), Contains("out of range"));
  CHECK_THROWS_WITH(reader.get_batch("nope", std::vector<uint64_t>{1}, dest),
                    Contains("no field 'nope'"));
  Bytes short_dest(x_bytes - 1);
  CHECK_THROWS_AS(reader.get_batch("x", std::vector<uint64_t>{1}, short_dest), UsageError);
  CHECK(dest == Bytes(2 * x_bytes, std::byte{0xee}));
  CHECK_THROWS_AS(OriginDataset(store.dir() / "no.ddx"), UsageError);
}

TEST_CASE("origin dataset: device memory without a GPU fails naming it; direct is refused",
          "[origin][gpu]") {
  TestStore store;
  const std::vector<uint64_t> ids{3, 100, 7};
  Bytes fake(3 * x_bytes);
  const DeviceBuffer dest{fake.data(), fake.size(), 0, nullptr};
  const bool gpu = std::any_of(gpu_info().begin(), gpu_info().end(),
                               [](const auto& r) { return r.devices > 0; });
  if (!gpu) {
    auto reader = OriginDataset(store.dir() / "d.ddx").reader();
    CHECK_THROWS_WITH(reader.get_batch("x", ids, dest), Contains("no GPU: "));
    return;
  }
  const Settings direct = Settings::resolve({{"gpu.path", "direct"}}, {}, std::nullopt, false);
  auto reader = OriginDataset(store.dir() / "d.ddx", direct).reader();
  DeviceAllocation memory(0, 3 * x_bytes);
  CHECK_THROWS_WITH(reader.get_batch("x", ids, memory.buffer()),
                    Contains("gpu.path=direct: its rows are read from the origin files"));
}
