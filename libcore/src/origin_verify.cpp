#include "ddstage/tool/origin_verify.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <mutex>
#include <system_error>
#include <thread>

#include <spdlog/spdlog.h>

#include "ddstage/error.hpp"
#include "ddstage/tool/file_descriptor.hpp"
#include "ddstage/tool/origin_reader.hpp"

namespace ddstage {
namespace {

/// Samples per work item: large enough to amortise the atomic, small enough to balance threads.
constexpr uint64_t samples_per_claim = 256;

struct Shared {
  const Index& index;
  const VerifyOptions& options;
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> entries{0};
  std::atomic<uint64_t> bytes{0};
  std::mutex mutex;  // guards report failures; taken only on a failure
  VerifyReport report;
  std::exception_ptr error;
};

void sort_and_trim(std::vector<VerifyFailure>& fails, std::size_t keep) {
  std::sort(fails.begin(), fails.end(),
            [](const auto& a, const auto& b) { return a.sample < b.sample; });
  if (fails.size() > keep) fails.resize(keep);
}

void record_failure(Shared& s, uint64_t sample, uint32_t field, std::string reason) {
  std::lock_guard lock(s.mutex);
  ++s.report.failures;
  auto& fails = s.report.first_failures;
  fails.push_back({sample, s.index.fields()[field].name, std::move(reason)});
  // Threads finish out of order: keep a bounded superset of the lowest sample ids.
  if (fails.size() > 4 * s.options.max_reported + 16) sort_and_trim(fails, s.options.max_reported);
}

void verify_worker(Shared& s) {
  // The threads share the process's open-file limit.
  const std::size_t max_open =
      std::max<std::size_t>(1, open_file_limit() / 4 / std::max(1u, s.options.threads));
  OriginReader reader(
      s.index, {.verify = false, .allow_stale = s.options.allow_stale, .max_open_files = max_open});
  std::vector<std::byte> buffer;
  const uint64_t n = s.index.samples();
  const auto fields = static_cast<uint32_t>(s.index.fields().size());
  for (uint64_t begin = s.next.fetch_add(samples_per_claim); begin < n;
       begin = s.next.fetch_add(samples_per_claim)) {
    const uint64_t end = std::min(n, begin + samples_per_claim);
    for (uint32_t f = 0; f < fields; ++f) {
      // The blocks that start in [begin, end): each block is checked by one claim.
      for (uint64_t sample = begin; sample < end;) {
        const Block b = s.index.block(sample, f);
        sample = b.first_sample + b.rows;
        if (b.first_sample < begin) continue;
        try {
          if (!reader.read_block(f, b, buffer)) {
            record_failure(s, b.first_sample, f,
                           b.rows == 1 ? "checksum mismatch"
                                       : "checksum mismatch in the block of samples " +
                                             std::to_string(b.first_sample) + ".." +
                                             std::to_string(sample - 1));
          }
        } catch (const StaleError&) {
          throw;
        } catch (const Error& err) {
          record_failure(s, b.first_sample, f, err.message());
        }
        s.bytes.fetch_add(buffer.size(), std::memory_order_relaxed);
      }
    }
    s.entries.fetch_add((end - begin) * fields, std::memory_order_relaxed);
  }
}

}  // namespace

VerifyReport verify_origin(const Index& index, const VerifyOptions& options) {
  Shared s{index, options};
  const auto start = std::chrono::steady_clock::now();
  const unsigned threads = std::max(1u, options.threads);
  std::vector<std::thread> pool;
  try {
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&s] {
        try {
          verify_worker(s);
        } catch (...) {
          std::lock_guard lock(s.mutex);
          if (!s.error) s.error = std::current_exception();
          s.next.store(s.index.samples());  // stop the others
        }
      });
    }
  } catch (const std::system_error& e) {
    // Out of threads or memory for stacks: carry on with the threads that did start.
    if (pool.empty())
      throw Error(ErrorKind::runtime, std::string("cannot start a verify thread: ") + e.what());
    spdlog::warn("started {} of {} verify threads ({})", pool.size(), threads, e.what());
  }
  const uint64_t total = index.samples() * index.fields().size();
  auto progress = [&](bool final) {
    if (!options.progress) return;
    options.progress(
        {s.entries.load(), total, s.bytes.load(),
         std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), final});
  };
  // The calling thread reports progress while the pool works.
  for (int tick = 1; s.next.load() < index.samples(); ++tick) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (tick % 20 == 0) progress(false);
  }
  for (auto& t : pool) t.join();
  if (s.error) std::rethrow_exception(s.error);
  progress(true);
  s.report.entries_checked = s.entries.load();
  s.report.bytes_checked = s.bytes.load();
  sort_and_trim(s.report.first_failures, options.max_reported);
  return s.report;
}

}  // namespace ddstage
