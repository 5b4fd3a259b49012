// One rank of `ddstage serve`: its state and the command handlers. Every command runs on every
// rank, in the same order (rank 0 broadcasts it), so all ranks hold the same datasets. The
// members are defined by concern: start-up (server_start.cpp), transports
// (server_transports.cpp), store.yaml (server_descriptor.cpp), the control loop
// (server_loop.cpp), loads (server_load.cpp), status and stop (server_status.cpp).
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "control/control_messages.hpp"
#include "control/control_server.hpp"
#include "ddstage/config.hpp"
#include "ddstage/index.hpp"
#include "ddstage/store_descriptor.hpp"
#include "ddstage/tool/shard_plan.hpp"
#include "ddstage/tool/shm_segment.hpp"
#include "ddstage/tool/store_server.hpp"
#include "heartbeat.hpp"
#include "mpi/mpi_session.hpp"
#include "peer_watch.hpp"
#include "rank_exit.hpp"
#include "server/load_reporter.hpp"
#include "transport/transport_registry.hpp"
#if DDSTAGE_HAVE_FABRIC
#include "fabric/fabric_server.hpp"
#endif

namespace ddstage::detail {

/// This rank's part of one loaded dataset.
struct LoadedShard {
  RankExit::Tracked tracked;  // before segment: forgotten once the segment is unlinked
  std::filesystem::path index;
  ShardRange range;
  ShmSegment segment;
#if DDSTAGE_HAVE_FABRIC
  std::optional<FabricRegistration> fabric;  // after segment: deregistered before unmapping
#endif
};

/// What rank 0 tells every rank once it serves.
struct Startup {
  std::string id;       ///< the store id (in segment names)
  std::string control;  ///< where heartbeats go
  std::string token;

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.id, self.control, self.token);
  }
};

/// A rank's libfabric endpoint as store.yaml publishes it.
struct PublishedEndpoint {
  std::string provider;
  std::string address_hex;

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.provider, self.address_hex);
  }
};

/// What each rank tells rank 0 at start-up, for store.yaml.
struct RankStartup {
  std::string host;
  int64_t pid = 0;
  uint64_t memory_limit = 0;
  std::optional<PublishedEndpoint> fabric;

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.host, self.pid, self.memory_limit, self.fabric);
  }
};

/// A shard's libfabric registration as readers name it.
struct PublishedRegion {
  uint64_t key = 0;
  uint64_t base = 0;

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.key, self.base);
  }
};

/// What each rank tells rank 0 after a load, for store.yaml.
struct PublishedShard {
  uint64_t region_bytes = 0;
  std::string segment;
  std::optional<PublishedRegion> fabric;

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.region_bytes, self.segment, self.fabric);
  }
};

/// A load's first phase, on one rank: what it will load, checked before anything is allocated.
struct LoadPlan {
  Index index;
  std::string name;
  ShardRange range;
  uint64_t need = 0;  ///< bytes of this rank's shard
};

class ServerRank {
 public:
  /// transport: what serve --transport chose (nullopt: auto).
  ServerRank(const ServeOptions& options, std::optional<TransportId> transport,
             const MpiSession& mpi, RankExit& exit);

  /// Collective: starts, serves until stopped, returns. Ends the process (lost) when serving
  /// fails past start-up.
  void run();

 private:
  // Start-up.
  /// Collective: rank 0's checks and control socket, then every rank's lock; what rank 0 told
  /// every rank.
  Startup start();
  /// Rank 0: no live store in DIR, the control socket binds; the store id.
  std::string start_rank0();
  /// Right after start(): a rank lost during the other start-up collectives ends the store too.
  void start_watching(const Startup& startup);
  /// Collective: every rank's host into m_hosts, and this rank's memory limit.
  void learn_hosts();

  // Transports.
  /// Collective: the fabric endpoint when wanted, refused when it or the control address is
  /// loopback while the ranks span several hosts; the endpoint to publish.
  std::optional<PublishedEndpoint> start_transports();
  /// Collective: opens this rank's fabric endpoint when the transport and hosts ask for one.
  std::optional<PublishedEndpoint> start_fabric(bool several_hosts);
  /// Collective: UsageError on every rank when the ranks span hosts but an address rank 0 or a
  /// rank's fabric endpoint publishes reaches only its own host.
  void refuse_loopback(std::size_t host_count, const std::string& fabric_ip);

  // store.yaml (rank 0).
  void describe(const std::vector<RankStartup>& ranks);
  void publish();
  void publish_dataset(const LoadPlan& plan, const std::filesystem::path& index,
                       const std::vector<PublishedShard>& shards);

  // The control loop.
  void serve_rank0();
  void serve_others();
  /// Rank 0: one request from a client, answered.
  Message answer(const Message& request, ControlConnection& client);
  Message execute(const ControlCommand& command);
  /// Rank 0's front desk: heartbeats and status requests are answered at once, idle or busy (a
  /// status from the last record); the rest wait their turn.
  std::optional<Message> front_desk(const Message& request, bool busy);

  // Loads.
  Message load(const LoadCommand& args);
  /// Phase 1 on this rank: opens the index, checks it and that the shard fits.
  LoadPlan plan_load(const LoadCommand& args, LoadReporter* reporter) const;
  /// This rank's registration of a loaded shard, when the ranks serve over libfabric.
  std::optional<PublishedRegion> register_fabric(LoadedShard& shard);
  Message unload(const std::string& name);

  // Status and stop.
  /// Collective, after every command: each rank's bytes held, for status replies.
  void record_memory();
  /// {ok, memory_used, last_heard} as of the last command that finished.
  StatusReply status() const;
  Message stop();
  /// Rank 0, for a stop request: stops every rank when all were heard lately; otherwise frees
  /// this rank alone, and the reply names the ranks it could not reach (they end themselves
  /// within peer_timeout).
  Message stop_request();

  // Common.
  /// Collective: returns when no rank failed; otherwise throws on every rank the lowest failing
  /// rank's error, of its class, its message after prefix(rank).
  void agree(const std::exception_ptr& failure,
             const std::function<std::string(int rank)>& prefix) const;
  /// agree() for a command's steps: "rank R on HOST: " before the message when there are
  /// several ranks.
  void agree_on_command(const std::exception_ptr& failure) const;
  /// Logs why, then frees this rank's memory and ends the process with exit code 1.
  [[noreturn]] void lost(const std::string& why);
  /// "rank R on HOST" once the ranks' hosts are gathered, "rank R" before: for the watch threads.
  std::string rank_label(int rank) const;
  bool is_root() const { return m_mpi.rank() == 0; }
  MPI_Comm comm() const { return m_mpi.comm(); }

  ServeOptions m_options;
  std::optional<TransportId> m_transport;
  const MpiSession& m_mpi;
  RankExit& m_exit;
  std::chrono::milliseconds m_peer_timeout;
  std::string m_host;
  mutable std::mutex m_hosts_mutex;  ///< guards m_hosts: the watch threads read it
  std::vector<std::string> m_hosts;  ///< each rank's host, once gathered
  uint64_t m_mem_limit = 0;
#if DDSTAGE_HAVE_FABRIC
  std::optional<FabricServer> m_fabric;  // before m_loaded: outlives every registration
#endif
  std::map<std::string, LoadedShard> m_loaded;
  uint64_t m_generation = 0;
  std::string m_store_id;  ///< in segment names (StoreDescriptor::id)
  // Rank 0 only.
  mutable std::mutex m_record_mutex;  ///< guards the two below: the front desk reads them
  std::vector<uint64_t> m_memory_used;
  std::string m_running;             ///< op of the command running, empty between commands
  std::optional<PeerWatch> m_peers;  ///< set before m_control, whose thread records heartbeats
  std::optional<ControlServer> m_control;  // after what its thread reads: stops first
  ControlConnection* m_client = nullptr;   ///< whose request execute() is running
  StoreDescriptor m_descriptor;
  bool m_stopping = false;
  bool m_stopped_alone = false;  ///< rank 0 stopped without the ranks it could not reach
  // Other ranks only.
  std::optional<Heartbeat> m_heartbeat;
};

}  // namespace ddstage::detail
