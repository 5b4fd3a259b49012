// Helpers shared by the unit tests: scratch directories and byte vectors.
#pragma once

#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "ddstage/formats/format.hpp"
#include "ddstage/index.hpp"
#include "ddstage/tool/index_writer.hpp"

namespace ddstage::test {

/// A fresh directory under $DDSTAGE_TEST_TMP (or /tmp), removed with everything in it.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    const char* base = std::getenv("DDSTAGE_TEST_TMP");
    auto root =
        std::filesystem::path(base ? base : std::filesystem::temp_directory_path().string());
    m_path =
        root / ("ddstage-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(m_path);
    std::filesystem::create_directories(m_path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(m_path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return m_path; }
  std::filesystem::path operator/(const std::string& name) const { return m_path / name; }

 private:
  std::filesystem::path m_path;
};

/// Deterministic pseudo-random bytes (splitmix64), so failures reproduce.
inline std::vector<std::byte> pattern_bytes(std::size_t n, uint64_t seed) {
  std::vector<std::byte> out(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (std::size_t i = 0; i < n; ++i) {
    if (i % 8 == 0) {
      x += 0x9E3779B97F4A7C15ull;
      uint64_t z = x;
      z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
      z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
      x = z ^ (z >> 31);
    }
    out[i] = static_cast<std::byte>((x >> (8 * (i % 8))) & 0xff);
  }
  return out;
}

/// The "nobody" user and group, as which tests that run as root act unprivileged.
constexpr uid_t nobody = 65534;

/// A variable field's row sizes: neighbours differ (every row a run of its own), every fifth
/// row empty.
inline uint64_t varied_row_bytes(uint64_t i) {
  return i % 5 == 2 ? 0 : (i * 53) % 700 + 1;
}

inline std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

inline void write_file(const std::filesystem::path& path, const std::vector<std::byte>& bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

/// Rows of varying size back to back: row i is pattern_bytes(size_of(i), 100 + i), starting at
/// at[i] of bytes.
struct VariableRows {
  std::vector<std::byte> bytes;
  std::vector<uint64_t> at;
};

template <typename SizeOf>
VariableRows variable_rows(uint64_t n, SizeOf&& size_of) {
  VariableRows rows;
  for (uint64_t i = 0; i < n; ++i) {
    rows.at.push_back(rows.bytes.size());
    const auto row = pattern_bytes(size_of(i), 100 + i);
    rows.bytes.insert(rows.bytes.end(), row.begin(), row.end());
  }
  return rows;
}

/// A flatten request for these sources, everything else default.
inline formats::FlattenRequest request_for(std::initializer_list<std::filesystem::path> sources) {
  formats::FlattenRequest r;
  for (const auto& s : sources) r.sources.push_back(s.string());
  return r;
}

/// Flattens request into out (which must not exist) and opens the result.
inline Index flatten_to(const std::filesystem::path& out, const formats::FlattenRequest& request,
                        uint64_t pack_bytes = 256ull << 20) {
  IndexWriter writer({.out = out, .pack_bytes = pack_bytes});
  formats::flatten(request, writer);
  writer.commit();
  return Index::open(out);
}

/// A store id (12 hex digits) no store and no other test uses: `tag` (two hex digits, one per
/// test file) then this process's pid.
inline std::string unused_store_id(const std::string& tag) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string id = tag;
  auto pid = static_cast<unsigned>(::getpid());
  for (int i = 0; i < 10; ++i, pid /= 16) id += digits[pid % 16];
  return id;
}

}  // namespace ddstage::test
