// cpu-client: writes the raw bytes of samples FIRST .. FIRST+COUNT-1 of one field of a
// flattened dataset (DATASET.ddx) to stdout, read straight from the origin files the index
// points at: what `ddstage read DATASET.ddx --ids FIRST-LAST --field F` writes. Uses only
// <ddstage/ddstage.hpp>, so it builds against a shared libcore with no MPI, libfabric or CUDA
// development files. Exit codes as ddstage's: 0 ok, 1 run-time error, 2 usage error.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <ddstage/ddstage.hpp>

namespace {

constexpr const char* kUsage = "usage: cpu-client DATASET.ddx FIRST COUNT [FIELD]\n";

uint64_t to_count(const char* text) {
  try {
    std::size_t used = 0;
    const uint64_t n = std::stoull(text, &used);
    if (used == std::string(text).size() && text[0] != '-') return n;
  } catch (const std::exception&) {
  }
  throw ddstage::UsageError(std::string("not a count: '") + text + "'");
}

void write_all(const std::vector<std::byte>& bytes) {
  if (std::fwrite(bytes.data(), 1, bytes.size(), stdout) != bytes.size() || std::fflush(stdout))
    throw ddstage::IoError("fwrite", errno, {.file = "stdout"});
}

int run(int argc, char** argv) {
  if (argc < 4 || argc > 5) throw ddstage::UsageError("wrong number of arguments");
  const ddstage::Index index = ddstage::Index::open(argv[1]);
  const uint64_t first = to_count(argv[2]), count = to_count(argv[3]);
  if (first > index.samples() || count > index.samples() - first)
    throw ddstage::UsageError("samples " + std::to_string(first) + " + " + std::to_string(count) +
                              " past the dataset's " + std::to_string(index.samples()));
  const uint32_t field = argc == 5 ? index.field_id(argv[4]) : index.default_field();
  std::vector<std::byte> row;
  for (uint64_t id = first; id < first + count; ++id) {
    const ddstage::Entry entry = index.entry(id, field);
    // A source edited since flatten would hand back other bytes than the index describes.
    index.check_fresh(entry.file);
    const std::string path = index.resolve(entry.file).string();
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw ddstage::IoError("open", errno, {.file = path, .sample = id});
    row.resize(entry.length);
    const ssize_t got = ::pread(fd, row.data(), row.size(), static_cast<off_t>(entry.offset));
    const int err = errno;
    ::close(fd);
    if (got != static_cast<ssize_t>(row.size()))
      throw ddstage::IoError("pread", got < 0 ? err : EIO, {.file = path, .sample = id});
    write_all(row);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const ddstage::Error& e) {
    std::fprintf(stderr, "cpu-client: error: %s\n%s", e.what(),
                 e.kind() == ddstage::ErrorKind::usage ? kUsage : "");
    return ddstage::exit_code(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cpu-client: error: %s\n", e.what());
    return 1;
  }
}
