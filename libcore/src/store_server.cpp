#include "ddstage/store_server.hpp"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "control/control_server.hpp"
#include "heartbeat.hpp"
#include "loopback.hpp"
#include "peer_watch.hpp"
#include "rank_exit.hpp"
#include "signal_watch.hpp"
#include "stoppable_sleep.hpp"
#include "ddstage/error.hpp"
#include "ddstage/index.hpp"
#include "ddstage/shard_layout.hpp"
#include "ddstage/shard_loader.hpp"
#include "ddstage/shard_plan.hpp"
#include "ddstage/store_cleanup.hpp"
#include "ddstage/store_control.hpp"
#include "ddstage/config.hpp"
#include "ddstage/store_descriptor.hpp"
#include "mpi/mpi_comm.hpp"
#include "process.hpp"
#if DDSTAGE_HAVE_FABRIC
#include "fabric/fabric_server.hpp"
#endif

namespace ddstage {
namespace {

using detail::Message;
namespace fs = std::filesystem;

constexpr auto accept_poll = std::chrono::milliseconds(200);

/// Characters safe in a shared-memory name; the dataset name itself is kept as given.
std::string segment_safe(const std::string& name) {
  std::string out;
  for (char c : name.substr(0, 48)) out += std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' ? c : '_';
  return out;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

std::size_t count_line(const std::string& lines, const std::string& value) {
  std::size_t n = 0;
  std::istringstream in(lines);
  for (std::string line; std::getline(in, line);) n += line == value;
  return n;
}

/// This rank's part of one loaded dataset.
struct LoadedShard {
  detail::RankExit::Tracked tracked;  // before segment: forgotten once the segment is unlinked
  fs::path index;
  ShardRange range;
  ShmSegment segment;
#if DDSTAGE_HAVE_FABRIC
  std::optional<detail::FabricRegistration> fabric;  // after segment: deregistered before unmapping
#endif
};

/// A field of a gathered per-rank line ("KEY BASE"): what rank 0 writes into store.yaml.
uint64_t word_of(const std::string& line, int n) {
  std::istringstream in(line);
  uint64_t v = 0;
  for (int i = 0; i <= n; ++i) in >> v;
  return v;
}

/// Rank 0's account of a running load: logged at info level every 10%, and sent to the client
/// that asked for it as interim messages {progress, total, samples} before the reply. Rank 0
/// sees only its own shard; shards are balanced by bytes, so its fraction done, scaled to the
/// dataset's bytes, estimates the whole load's (the reply carries the exact time). Started
/// before the index is opened: checking a large tree's freshness can outlast control_timeout,
/// and the keepalives (totals 0 until describe()) tell the client the store is at work.
class LoadReporter {
 public:
  explicit LoadReporter(detail::ControlConnection* client)
      : m_client(client), m_thread([this](std::stop_token stop) { run(stop); }) {}
  LoadReporter(const LoadReporter&) = delete;
  LoadReporter& operator=(const LoadReporter&) = delete;

  /// Once the index is open: what the load is of.
  void describe(std::string name, uint64_t dataset_bytes, uint64_t samples) {
    std::lock_guard lock(m_mutex);
    m_name = std::move(name);
    m_bytes = dataset_bytes;
    m_samples = samples;
  }

  /// From the loading streams: atomics only, the socket is the reporter thread's.
  void update(uint64_t done, uint64_t total) noexcept {
    m_fraction = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
  }

 private:
  static constexpr auto interval = std::chrono::milliseconds(250);
  /// Sent even without news, so the client's per-message timeout measures a silent store, not a
  /// long load (rank 0 may wait on slower ranks after its own shard is done).
  static constexpr auto keepalive = std::chrono::seconds(5);

  /// Reports at once (the client sees the load start), then every interval, and once more
  /// when stopped (the log reaches 100% even for a load shorter than an interval).
  void run(std::stop_token stop) {
    double sent = -1;
    int logged_decile = 0;
    auto last_send = std::chrono::steady_clock::now();
    for (;;) {
      const double fraction = m_fraction.load();
      const auto now = std::chrono::steady_clock::now();
      if (fraction != sent || now - last_send >= keepalive) {
        send(fraction);
        sent = fraction;
        last_send = now;
      }
      for (; logged_decile < static_cast<int>(fraction * 10); ++logged_decile) {
        std::lock_guard lock(m_mutex);
        spdlog::info("loading '{}': {}% (rank 0's shard)", m_name, (logged_decile + 1) * 10);
      }
      if (stop.stop_requested()) return;
      detail::sleep_unless_stopped(stop, interval);
    }
  }

  void send(double fraction) {
    if (!m_client) return;
    detail::Message m;
    {
      std::lock_guard lock(m_mutex);
      m["progress"] = static_cast<uint64_t>(fraction * static_cast<double>(m_bytes));
      m["total"] = m_bytes;
      m["samples"] = m_samples;
    }
    try {
      m_client->send(m, std::chrono::seconds(2));
    } catch (const Error& e) {
      // The load goes on for every rank; the client learns the outcome if it comes back to read.
      spdlog::warn("stopped sending load progress to {}: {}", m_client->peer(), e.what());
      m_client = nullptr;
    }
  }

  std::mutex m_mutex;  ///< guards the three below
  std::string m_name;
  uint64_t m_bytes = 0;
  uint64_t m_samples = 0;
  detail::ControlConnection* m_client;
  std::atomic<double> m_fraction{0};
  std::jthread m_thread;  // last: starts once everything it reads is set
};

/// The state and command handlers of one server rank. Every command runs on every rank, in the
/// same order (rank 0 broadcasts it), so all ranks hold the same datasets.
class ServerRank {
 public:
  ServerRank(const ServeOptions& options, const detail::MpiSession& mpi, detail::RankExit& exit)
      : m_options(options), m_mpi(mpi), m_exit(exit),
        m_peer_timeout(options.settings.get_duration("peer_timeout")) {}

  void run();

 private:
  Message execute(const Message& command);
  Message load(const Message& args);
  Message unload(const Message& args);
  Message stop();
  /// Rank 0, for a stop request: stops every rank when all were heard lately; otherwise frees
  /// this rank alone, and the reply names the ranks it could not reach (they end themselves
  /// within peer_timeout).
  Message stop_request();
  /// Collective, after every command: each rank's bytes held, for status replies.
  void record_memory();
  /// {ok, memory_used, last_heard} as of the last command that finished.
  Message status_reply();
  /// Rank 0's front desk: heartbeats and status requests are answered at once, idle or busy (a
  /// status from the last record); the rest wait their turn.
  std::optional<Message> front_desk(const Message& request, bool busy);
  /// Collective: UsageError on every rank when the ranks span hosts but an address rank 0 or a
  /// rank's fabric endpoint publishes reaches only its own host.
  void refuse_loopback(std::size_t host_count, const std::string& fabric_ip);
  /// Logs why, then frees this rank's memory and ends the process with exit code 1.
  [[noreturn]] void lost(const std::string& why);
  /// "rank R on HOST" once the ranks' hosts are gathered, "rank R" before: for the watch threads.
  std::string rank_label(int rank) const;
  /// Right after start(): a rank lost during the other start-up collectives ends the store too.
  void start_watching(const Message& startup);
  /// True when `failure` is empty on every rank; otherwise rank 0's reply gets the first failing
  /// rank's message (see encode_failure).
  bool agree(const std::string& failure, Message& reply);
  /// Collective: rank 0's checks and control socket, then every rank's lock; what rank 0 told
  /// every rank (store id, control address, token).
  Message start();
  std::string start_rank0();
  /// Collective: the fabric endpoint when wanted, refused when it or the control address is
  /// loopback while `hosts` (one line per rank) span several hosts; start_fabric's text.
  std::string start_transports(const std::string& hosts);
  /// Rank 0: the ranks' lines ("HOST PID MEMORY_LIMIT PROVIDER ADDRESS") into m_descriptor.
  void describe(const std::vector<std::string>& infos);
  /// Collective: opens this rank's fabric endpoint when options and hosts ask for one; the
  /// provider and address (hex) to publish, or "- -".
  std::string start_fabric(bool several_hosts);
  void serve_rank0();
  void serve_others();
  void publish();
  bool is_root() const { return m_mpi.rank() == 0; }

  ServeOptions m_options;
  const detail::MpiSession& m_mpi;
  detail::RankExit& m_exit;
  std::chrono::milliseconds m_peer_timeout;
  std::string m_host = detail::host_name();
  mutable std::mutex m_hosts_mutex;  ///< guards m_hosts: the watch threads read it
  std::vector<std::string> m_hosts;  ///< each rank's host, once gathered
  uint64_t m_mem_limit = 0;
#if DDSTAGE_HAVE_FABRIC
  std::optional<detail::FabricServer> m_fabric;  // before m_loaded: outlives every registration
#endif
  std::map<std::string, LoadedShard> m_loaded;
  uint64_t m_generation = 0;
  std::string m_store_id;  ///< in segment names (StoreDescriptor::id)
  // Rank 0 only.
  std::mutex m_record_mutex;  ///< guards the two below: the front desk reads them
  std::vector<uint64_t> m_memory_used;
  std::string m_running;  ///< op of the command running, empty between commands
  std::optional<detail::PeerWatch> m_peers;  ///< set before m_control, whose thread records heartbeats
  std::optional<detail::ControlServer> m_control;  // after what its thread reads: stops first
  detail::ControlConnection* m_client = nullptr;   ///< whose request execute() is running
  StoreDescriptor m_descriptor;
  bool m_stopping = false;
  bool m_stopped_alone = false;  ///< rank 0 stopped without the ranks it could not reach
  // Other ranks only.
  std::optional<detail::Heartbeat> m_heartbeat;
};

Message error_reply(const std::string& message, ErrorKind kind) {
  return detail::error_reply(message, kind == ErrorKind::usage);
}

/// A rank's failure as one string for gathering: kind letter, then the message.
std::string encode_failure(const Error& e) { return (e.kind() == ErrorKind::usage ? "U" : "R") + std::string(e.what()); }

struct Failure {
  ErrorKind kind;
  std::string message;
};

/// What encode_failure encoded.
Failure decode_failure(const std::string& encoded) {
  return {encoded.starts_with('U') ? ErrorKind::usage : ErrorKind::runtime, encoded.substr(1)};
}

/// Throws a gathered failure as the kind of error it was, its message after `context`.
[[noreturn]] void throw_failure(const std::string& encoded, const std::string& context = {}) {
  const auto [kind, message] = decode_failure(encoded);
  if (kind == ErrorKind::usage) throw UsageError(context + message);
  throw Error(ErrorKind::runtime, context + message);
}

bool ServerRank::agree(const std::string& failure, Message& reply) {
  if (detail::all_ok(failure.empty(), MPI_COMM_WORLD)) return true;
  auto failures = detail::gather_strings(failure, MPI_COMM_WORLD);
  for (std::size_t r = 0; r < failures.size(); ++r) {
    if (failures[r].empty()) continue;
    const auto [kind, message] = decode_failure(failures[r]);
    const auto& host = m_descriptor.ranks.at(r).host;
    reply = error_reply(m_mpi.size() == 1 ? message : fmt::format("rank {} on {}: {}", r, host, message), kind);
    break;
  }
  return false;
}

Message ServerRank::load(const Message& args) {
  Message reply;
  const fs::path path = args["index"].as<std::string>();
  const auto verify = args["verify"].as<bool>();
  const auto allow_stale = args["allow_stale"].as<bool>();
  const auto replace = args["replace"].as<bool>();
  uint64_t limit = args["mem_limit"].as<uint64_t>();
  if (limit == 0) limit = m_mem_limit;

  std::optional<LoadReporter> reporter;
  if (is_root()) reporter.emplace(args["progress"].as<bool>() ? m_client : nullptr);
  // Phase 1, nothing allocated yet: can every rank open the index and hold its shard?
  std::optional<Index> index;
  std::string name = args["name"].as<std::string>();
  ShardRange range;
  uint64_t need = 0;
  std::string failure;
  try {
    index = Index::open(path);
    if (name.empty()) name = index->manifest().name;
    if (reporter) reporter->describe(name, index->manifest().total_bytes, index->samples());
    if (m_loaded.contains(name) && !replace) {
      throw UsageError("dataset '" + name + "' is already loaded; pass --replace to replace it");
    }
    if (!allow_stale) index->check_all_fresh();
    range = ShardPlan::balance(*index, m_mpi.size()).range(m_mpi.rank());
    need = ShardLayout(*index, range).total_bytes();
    uint64_t used = 0;
    for (const auto& [n, shard] : m_loaded) used += n == name ? 0 : shard.segment.bytes().size();
    if (used + need > limit) {
      throw UsageError(fmt::format("dataset '{}' does not fit: rank {} on {} needs {} bytes, has {} of {} free "
                                   "(--mem-limit)", name, m_mpi.rank(), m_host, need, limit - std::min(limit, used), limit));
    }
  } catch (const Error& e) {
    failure = encode_failure(e);
  }
  if (!agree(failure, reply)) return reply;

  // Phase 2: every rank loads; if one fails, all drop what they loaded (the old dataset stays).
  const auto t0 = std::chrono::steady_clock::now();
  const std::string segment = fmt::format("/ddstage-{}-{}-g{}-r{}", m_store_id, segment_safe(name),
                                          ++m_generation, m_mpi.rank());
  // Tracked before it exists: a signal during the load frees it too.
  auto tracked = m_exit.track(segment);
  std::optional<ShmSegment> loaded;
  try {
    ShardLoadOptions options{.verify = verify, .allow_stale = allow_stale, .streams = args["streams"].as<unsigned>()};
    if (reporter) options.progress = [&](uint64_t done, uint64_t total) { reporter->update(done, total); };
    loaded = load_shard(*index, range, segment, options);
  } catch (const Error& e) {
    failure = encode_failure(e);
  }
  if (!agree(failure, reply)) return reply;
  const double seconds =
      detail::max_over_ranks(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), MPI_COMM_WORLD);
  reporter.reset();  // kept until every rank is done: its keepalives cover the wait for the slowest
  LoadedShard shard{std::move(tracked), fs::absolute(path), range, std::move(*loaded)};
  std::string fabric_region;  // "KEY BASE" when the ranks serve over libfabric
#if DDSTAGE_HAVE_FABRIC
  if (m_fabric) {
    try {
      shard.fabric.emplace(*m_fabric, shard.segment.bytes());
      fabric_region = fmt::format("{} {}", shard.fabric->info().key, shard.fabric->info().base);
    } catch (const Error& e) {
      failure = encode_failure(e);
    }
  }
#endif
  if (!agree(failure, reply)) return reply;
  // A replaced shard is destroyed, not move-assigned: its registration goes before its memory
  // (clients could still read it by its old key) and its tracking after (a signal in between
  // must still find the old segment's name).
  m_loaded.erase(name);
  m_loaded.emplace(name, std::move(shard));

  auto sizes = detail::gather_strings(std::to_string(need), MPI_COMM_WORLD);
  auto segments = detail::gather_strings(segment, MPI_COMM_WORLD);
  auto regions = detail::gather_strings(fabric_region, MPI_COMM_WORLD);
  if (!is_root()) return reply;
  StoreDataset ds{name, fs::absolute(path), ShardPlan::balance(*index, m_mpi.size()).boundaries(), segments, {},
                  index->fingerprint()};
  for (const auto& s : sizes) ds.region_bytes.push_back(std::stoull(s));
  if (!fabric_region.empty()) {
    for (const auto& line : regions) {
      ds.fabric_keys.push_back(word_of(line, 0));
      ds.fabric_bases.push_back(word_of(line, 1));
    }
  }
  std::erase_if(m_descriptor.datasets, [&](const auto& d) { return d.name == name; });
  m_descriptor.datasets.push_back(ds);
  publish();
  reply["ok"] = true;
  reply["name"] = name;
  reply["samples"] = index->samples();
  reply["bytes"] = index->manifest().total_bytes;
  reply["seconds"] = seconds;
  reply["verified"] = verify;
  spdlog::info("loaded '{}': {} samples, {} bytes in {:.2f} s", name, index->samples(), index->manifest().total_bytes,
               seconds);
  return reply;
}

Message ServerRank::unload(const Message& args) {
  Message reply;
  const auto name = args["name"].as<std::string>();
  if (!m_loaded.contains(name)) return error_reply("no dataset '" + name + "' is loaded", ErrorKind::usage);
  m_loaded.erase(name);  // unlinks this rank's segment
  if (is_root()) {
    std::erase_if(m_descriptor.datasets, [&](const auto& d) { return d.name == name; });
    publish();
  }
  reply["ok"] = true;
  return reply;
}

void ServerRank::record_memory() {
  uint64_t used = 0;
  for (const auto& [n, shard] : m_loaded) used += shard.segment.bytes().size();
  auto used_by_rank = detail::gather_strings(std::to_string(used), MPI_COMM_WORLD);
  if (!is_root()) return;
  std::lock_guard lock(m_record_mutex);
  m_memory_used.clear();
  for (const auto& u : used_by_rank) m_memory_used.push_back(std::stoull(u));
}

Message ServerRank::status_reply() {
  Message reply;
  reply["ok"] = true;
  if (m_peers) {
    for (auto s : m_peers->silence_seconds()) reply["last_heard"].push_back(std::round(s * 10) / 10);
  }
  std::lock_guard lock(m_record_mutex);
  for (auto u : m_memory_used) reply["memory_used"].push_back(u);
  return reply;
}

std::optional<Message> ServerRank::front_desk(const Message& request, bool busy) {
  // Unchecked YAML from the peer: a missing key must not throw on the front desk's thread.
  const auto op = request["op"];
  if (!op || !op.IsScalar()) return std::nullopt;
  if (op.Scalar() == "heartbeat") {
    const auto rank = request["rank"];
    int r = -1;
    if (rank && rank.IsScalar()) YAML::convert<int>::decode(rank, r);
    if (!m_peers || !m_peers->heard(r)) return detail::error_reply("heartbeat from no rank of this store", true);
    Message reply;
    reply["ok"] = true;
    return reply;
  }
  if (op.Scalar() != "status") return std::nullopt;
  Message reply = status_reply();
  std::lock_guard lock(m_record_mutex);
  // A status must not wait for a load to end; what it reports is as of the command before.
  if (busy && !m_running.empty()) reply["busy"] = m_running;
  return reply;
}

Message ServerRank::stop() {
  m_loaded.clear();
  m_stopping = true;
  const auto acknowledged = detail::gather_strings(std::to_string(m_mpi.rank()), MPI_COMM_WORLD);
  Message reply;
  if (!is_root()) return reply;
  // Before the reply: once `ddstage stop` returns, the descriptor is gone.
  std::error_code ec;
  remove_descriptor_of(m_options.dir, m_store_id, ec);
  reply["ok"] = true;
  for (const auto& rank : acknowledged) reply["stopped"].push_back(std::stoi(rank));
  reply["unreachable"] = YAML::Node(YAML::NodeType::Sequence);
  return reply;
}

Message ServerRank::stop_request() {
  // The watch goes on: should a rank die during the stop's collectives, it still ends rank 0.
  // Three heartbeats missed: a collective would wait on that rank until the watchdog fired. A
  // rank that was only paused (SIGSTOP, a swapping node) beats again as soon as it runs: it
  // gets one more interval.
  const auto interval = detail::heartbeat_interval(m_peer_timeout);
  auto silent = m_peers->silent_for(3 * interval);
  for (const auto until = std::chrono::steady_clock::now() + interval;
       !silent.empty() && std::chrono::steady_clock::now() < until; silent = m_peers->silent_for(3 * interval)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (silent.empty()) {
    Message command;
    command["op"] = "stop";
    detail::bcast_string(YAML::Dump(command), MPI_COMM_WORLD);
    return execute(command);
  }
  m_loaded.clear();
  std::error_code ec;
  remove_descriptor_of(m_options.dir, m_store_id, ec);
  Message reply;
  reply["ok"] = true;
  reply["stopped"].push_back(0);
  const auto silence = m_peers->silence_seconds();
  for (int r : silent) {
    Message rank;
    rank["rank"] = r;
    rank["host"] = m_descriptor.ranks.at(static_cast<std::size_t>(r)).host;
    rank["last_heard"] = std::round(silence.at(static_cast<std::size_t>(r)) * 10) / 10;
    reply["unreachable"].push_back(rank);
    spdlog::warn("stop: rank {} on {} not heard for {:.1f} s: stopping this rank alone; it ends itself within "
                 "peer_timeout", r, rank["host"].as<std::string>(), silence.at(static_cast<std::size_t>(r)));
  }
  m_stopping = true;
  m_stopped_alone = true;
  return reply;
}

void ServerRank::lost(const std::string& why) {
  spdlog::error("{}: freeing this rank's memory and ending", why);
  m_exit.leave(1);
}

Message ServerRank::execute(const Message& command) {
  const auto op = command["op"].as<std::string>();
  Message reply;
  // record_memory() is collective: a rank-0-only failure (publish() on a full disk) must not
  // skip it, or rank 0's next broadcast meets the others still inside the gather.
  try {
    if (op == "load") {
      reply = load(command);
    } else if (op == "unload") {
      reply = unload(command);
    } else if (op == "stop") {
      reply = stop();
    } else if (op != "status") {
      reply = error_reply("unknown control operation '" + op + "'", ErrorKind::usage);
    }
  } catch (const Error& e) {
    reply = error_reply(e.what(), e.kind());
  }
  record_memory();
  return op == "status" && is_root() ? status_reply() : reply;
}

void ServerRank::publish() {
  m_exit.unless_leaving([this] { m_descriptor.write(m_options.dir); });
}

/// True when the store `old` describes can be replaced: its rank 0 ran on this host and is
/// proven gone. Only this host can tell; a descriptor without an id (an older ddstage) has no
/// lock to prove it by, so its rank 0's pid must be dead.
bool proven_gone(const StoreDescriptor& old) {
  const auto& rank0 = old.ranks.front();
  if (rank0.host != detail::host_name()) return false;
  if (old.id.empty()) return !detail::process_alive(rank0.pid);
  return detail::rank_gone_here(old.id, 0, rank0.pid);
}

/// Rank 0, when DIR/store.yaml exists: UsageError unless it names a store proven gone, whose
/// files on this node are then removed.
void replace_old_store(const fs::path& dir) {
  const auto path = StoreDescriptor::path_in(dir);
  StoreDescriptor old;
  try {
    old = StoreDescriptor::read(dir);
  } catch (const IndexError& e) {
    throw UsageError(fmt::format("{} is not a store descriptor this ddstage can read ({}), so nothing proves its "
                                 "store gone: if no store uses {} any more, remove it", path.string(),
                                 e.what(), dir.string()));
  }
  try {
    Message ping;
    ping["op"] = "status";
    detail::control_request(old.control, old.token, ping, std::chrono::seconds(2));
  } catch (const UsageError&) {
    // It answered, if only to refuse: it runs.
  } catch (const Error& e) {
    if (!proven_gone(old)) {
      const auto& host = old.ranks.front().host;
      throw UsageError(fmt::format("the store at {} does not answer (rank 0 on {}, control {}) but is not proven "
                                   "gone: run `ddstage stop --store {}` (or `ddstage clean --store {}` on {} once "
                                   "it has ended)", dir.string(), host, old.control, dir.string(), dir.string(),
                                   host));
    }
    spdlog::warn("replacing the stale store descriptor {} ({})", path.string(), e.what());
    clean_up_dead_store(dir, old);
    return;
  }
  throw UsageError(fmt::format("a store is already running at {} (control {}); stop it first with "
                               "`ddstage stop --store {}`", dir.string(), old.control, dir.string()));
}

/// Rank 0's checks before serving: no live store in DIR, the control socket binds.
std::string ServerRank::start_rank0() {
  StoreDescriptor::prepare_directory(m_options.dir);
  if (fs::exists(StoreDescriptor::path_in(m_options.dir))) replace_old_store(m_options.dir);
  m_descriptor.token = random_token();
  m_peers.emplace(m_mpi.size(), m_peer_timeout, [this](int rank, std::chrono::milliseconds silence) {
    lost(fmt::format("lost {} (no heartbeat for {:.0f} s)", rank_label(rank), silence.count() / 1000.0));
  });
  m_control.emplace(m_options.listen, m_descriptor.token,
                    [this](const Message& request, bool busy) { return front_desk(request, busy); });
  return random_token().substr(0, 12);
}

/// Normalises a request into a command every rank can execute without further checks: an
/// ill-formed request must fail on rank 0 alone, before it is broadcast.
Message make_command(const Message& request) {
  if (!request.IsMap() || !request["op"]) throw UsageError("control request without an op");
  Message command;
  const auto op = request["op"].as<std::string>();
  command["op"] = op;
  if (op == "load") {
    if (!request["index"]) throw UsageError("load request without an index");
    command["index"] = request["index"].as<std::string>();
    command["name"] = request["name"] ? request["name"].as<std::string>() : "";
    for (const char* flag : {"verify", "replace", "allow_stale"}) {
      command[flag] = request[flag] ? request[flag].as<bool>() : false;
    }
    command["mem_limit"] = request["mem_limit"] ? request["mem_limit"].as<uint64_t>() : 0;
    command["streams"] = request["streams"] ? request["streams"].as<unsigned>() : ShardLoadOptions{}.streams;
    check_load_streams(command["streams"].as<unsigned>());
    command["progress"] = request["progress"] ? request["progress"].as<bool>() : false;
  } else if (op == "unload") {
    if (!request["name"]) throw UsageError("unload request without a name");
    command["name"] = request["name"].as<std::string>();
  } else if (op != "status" && op != "stop") {
    throw UsageError("unknown control operation '" + op + "'");
  }
  return command;
}

void ServerRank::serve_rank0() {
  while (!m_stopping) {
    // The front desk checked the token; what comes here is from a holder of it.
    auto request = m_control->next(accept_poll);
    if (!request) continue;
    Message reply;
    try {
      const Message command = make_command(request->message);
      const auto op = command["op"].as<std::string>();
      {
        std::lock_guard lock(m_record_mutex);
        m_running = op;
      }
      m_client = &request->connection;
      if (op == "stop") {
        reply = stop_request();
      } else {
        detail::bcast_string(YAML::Dump(command), MPI_COMM_WORLD);
        reply = execute(command);
      }
    } catch (const Error& e) {
      reply = error_reply(e.what(), e.kind());
    } catch (const YAML::Exception& e) {
      reply = error_reply("malformed control request: " + e.msg, ErrorKind::usage);
    }
    m_client = nullptr;
    {
      std::lock_guard lock(m_record_mutex);
      m_running.clear();
    }
    m_control->done();
    try {
      request->connection.send(reply);
    } catch (const Error& e) {
      spdlog::warn("could not answer {}: {}", request->connection.peer(), e.what());
    }
    // Stopped alone: the ranks it could not reach are still in MPI_COMM_WORLD.
    if (m_stopped_alone) m_exit.leave(1);
  }
}

void ServerRank::serve_others() {
  while (!m_stopping) execute(YAML::Load(detail::bcast_string("", MPI_COMM_WORLD)));
}

std::string ServerRank::start_fabric(bool several_hosts) {
  const auto& transport = m_options.transport;
  const bool wanted = transport == "fabric" || (transport == "auto" && several_hosts);
#if DDSTAGE_HAVE_FABRIC
  std::string failure;
  if (wanted) {
    try {
      m_fabric.emplace(detail::FabricOptions::from(m_options.settings));
    } catch (const Error& e) {
      failure = encode_failure(e);
    }
  }
  if (const auto first = detail::first_failure(failure, MPI_COMM_WORLD)) {
    throw_failure(first->text, fmt::format("rank {} could not open its libfabric endpoint: ", first->rank));
  }
  if (!m_fabric) return "- -";
  const auto peer = m_fabric->peer();
  if (is_root()) spdlog::info("serving over libfabric too: provider {}", peer.provider);
  return peer.provider + " " + peer.address_hex;
#else
  if (transport == "fabric") throw UsageError("--transport fabric: this ddstage was built without libfabric");
  if (wanted && is_root()) {
    spdlog::warn("the store spans several hosts but this ddstage was built without libfabric: clients can read "
                 "only ranks on their own node");
  }
  return "- -";
#endif
}

/// The host part of "HOST:PORT" or "[IPV6]:PORT".
std::string host_of(const std::string& address) {
  if (address.starts_with('[')) return address.substr(1, address.find(']') - 1);
  return address.substr(0, address.rfind(':'));
}

void ServerRank::refuse_loopback(std::size_t host_count, const std::string& fabric_ip) {
  std::string failure;
  if (is_root()) {
    const auto& control = m_control->address();
    if (const auto lo = detail::loopback_address_of(host_of(control)); !lo.empty()) {
      failure = encode_failure(UsageError(fmt::format("rank 0's control address {} is loopback ({}) but the ranks "
                                                      "span {} hosts: pass --listen with an address the other "
                                                      "nodes reach", control, lo, host_count)));
    }
  }
  if (failure.empty() && !fabric_ip.empty() && !detail::loopback_address_of(fabric_ip).empty()) {
    failure = encode_failure(UsageError(fmt::format(
        "rank {} on {} publishes the libfabric address {} ({}), a loopback address, but the ranks span {} hosts: "
        "point FI_TCP_IFACE (FI_NET_IFACE, FI_UDP_IFACE for those providers) or the fabric.domain setting at an "
        "interface the other nodes reach",
        m_mpi.rank(), m_host, fabric_ip, m_fabric ? m_fabric->peer().provider : "", host_count)));
  }
  if (const auto first = detail::first_failure(failure, MPI_COMM_WORLD)) throw_failure(first->text);
}

Message ServerRank::start() {
  // Rank 0 decides whether to serve; every rank learns the outcome, the store id and where to
  // send its heartbeats.
  Message startup;
  if (is_root()) {
    try {
      m_store_id = start_rank0();
      startup["control"] = m_control->address();
      startup["token"] = m_descriptor.token;
    } catch (const Error& e) {
      startup["failure"] = encode_failure(e);
    }
    startup["id"] = m_store_id;
  }
  startup = YAML::Load(detail::bcast_string(is_root() ? YAML::Dump(startup) : "", MPI_COMM_WORLD));
  if (startup["failure"]) throw_failure(startup["failure"].as<std::string>());
  m_store_id = startup["id"].as<std::string>();
  // Before any segment exists: from here on, every way out frees what this rank holds.
  std::string failure;
  try {
    m_exit.claim(m_store_id, m_mpi.rank(), is_root() ? m_options.dir : fs::path());
  } catch (const Error& e) {
    failure = encode_failure(e);
  }
  if (const auto first = detail::first_failure(failure, MPI_COMM_WORLD)) {
    throw_failure(first->text, fmt::format("rank {}: ", first->rank));
  }
  return startup;
}

std::string ServerRank::start_transports(const std::string& hosts) {
  std::istringstream lines(hosts);
  std::set<std::string> distinct;
  for (std::string line; std::getline(lines, line);) distinct.insert(line);
  const auto fabric = start_fabric(distinct.size() > 1);
  if (distinct.size() > 1) {
#if DDSTAGE_HAVE_FABRIC
    refuse_loopback(distinct.size(), m_fabric ? m_fabric->ip_address() : "");
#else
    refuse_loopback(distinct.size(), "");
#endif
  }
  return fabric;
}

void ServerRank::describe(const std::vector<std::string>& infos) {
  m_descriptor.id = m_store_id;
  m_descriptor.control = m_control->address();
  m_descriptor.started = detail::utc_now();
  for (std::size_t r = 0; r < infos.size(); ++r) {
    std::istringstream in(infos[r]);
    RankInfo info{static_cast<int>(r)};
    in >> info.host >> info.pid >> info.memory_limit >> info.fabric_provider >> info.fabric_address;
    info.transports = {"local", "shm"};
    if (info.fabric_provider == "-") {
      info.fabric_provider.clear();
      info.fabric_address.clear();
    } else {
      info.transports.push_back("fabric");
    }
    m_descriptor.ranks.push_back(info);
  }
}

std::string ServerRank::rank_label(int rank) const {
  std::lock_guard lock(m_hosts_mutex);
  const auto r = static_cast<std::size_t>(rank);
  return r < m_hosts.size() ? fmt::format("rank {} on {}", rank, m_hosts[r]) : fmt::format("rank {}", rank);
}

void ServerRank::start_watching(const Message& startup) {
  if (is_root()) {
    m_peers->watch();
    return;
  }
  const auto control = startup["control"].as<std::string>();
  m_heartbeat.emplace(control, startup["token"].as<std::string>(), m_mpi.rank(), m_peer_timeout,
                      [this, control](std::chrono::milliseconds silence) {
                        lost(fmt::format("lost {} (control {}: no answer for {:.0f} s)", rank_label(0), control,
                                         silence.count() / 1000.0));
                      });
}

void ServerRank::run() {
  const Message startup = start();
  start_watching(startup);
  const auto hosts = detail::bcast_string(join_lines(detail::gather_strings(m_host, MPI_COMM_WORLD)), MPI_COMM_WORLD);
  {
    std::lock_guard lock(m_hosts_mutex);
    std::istringstream lines(hosts);
    for (std::string line; std::getline(lines, line);) m_hosts.push_back(line);
  }
  // Memory: an explicit limit, or 80% of what is available now, shared by this node's ranks.
  const auto on_node = std::max<std::size_t>(1, count_line(hosts, m_host));
  m_mem_limit = m_options.mem_limit ? m_options.mem_limit : detail::default_mem_limit(static_cast<int>(on_node));
  const auto fabric = start_transports(hosts);
  auto infos =
      detail::gather_strings(fmt::format("{} {} {} {}", m_host, ::getpid(), m_mem_limit, fabric), MPI_COMM_WORLD);
  record_memory();  // what a status answered during the first command reports
  // From here on an error has no caller to go to that could keep the ranks in step (MPI_Finalize
  // would wait for ranks still serving): the rank frees what it holds and ends.
  try {
    if (is_root()) {
      describe(infos);
      publish();
      spdlog::info("serving {} rank(s) at {} (control {})", m_mpi.size(), m_options.dir.string(),
                   m_descriptor.control);
      serve_rank0();
    } else {
      serve_others();
    }
  } catch (const std::exception& e) {
    lost(fmt::format("rank {} on {} cannot go on serving: {}", m_mpi.rank(), m_host, e.what()));
  }
}

}  // namespace

void run_store_server(const ServeOptions& options, int* argc, char*** argv) {
  detail::RankExit exit;
  // Before MPI_Init: the threads MPI starts inherit the blocked signals, so only the watch
  // takes them, whatever the main thread is blocked in.
  detail::SignalWatch signals([&exit](int sig) {
    spdlog::info("signal {} ({}): freeing this rank's memory and ending", sig, ::strsignal(sig));
    exit.leave(0);
  });
  detail::MpiSession mpi(argc, argv);
  ServerRank(options, mpi, exit).run();
}

}  // namespace ddstage
