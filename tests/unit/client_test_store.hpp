// A store built in this process for Client tests (unit and GPU): shards loaded into shared
// memory and a descriptor naming this process for every rank, no server process.
#pragma once

#include <unistd.h>

#include <climits>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "ddstage/client.hpp"
#include "ddstage/store_descriptor.hpp"
#include "ddstage/tool/index_writer.hpp"
#include "ddstage/tool/origin_reader.hpp"
#include "ddstage/tool/shard_layout.hpp"
#include "ddstage/tool/shard_loader.hpp"
#include "ddstage/tool/shard_plan.hpp"
#include "test_support.hpp"

namespace ddstage::test {

namespace fs = std::filesystem;
using Bytes = std::vector<std::byte>;

constexpr uint64_t samples = 240;
constexpr uint64_t x_bytes = 96;

/// Field "g": variable rows, some of them empty.
inline uint64_t g_bytes(uint64_t i) {
  return i % 7 == 3 ? 0 : (i * 37) % 300 + 1;
}

inline std::string this_host() {
  char name[HOST_NAME_MAX + 1] = {};
  ::gethostname(name, sizeof name - 1);
  return name;
}

/// A dataset with a fixed field "x" (96 bytes) and a variable one "g", both in place in two
/// source files.
inline fs::path write_index(const test::TempDir& dir) {
  const auto x = test::pattern_bytes(samples * x_bytes, 1);
  test::write_file(dir / "src/x.bin", x);
  const auto [g, g_at] = test::variable_rows(samples, g_bytes);
  test::write_file(dir / "src/g.bin", g);
  IndexWriter w({.out = dir / "d.ddx"});
  w.set_format("test");
  w.define({{"x", DType::uint8, {x_bytes}, false, x_bytes, "x.bin"},
            {"g", DType::uint8, {}, true, 0, "g.bin"}},
           samples);
  const auto fx = w.add_source(dir / "src/x.bin");
  const auto fg = w.add_source(dir / "src/g.bin");
  for (uint64_t i = 0; i < samples; ++i) {
    w.put_in_place(i, 0, fx, i * x_bytes, std::span(x).subspan(i * x_bytes, x_bytes));
    w.put_in_place(i, 1, fg, g_at[i], std::span(g).subspan(g_at[i], g_bytes(i)));
  }
  w.commit();
  return dir / "d.ddx";
}

/// Three ranks' shards of dataset "d" in shared memory, owned here, and a descriptor naming
/// this host and process for every rank.
class TestStore {
 public:
  TestStore() : m_index(Index::open(write_index(m_dir))), m_plan(ShardPlan::balance(m_index, 3)) {
    static int counter = 0;
    StoreDataset d{
        .name = "d", .index = m_dir / "d.ddx", .index_fingerprint = m_index.fingerprint()};
    for (int r = 0; r < m_plan.ranks(); ++r) {
      const auto name =
          "/ddstage-test-" + std::to_string(::getpid()) + "-client" + std::to_string(counter++);
      m_segments.push_back(load_shard(m_index, m_plan.range(r), name));
      d.regions.push_back({.rank = r,
                           .first = m_plan.range(r).first,
                           .last = m_plan.range(r).last,
                           .segment = name,
                           .bytes = m_segments.back().bytes().size()});
      m_descriptor.ranks.push_back(
          {.rank = r, .host = this_host(), .pid = ::getpid(), .transports = {"local", "shm"}});
    }
    m_descriptor.token = std::string(32, 'a');
    m_descriptor.control = "127.0.0.1:1";
    m_descriptor.datasets.push_back(std::move(d));
    write();
  }

  const fs::path& dir() const { return m_dir.path(); }
  const Index& index() const { return m_index; }
  const ShardPlan& plan() const { return m_plan; }
  StoreDescriptor& descriptor() { return m_descriptor; }
  void write() const { m_descriptor.write(m_dir.path()); }

  /// Flips one byte of (sample, field) in the shard that holds it.
  void damage(uint64_t sample, uint32_t field) {
    const int r = m_plan.owner(sample);
    auto region = m_segments[r].writable();
    ShardView view(region, 2, m_plan.range(r));
    const auto at = view.row(sample, field).data() - region.data();
    region[at] ^= std::byte{0x10};
  }

 private:
  test::TempDir m_dir;
  Index m_index;
  ShardPlan m_plan;
  std::vector<ShmSegment> m_segments;
  StoreDescriptor m_descriptor;
};

/// What the origin files hold for these ids.
inline Bytes origin_batch(const Index& index, uint32_t field, std::span<const uint64_t> ids) {
  OriginReader origin(index);
  Bytes out(origin.batch_bytes(field, ids));
  origin.read(field, ids, out);
  return out;
}

inline Bytes store_batch(Reader& reader, const std::string& field, std::span<const uint64_t> ids,
                         bool verify = false) {
  Bytes out(reader.batch_bytes(field, ids));
  reader.get_batch(field, ids, out, verify);
  return out;
}

/// Unsorted ids with repeats, plus a run of consecutive ids that crosses rank boundaries.
inline std::vector<uint64_t> mixed_ids(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint64_t> ids;
  for (int i = 0; i < 100; ++i) ids.push_back(rng() % samples);
  ids.push_back(ids[3]);
  ids.push_back(ids[3]);
  for (uint64_t id = 50; id < 200; ++id) ids.push_back(id);
  ids.push_back(0);
  ids.push_back(samples - 1);
  return ids;
}

}  // namespace ddstage::test
