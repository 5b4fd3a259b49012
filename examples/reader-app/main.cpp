// reader-app: attaches to a running store (`ddstage serve`), reads random batches of one field
// with checksum verification, and says how fast. Needs only an installed ddstage: no MPI, no
// CLI library. Exit codes as ddstage's: 0 ok, 1 run-time error, 2 usage error.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <ddstage/ddstage.hpp>

namespace {

constexpr const char* kUsage =
    "usage: reader-app --store DIR --dataset NAME [--field F] [--batch 128] [--batches 10] [--seed "
    "1]\n";

struct Options {
  std::string store, dataset, field;
  uint64_t batch = 128, batches = 10, seed = 1;
};

uint64_t to_count(std::string_view flag, const std::string& text) {
  std::size_t used = 0;
  uint64_t n = 0;
  try {
    n = std::stoull(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || text.empty() || text[0] == '-')
    throw ddstage::UsageError(std::string(flag) + " wants a count, not '" + text + "'");
  return n;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    if (i + 1 == argc) throw ddstage::UsageError(std::string(flag) + " needs a value");
    std::string value = argv[++i];
    if (flag == "--store")
      o.store = value;
    else if (flag == "--dataset")
      o.dataset = value;
    else if (flag == "--field")
      o.field = value;
    else if (flag == "--batch")
      o.batch = to_count(flag, value);
    else if (flag == "--batches")
      o.batches = to_count(flag, value);
    else if (flag == "--seed")
      o.seed = to_count(flag, value);
    else
      throw ddstage::UsageError("unknown flag " + std::string(flag));
  }
  if (o.store.empty() || o.dataset.empty())
    throw ddstage::UsageError("--store and --dataset are required");
  if (o.batch == 0) throw ddstage::UsageError("--batch must be at least 1");
  return o;
}

int run(const Options& o) {
  // DDSTAGE_* variables apply as settings (DDSTAGE_PROFILE=1 prints the read profile at exit).
  ddstage::Client client{o.store, ddstage::Settings::resolve({}, ddstage::environment_settings(),
                                                             std::nullopt, false)};
  ddstage::Dataset dataset = client.open(o.dataset);
  const ddstage::Index& index = dataset.index();
  if (index.samples() == 0) throw ddstage::UsageError("dataset '" + o.dataset + "' has no samples");
  const std::string field = o.field.empty() ? index.fields()[index.default_field()].name : o.field;

  ddstage::Reader reader = dataset.reader();  // one per thread
  std::mt19937_64 rng{o.seed};
  std::uniform_int_distribution<uint64_t> pick(0, index.samples() - 1);
  std::vector<uint64_t> ids(o.batch);
  std::vector<std::byte> rows;
  uint64_t bytes = 0;
  std::chrono::nanoseconds spent{0};
  for (uint64_t b = 0; b < o.batches; ++b) {
    for (auto& id : ids) id = pick(rng);
    rows.resize(reader.batch_bytes(field, ids));
    auto start = std::chrono::steady_clock::now();
    reader.get_batch(field, ids, rows, /*verify=*/true);
    spent += std::chrono::steady_clock::now() - start;
    bytes += rows.size();
  }
  const uint64_t n = o.batch * o.batches;
  const double us = std::chrono::duration<double, std::micro>(spent).count();
  std::printf("read %llu rows, %llu bytes of '%s' from '%s', verified: %.2f µs/row\n",
              static_cast<unsigned long long>(n), static_cast<unsigned long long>(bytes),
              field.c_str(), o.dataset.c_str(), n ? us / static_cast<double>(n) : 0.0);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  try {
    options = parse(argc, argv);
  } catch (const ddstage::Error& e) {
    std::fprintf(stderr, "reader-app: error: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    return run(options);
  } catch (const ddstage::Error& e) {
    std::fprintf(stderr, "reader-app: error: %s\n", e.what());
    return ddstage::exit_code(e.kind());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "reader-app: error: %s\n", e.what());
    return 1;
  }
}
