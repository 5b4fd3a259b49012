#include "bench/training_loop.hpp"

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <numeric>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "ddstage/error.hpp"

namespace ddstage::cli {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t no_batch = UINT64_MAX;

/// Worker threads reading batches ahead of the trainer into a ring of `prefetch` slots: batch
/// i goes to slot i % prefetch, and a worker claims batch i only once the trainer has taken
/// batch i - prefetch, so the ring never holds more than prefetch batches. Batches are handed
/// over by swapping buffers, never copied.
class Prefetcher {
 public:
  Prefetcher(const TrainingLoopOptions& options, std::span<const uint64_t> ids,
             const BatchSourceFactory& sources)
      : m_batch(options.batch), m_steps(options.steps), m_ids(ids), m_slots(options.prefetch) {
    for (unsigned t = 0; t < options.threads; ++t)
      m_workers.emplace_back([this, &sources] { work(sources); });
  }
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;
  ~Prefetcher() {
    stop(nullptr);
    m_workers.clear();  // joins
  }

  /// Blocks until batch i is read, then swaps it into out and frees its slot. Rethrows the
  /// first worker error.
  void take(uint64_t i, std::vector<std::byte>& out) {
    Slot& slot = m_slots[i % m_slots.size()];
    {
      std::unique_lock lock(m_mutex);
      m_changed.wait(lock, [&] { return m_error || slot.batch == i; });
      if (m_error) std::rethrow_exception(m_error);
      out.swap(slot.data);
      slot.batch = no_batch;
      m_taken = i + 1;
    }
    m_changed.notify_all();
  }

 private:
  struct Slot {
    std::vector<std::byte> data;
    uint64_t batch = no_batch;  // which batch data holds, once read
  };

  void work(const BatchSourceFactory& sources) {
    try {
      const auto source = sources();
      std::vector<std::byte> buffer;
      for (uint64_t i; claim(i);) {
        source->read(m_ids.subspan(i * m_batch, m_batch), buffer);
        {
          std::lock_guard lock(m_mutex);
          Slot& slot = m_slots[i % m_slots.size()];
          slot.data.swap(buffer);
          slot.batch = i;
        }
        m_changed.notify_all();
      }
    } catch (...) {
      stop(std::current_exception());
    }
  }

  /// The next batch to read, once the ring has room for it; false when none is left.
  bool claim(uint64_t& i) {
    std::unique_lock lock(m_mutex);
    m_changed.wait(
        lock, [&] { return m_stopped || m_next >= m_steps || m_next < m_taken + m_slots.size(); });
    if (m_stopped || m_next >= m_steps) return false;
    i = m_next++;
    return true;
  }

  void stop(std::exception_ptr error) noexcept {
    {
      std::lock_guard lock(m_mutex);
      if (error && !m_error) m_error = error;
      m_stopped = true;
    }
    m_changed.notify_all();
  }

  const uint64_t m_batch;
  const uint64_t m_steps;
  const std::span<const uint64_t> m_ids;
  std::mutex m_mutex;
  std::condition_variable m_changed;
  std::vector<Slot> m_slots;
  uint64_t m_next = 0;   // next batch to claim
  uint64_t m_taken = 0;  // batches the trainer has taken
  bool m_stopped = false;
  std::exception_ptr m_error;
  std::vector<std::jthread> m_workers;  // last: joined before the state they use goes
};

}  // namespace

std::vector<uint64_t> shuffled_batches(uint64_t samples, uint64_t batch, uint64_t steps,
                                       uint64_t seed) {
  if (batch == 0) throw UsageError("--batch must be > 0");
  if (batch > samples) {
    throw UsageError(
        fmt::format("--batch {} is larger than the dataset ({} samples)", batch, samples));
  }
  const uint64_t per_epoch = samples / batch;
  std::vector<uint64_t> order(samples);
  std::vector<uint64_t> ids;
  ids.reserve(steps * batch);
  for (uint64_t epoch = 0; ids.size() < steps * batch; ++epoch) {
    std::iota(order.begin(), order.end(), uint64_t{0});
    std::seed_seq seq{seed, epoch};
    std::mt19937_64 rng(seq);
    std::shuffle(order.begin(), order.end(), rng);
    const uint64_t take = std::min(per_epoch, steps - ids.size() / batch) * batch;
    ids.insert(ids.end(), order.begin(), order.begin() + static_cast<std::ptrdiff_t>(take));
  }
  return ids;
}

TrainingLoopResult run_training_loop(const TrainingLoopOptions& options,
                                     std::span<const uint64_t> ids,
                                     const BatchSourceFactory& sources, const BatchCheck& check,
                                     const StepProgress& progress) {
  TrainingLoopResult r;
  const uint64_t per_epoch = options.per_epoch ? options.per_epoch : options.steps;
  std::vector<std::byte> batch;
  uint64_t bytes = 0;
  const auto start = Clock::now();
  auto epoch_start = start;
  Prefetcher loader(options, ids, sources);
  for (uint64_t step = 0; step < options.steps; ++step) {
    const uint64_t epoch = step / per_epoch;  // 0-based
    const bool first_of_epoch = step % per_epoch == 0;
    const auto asked = Clock::now();
    if (first_of_epoch && step) epoch_start = asked;
    if (first_of_epoch && epoch <= options.epochs_apart) {
      r.epochs.push_back({.first_epoch = epoch + 1, .last_epoch = epoch + 1});
    }
    EpochResult& e = r.epochs.back();
    e.last_epoch = epoch + 1;
    loader.take(step, batch);
    const auto got = Clock::now();
    const auto wait = got - asked;
    if (first_of_epoch && epoch == e.first_epoch - 1)
      e.first_wait = std::chrono::duration<double>(wait).count();
    e.wait_ns.record(
        static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(wait).count()));
    e.waits_over_short += wait > stall_short;
    e.waits_over_long += wait > stall_long;
    const auto step_ids = ids.subspan(step * options.batch, options.batch);
    e.mismatches += check(step_ids, batch);
    e.bytes += batch.size();
    e.steps += 1;
    e.samples += options.batch;
    bytes += batch.size();
    std::this_thread::sleep_until(got + options.compute);
    const auto done = Clock::now();
    // An epoch's time runs from its own start; epochs reported together add theirs up.
    if (step + 1 == options.steps || (step + 1) % per_epoch == 0)
      e.seconds += std::chrono::duration<double>(done - epoch_start).count();
    progress(step + 1, bytes, std::chrono::duration<double>(done - start).count());
  }
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

}  // namespace ddstage::cli
