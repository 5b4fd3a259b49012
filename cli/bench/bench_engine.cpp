#include "bench/bench_engine.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <latch>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "ddstage/profile.hpp"

namespace ddstage::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct ThreadTally {
  uint64_t bytes = 0;
  LatencyHistogram ns_per_row;
  std::exception_ptr error;
};

void read_share(const ReadFn& read, std::span<const uint64_t> share, uint64_t batch,
                ThreadTally& tally) {
  for (std::size_t first = 0; first < share.size(); first += batch) {
    const auto calls = share.subspan(first, std::min<std::size_t>(batch, share.size() - first));
    const auto t0 = Clock::now();
    tally.bytes += read(calls);
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
    tally.ns_per_row.record(static_cast<uint64_t>(ns) / calls.size());
  }
}

/// read behind lock, for threads sharing one reader. With the profile on, the wait for the
/// lock is its queue_wait: the cost of sharing.
ReadFn locked(ReadFn read, std::mutex& lock) {
  return
      [shared = std::make_shared<ReadFn>(std::move(read)), &lock](std::span<const uint64_t> batch) {
        if (!profile::enabled()) {
          const std::lock_guard guard(lock);
          return (*shared)(batch);
        }
        const auto t0 = Clock::now();
        const std::lock_guard guard(lock);
        const auto waited =
            std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
        profile::add(ProfileStage::queue_wait, static_cast<uint64_t>(waited));
        return (*shared)(batch);
      };
}

}  // namespace

void run_cell(BenchCell& cell, std::span<const uint64_t> ids, const CellShape& shape,
              const std::function<ReadFn(unsigned thread)>& make_reader) {
  const unsigned threads = std::max(1u, shape.threads);
  std::mutex lock;
  std::vector<ReadFn> readers;
  if (shape.shared) {
    readers.assign(threads, locked(make_reader(0), lock));
  } else {
    for (unsigned t = 0; t < threads; ++t) readers.push_back(make_reader(t));
  }
  std::vector<ThreadTally> tallies(threads);
  const uint64_t batch = std::max<uint64_t>(1, shape.batch);
  const std::size_t per = (ids.size() + threads - 1) / threads;
  auto share_of = [&](unsigned t) {
    const std::size_t first = std::min(ids.size(), t * per);
    return ids.subspan(first, std::min(per, ids.size() - first));
  };
  auto t0 = Clock::now();
  if (threads == 1) {
    // On the calling thread: MPI initialised without MPI_THREAD_MULTIPLE allows no other.
    read_share(readers[0], ids, batch, tallies[0]);
  } else {
    std::latch start(threads + 1);
    std::vector<std::jthread> pool;
    for (unsigned t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        start.arrive_and_wait();
        try {
          read_share(readers[t], share_of(t), batch, tallies[t]);
        } catch (...) {
          tallies[t].error = std::current_exception();
        }
      });
    }
    start.arrive_and_wait();
    t0 = Clock::now();
    pool.clear();
  }
  cell.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  cell.rows = ids.size();
  for (auto& tally : tallies) {
    if (tally.error) std::rethrow_exception(tally.error);
    cell.bytes += tally.bytes;
    cell.ns_per_row.merge(tally.ns_per_row);
  }
}

}  // namespace ddstage::cli

namespace ddstage::cli {

namespace {
constexpr uint64_t floor_buffer_cap = 1ull << 30;
}  // namespace

MemcpyFloor::MemcpyFloor(uint64_t source_bytes, std::function<uint64_t(uint64_t id)> length_of)
    : m_source(std::make_shared<const std::vector<std::byte>>(
          std::clamp<uint64_t>(source_bytes, 1, floor_buffer_cap), std::byte{1})),
      m_length_of(std::move(length_of)) {}

ReadFn MemcpyFloor::reader() const {
  return [source = m_source, length_of = m_length_of,
          dest = std::vector<std::byte>()](std::span<const uint64_t> ids) mutable {
    uint64_t at = 0;
    for (uint64_t id : ids) {
      const uint64_t len = length_of(id);
      if (dest.size() < at + len) dest.resize(at + len);
      // A row larger than the source (over 1 GiB) is copied from it in pieces.
      for (uint64_t done = 0; done < len;) {
        const uint64_t n = std::min(len - done, source->size());
        const uint64_t from = (id * 0x9E3779B97F4A7C15ull) % (source->size() - n + 1);
        std::memcpy(dest.data() + at + done, source->data() + from, n);
        done += n;
      }
      at += len;
    }
    return at;
  };
}

void warm_up(const std::vector<ReadFn>& readers, std::span<const uint64_t> ids) {
  for (std::size_t first = 0; first < ids.size(); first += 128) {
    readers.front()(ids.subspan(first, std::min<std::size_t>(128, ids.size() - first)));
  }
  for (std::size_t r = 1; r < readers.size(); ++r)
    readers[r](ids.first(std::min<std::size_t>(32, ids.size())));
}

}  // namespace ddstage::cli
