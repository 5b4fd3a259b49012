#include "ddstage/profile.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <mutex>

#include <fmt/format.h>

#include "batch_timer.hpp"
#include "ddstage/tool/host_name.hpp"

namespace ddstage {
namespace {

struct ThreadRecord {
  std::mutex mu;  // the owner takes it once per batch; only snapshot/reset contend
  ProfileReport data;
};

void merge(ProfileReport& into, const ProfileReport& from) {
  into.batches += from.batches;
  into.rows += from.rows;
  into.bytes += from.bytes;
  into.batch_ns.merge(from.batch_ns);
  for (std::size_t s = 0; s < profile_stage_count; ++s) into.stage_ns[s].merge(from.stage_ns[s]);
  for (const auto& path : from.paths) {
    auto it = std::find_if(into.paths.begin(), into.paths.end(),
                           [&](const auto& p) { return p.first == path.first; });
    if (it == into.paths.end()) {
      into.paths.push_back(path);
    } else {
      it->second += path.second;
    }
  }
}

/// Every thread's record, and what threads that ended left behind. Never destroyed: the
/// report printed at exit runs after static destructors may have begun.
struct Registry {
  std::mutex mu;
  std::vector<ThreadRecord*> live;
  ProfileReport retired;
};
Registry& registry() {
  static auto* r = new Registry;
  return *r;
}

/// The calling thread's record, made on its first profiled batch and folded into the
/// registry's retired figures when the thread ends.
class ThreadSlot {
 public:
  ThreadSlot() = default;
  ThreadSlot(const ThreadSlot&) = delete;
  ThreadSlot& operator=(const ThreadSlot&) = delete;
  ~ThreadSlot() {
    if (!m_record) return;
    Registry& r = registry();
    std::lock_guard lock(r.mu);
    merge(r.retired, m_record->data);
    std::erase(r.live, m_record);
    delete m_record;
  }
  ThreadRecord& get() {
    if (!m_record) {
      m_record = new ThreadRecord;
      Registry& r = registry();
      std::lock_guard lock(r.mu);
      r.live.push_back(m_record);
    }
    return *m_record;
  }

 private:
  ThreadRecord* m_record = nullptr;
};

thread_local ThreadSlot t_slot;
thread_local detail::BatchTimer* t_current = nullptr;

std::atomic<bool> g_enabled{false};

bool is_false(std::string_view v) {
  return v.empty() || v == "0" || v == "false" || v == "no" || v == "off";
}

void print_report_at_exit();

std::string& exit_destination() {
  static auto* where = new std::string;
  return *where;
}

std::mutex& exit_destination_mutex() {
  static auto* mu = new std::mutex;
  return *mu;
}

// Every Client and Store applies its settings here, possibly from several threads at once.
void print_at_exit(std::string_view where) {
  static std::once_flag registered;
  {
    std::lock_guard lock(exit_destination_mutex());
    exit_destination() = where;
  }
  std::call_once(registered, [] { std::atexit(print_report_at_exit); });
}

void print_report_at_exit() {
  const ProfileReport report = profile::snapshot();
  const std::string text = fmt::format("ddstage profile (pid {} on {}):\n{}", getpid(), host_name(),
                                       profile::format(report));
  std::string where;
  {
    std::lock_guard lock(exit_destination_mutex());
    where = exit_destination();
  }
  if (!is_false(where) && where != "1" && where != "true" && where != "yes" && where != "on") {
    std::string path = where;
    for (auto [token, value] : {std::pair<std::string, std::string>{"%p", std::to_string(getpid())},
                                {"%h", host_name()}}) {
      for (std::size_t at; (at = path.find(token)) != std::string::npos;)
        path.replace(at, 2, value);
    }
    std::ofstream out(path, std::ios::app);
    if (out << text) return;
    std::fprintf(stderr, "ddstage: warning: cannot write the profile to %s\n", path.c_str());
  }
  std::fputs(text.c_str(), stderr);
}

}  // namespace

std::string_view stage_name(ProfileStage stage) noexcept {
  static constexpr std::array<std::string_view, profile_stage_count> names{
      "queue_wait", "registration", "post", "completion_wait", "copy", "gpu_sync", "other"};
  return names[static_cast<std::size_t>(stage)];
}

namespace profile {

void enable(bool on) noexcept {
  g_enabled.store(on, std::memory_order_relaxed);
}

bool enabled() noexcept {
  return g_enabled.load(std::memory_order_relaxed);
}

ProfileReport snapshot() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  ProfileReport report = r.retired;
  for (ThreadRecord* t : r.live) {
    std::lock_guard record_lock(t->mu);
    merge(report, t->data);
  }
  return report;
}

void reset() {
  Registry& r = registry();
  std::lock_guard lock(r.mu);
  r.retired = {};
  for (ThreadRecord* t : r.live) {
    std::lock_guard record_lock(t->mu);
    t->data = {};
  }
}

void add(ProfileStage stage, uint64_t ns) noexcept {
  if (!enabled()) return;
  ThreadRecord& t = t_slot.get();
  std::lock_guard lock(t.mu);
  t.data.stage_ns[static_cast<std::size_t>(stage)].record(ns);
}

void configure(std::string_view value) {
  if (is_false(value)) return;
  enable();
  print_at_exit(value);
}

std::string format(const ProfileReport& report) {
  if (report.batches == 0) return "no batches read\n";
  const auto us = [](double ns) { return ns / 1e3; };
  uint64_t staged_ns = 0;
  for (const auto& h : report.stage_ns) staged_ns += h.sum();
  std::string out = fmt::format(
      "{} batches, {} rows, {:.1f} MiB in {:.3f} s of get_batch: mean {:.1f} us/batch, p99 {:.1f}, "
      "max {:.1f}\n",
      report.batches, report.rows, static_cast<double>(report.bytes) / (1 << 20),
      static_cast<double>(report.batch_ns.sum()) / 1e9, us(report.batch_ns.mean()),
      us(static_cast<double>(report.batch_ns.percentile(0.99))),
      us(static_cast<double>(report.batch_ns.max())));
  out += fmt::format("{:<16} {:>10} {:>6} {:>10} {:>10} {:>10} {:>10} {:>9}\n", "stage", "total_s",
                     "share", "mean_us", "p50_us", "p99_us", "max_us", "batches");
  for (std::size_t s = 0; s < profile_stage_count; ++s) {
    const LatencyHistogram& h = report.stage_ns[s];
    if (h.count() == 0) continue;
    out += fmt::format("{:<16} {:>10.4f} {:>5.1f}% {:>10.2f} {:>10.2f} {:>10.2f} {:>10.1f} {:>9}\n",
                       stage_name(static_cast<ProfileStage>(s)), static_cast<double>(h.sum()) / 1e9,
                       100.0 * static_cast<double>(h.sum()) /
                           static_cast<double>(std::max<uint64_t>(staged_ns, 1)),
                       us(h.mean()), us(static_cast<double>(h.percentile(0.5))),
                       us(static_cast<double>(h.percentile(0.99))),
                       us(static_cast<double>(h.max())), h.count());
  }
  std::string paths;
  for (const auto& [name, count] : report.paths) {
    paths += fmt::format("{}{} ({} batches)", paths.empty() ? "" : ", ", name, count);
  }
  if (!paths.empty()) out += "paths: " + paths + "\n";
  return out;
}

}  // namespace profile

namespace detail {

BatchTimer::BatchTimer() noexcept : m_active(profile::enabled()) {
  if (!m_active) return;
  m_start = m_last = Clock::now();
  t_current = this;
}

BatchTimer::~BatchTimer() {
  if (m_active && t_current == this) t_current = nullptr;
}

void BatchTimer::mark_now(ProfileStage stage) noexcept {
  const auto now = Clock::now();
  const auto s = static_cast<std::size_t>(stage);
  m_ns[s] += static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(now - m_last).count());
  m_touched |= static_cast<uint8_t>(1u << s);
  m_last = now;
}

void BatchTimer::path(const char* name) noexcept {
  if (!m_active) return;
  for (uint8_t i = 0; i < m_paths_used; ++i) {
    if (std::strcmp(m_paths[i], name) == 0) return;
  }
  if (m_paths_used < m_paths.size()) m_paths[m_paths_used++] = name;
}

void BatchTimer::finish(uint64_t rows, uint64_t bytes) noexcept {
  if (!m_active) return;
  mark_now(ProfileStage::other);
  m_active = false;
  if (t_current == this) t_current = nullptr;
  const auto total = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(m_last - m_start).count());
  try {
    ThreadRecord& t = t_slot.get();
    std::lock_guard lock(t.mu);
    ProfileReport& d = t.data;
    ++d.batches;
    d.rows += rows;
    d.bytes += bytes;
    d.batch_ns.record(total);
    for (std::size_t s = 0; s < profile_stage_count; ++s) {
      if (m_touched & (1u << s)) d.stage_ns[s].record(m_ns[s]);
    }
    for (uint8_t i = 0; i < m_paths_used; ++i) {
      auto it = std::find_if(d.paths.begin(), d.paths.end(),
                             [&](const auto& p) { return p.first == m_paths[i]; });
      if (it == d.paths.end()) {
        d.paths.emplace_back(m_paths[i], 1);
      } else {
        ++it->second;
      }
    }
  } catch (const std::bad_alloc&) {
    // A profile that cannot grow loses this batch's figures, never the batch.
  }
}

void profile_mark(ProfileStage stage) noexcept {
  if (BatchTimer* t = t_current) t->mark(stage);
}

}  // namespace detail
}  // namespace ddstage
