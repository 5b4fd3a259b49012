// One rank of `ddstage serve`: its state and the command handlers. MPI starts the store and is
// finalised once every rank serves; from then on each rank answers rank 0 on a control socket
// of its own, and rank 0 sends each command's part to every live rank over TCP, so that a rank's
// loss costs its regions and nothing else. The members are defined by concern: start-up
// (server_start.cpp), transports (server_transports.cpp), store.yaml (server_descriptor.cpp),
// the control loops (server_loop.cpp), rank 0's fan-out of parts (server_parts.cpp), loads and
// repairs (server_load.cpp), status and stop (server_status.cpp).
#pragma once

#include <atomic>
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
#include "control/stage_workers.hpp"
#include "ddstage/config.hpp"
#include "ddstage/index.hpp"
#include "ddstage/store_descriptor.hpp"
#include "ddstage/tool/placement.hpp"
#include "ddstage/tool/shard_plan.hpp"
#include "ddstage/tool/shm_segment.hpp"
#include "ddstage/tool/store_server.hpp"
#include "ddstage/tool/tier_set.hpp"
#include "heartbeat.hpp"
#include "mpi/mpi_session.hpp"
#include "peer_watch.hpp"
#include "rank_exit.hpp"
#include "server/launcher_watch.hpp"
#include "server/lazy_regions.hpp"
#include "server/load_reporter.hpp"
#include "transport/transport_registry.hpp"
#if DDSTAGE_HAVE_FABRIC
#include "fabric/fabric_server.hpp"
#endif

namespace ddstage::detail {

/// One region of a dataset on this rank: in `segment`, or, staged on first touch (load
/// --lazy), in the segment `lazy` shares with the stage requests filling it.
struct LoadedShard {
  RankExit::Tracked tracked;  // before segment: forgotten once the segment is unlinked
  ShardRange range;
  TierSet::Reservation reservation;  // before segment: its bytes count until it is gone
  ShmSegment segment;
  LazyRegions::Entry lazy;
#if DDSTAGE_HAVE_FABRIC
  std::optional<FabricRegistration> fabric;  // last: deregistered before the memory goes
#endif

  std::span<const std::byte> bytes() const noexcept {
    return lazy ? lazy.bytes() : segment.bytes();
  }
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
  std::string control;             ///< the rank's own control socket (rank 0's is the store's)
  std::vector<std::string> tiers;  ///< TierSet::names()

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.host, self.pid, self.memory_limit, self.fabric, self.control, self.tiers);
  }
};

/// What one rank answered to its part of a command (see ServerRank::on_ranks).
struct PartsOutcome {
  std::map<int, PartReply> replies;  ///< the ranks that did their part
  /// The lowest rank that failed (an error reply, or lost on the way) and its error.
  std::optional<std::pair<int, ErrorRecord>> failure;
};

class ServerRank {
 public:
  /// transport: what serve --transport chose (nullopt: auto).
  ServerRank(const ServeOptions& options, std::optional<TransportId> transport, MpiSession& mpi,
             RankExit& exit);

  /// Collective until every rank serves (MPI is finalised then), then serves until stopped and
  /// returns. Ends the process (lost) when serving fails past start-up.
  void run();

 private:
  // Start-up.
  /// Collective: rank 0's checks and control socket, then every rank's lock; what rank 0 told
  /// every rank.
  Startup start();
  /// Rank 0: no live store in DIR, the control socket binds; the store id.
  std::string start_rank0();
  /// Once rank 0's control address is known to reach every host: a rank lost during the other
  /// start-up collectives ends the store too.
  void start_watching(const Startup& startup);
  /// Collective: every rank's host into m_hosts, and this rank's memory limit.
  void learn_hosts();
  /// Collective: this rank's tiers (serve --tier) and, on the other ranks, their own control
  /// sockets, for rank 0's parts.
  void prepare_serving(const Startup& startup);

  // Transports.
  /// Collective: the fabric endpoint when wanted, refused when it or a control address is
  /// loopback while the ranks span several hosts; the endpoint to publish.
  std::optional<PublishedEndpoint> start_transports();
  /// Collective: opens this rank's fabric endpoint when the transport and hosts ask for one.
  std::optional<PublishedEndpoint> start_fabric(bool several_hosts);
  /// Collective once learn_hosts ran: UsageError on every rank when the ranks span hosts but an
  /// address a rank publishes (`control`, its control socket; `fabric_ip`, its fabric endpoint;
  /// empty: not checked here) reaches only its own host.
  void refuse_loopback(const std::string& control, const std::string& fabric_ip);

  // store.yaml (rank 0; m_descriptor_mutex guards it: the watch thread marks ranks lost).
  void describe(const std::vector<RankStartup>& ranks);
  /// Writes store.yaml; the caller holds m_descriptor_mutex.
  void publish_locked();
  /// Replaces (or adds) a dataset in store.yaml.
  void publish_dataset(StoreDataset dataset);
  /// Marks a rank lost in store.yaml at once (readers skip it), once; logs why.
  void mark_lost(int rank, const std::string& why);
  /// Each rank's host, "" for the lost ones: what the placement planners take.
  std::vector<std::string> live_hosts() const;

  // The control loops.
  void serve_rank0();
  void serve_others();
  /// Rank 0: one request from a client, answered.
  Message answer(const Message& request, ControlConnection& client);
  Message execute(const ControlCommand& command);
  /// Rank 0's front desk: heartbeats and status requests are answered at once, idle or busy (a
  /// status from the last record); the rest wait their turn.
  std::optional<Message> front_desk(const Message& request, bool busy);
  /// Starts this rank's stage workers; the hook that hands them its control socket's stage
  /// requests.
  ControlServer::Divert stage_divert();

  // Parts: rank 0 sends, every rank executes.
  /// This rank's part of a command. progress(done, total) follows a check or a fill.
  PartReply part(const PartCommand& command,
                 const std::function<void(uint64_t done, uint64_t total)>& progress);
  /// part() as a reply: an error reply when it throws.
  Message guarded_part(const PartCommand& command,
                       const std::function<void(uint64_t done, uint64_t total)>& progress);
  /// Rank 0: sends every rank in `parts` its part at once (rank 0's own runs on this thread)
  /// and waits for every answer, each bounded by timeout between messages. A rank that does
  /// not answer is marked lost. progress(rank, fraction) follows checks and fills.
  PartsOutcome on_ranks(const std::map<int, PartCommand>& parts, std::chrono::milliseconds timeout,
                        const std::function<void(int rank, double fraction)>& progress = {});
  /// Throws outcome.failure, "rank R on HOST: " before its message when there are several ranks.
  void raise_failure(const PartsOutcome& outcome) const;

  // Loads and repairs.
  Message load(const LoadCommand& args);
  Message repair(const ControlCommand& command);
  /// Rank 0: checks, fills and commits `placed` (regions of dataset `name`) on their ranks, all
  /// or none; with add false, every live rank drops what it held of `name` at the commit. The
  /// regions as store.yaml lists them.
  std::vector<StoreRegion> stage(const std::string& name, const LoadCommand& args,
                                 uint64_t fingerprint, const std::vector<PlacedRange>& placed,
                                 bool add, LoadReporter& reporter);
  /// Rank 0: the dataset of that name in store.yaml, if any.
  std::optional<StoreDataset> dataset_named(const std::string& name) const;
  /// A part's check on this rank: opens the index, checks it and that the regions fit.
  void check_regions(const PartCommand& command);
  /// A part's fill on this rank: the regions loaded and registered, held pending.
  std::vector<PublishedRegion> fill_regions(
      const PartCommand& command,
      const std::function<void(uint64_t done, uint64_t total)>& progress);
  /// Where fill_regions puts each new region: on the first tier with room, a region of the
  /// dataset it replaces counting as free (the k-th new one takes the k-th old one's place).
  /// name_new: names the fill's regions (a check's trial takes no new names).
  std::vector<TierSet::Reservation> reserve(const PartCommand& command, const Index& index,
                                            bool name_new);
  /// A region's segment name: "ddstage-ID-DATASET-gGENERATION-RANDOM-rRANK". The random part
  /// (48 bits, new each time) keeps another local user from creating the next name first in
  /// /dev/shm, which made the load fail (issue 28); the descriptor records the name.
  std::string segment_base(const std::string& dataset, uint64_t generation) const;
  /// Creates the reservation's segment, tracked from before it exists; a name taken all the
  /// same (EEXIST) gets a fresh random part, a few times over.
  std::pair<RankExit::Tracked, ShmSegment> create_segment(TierSet::Reservation& reservation,
                                                          const std::string& dataset,
                                                          uint64_t bytes);
  /// This rank's registration of a loaded region, when the ranks serve over libfabric.
  std::optional<PublishedFabric> register_fabric(LoadedShard& shard);
  Message unload(const std::string& name);

  // Status and stop.
  /// {ok, memory_used, last_heard} as of the last command that finished.
  StatusReply status() const;
  /// Rank 0, for a stop request: stops every live rank it reaches, then itself; the reply
  /// names the ranks it could not reach (lost, or not answering: they end themselves within
  /// peer_timeout).
  Message stop_request();
  /// Bytes of every region this rank holds.
  uint64_t memory_used() const;

  // Common.
  /// Collective (start-up only): returns when no rank failed; otherwise throws on every rank
  /// the lowest failing rank's error, of its class, its message after prefix(rank).
  void agree(const std::exception_ptr& failure,
             const std::function<std::string(int rank)>& prefix) const;
  /// Logs why, then frees this rank's memory and ends the process with exit code 1.
  [[noreturn]] void lost(const std::string& why);
  /// "rank R on HOST" once the ranks' hosts are gathered, "rank R" before: for the watch threads.
  std::string rank_label(int rank) const;
  bool is_root() const { return m_mpi.rank() == 0; }
  MPI_Comm comm() const { return m_mpi.comm(); }

  ServeOptions m_options;
  std::optional<TransportId> m_transport;
  MpiSession& m_mpi;
  RankExit& m_exit;
  std::chrono::milliseconds m_peer_timeout;
  std::string m_host;
  mutable std::mutex m_hosts_mutex;  ///< guards m_hosts: the watch threads read it
  std::vector<std::string> m_hosts;  ///< each rank's host, once gathered
  uint64_t m_mem_limit = 0;
  std::string m_token;
#if DDSTAGE_HAVE_FABRIC
  std::optional<FabricServer> m_fabric;  // before the shards: outlives every registration
#endif
  /// Where this rank's regions may live; written down on its node for `clean` (the record is
  /// tracked like a segment, so that this rank's way out removes it).
  std::optional<TierSet> m_tiers;  // before the shards: outlives every reservation
  RankExit::Tracked m_tier_record_name;
  TierRecord m_tier_record;
  LazyRegions m_lazy;  // before the shards, whose entries list themselves here
  /// By dataset name, the regions served, and those filled but not committed yet.
  std::map<std::string, std::vector<LoadedShard>> m_loaded;
  std::map<std::string, std::vector<LoadedShard>> m_pending;
  uint64_t m_generation = 0;
  std::string m_store_id;  ///< in segment names (StoreDescriptor::id)
  /// Set once MPI is finalised: a rank lost from then on is marked lost, not the store's end.
  std::atomic<bool> m_serving{false};
  bool m_stopping = false;
  // Rank 0 only.
  mutable std::mutex m_record_mutex;  ///< guards the two below: the front desk reads them
  std::vector<uint64_t> m_memory_used;
  std::string m_running;                  ///< op of the command running, empty between commands
  mutable std::mutex m_descriptor_mutex;  ///< guards m_descriptor
  StoreDescriptor m_descriptor;
  std::optional<PeerWatch> m_peers;       ///< set before m_control, whose thread records heartbeats
  ControlConnection* m_client = nullptr;  ///< whose request execute() is running
  bool m_stopped_alone = false;           ///< rank 0 stopped without ranks it could not reach
  // Other ranks only.
  std::optional<Heartbeat> m_heartbeat;
  /// Set once MPI is finalised, in a job of several ranks (a store of one is often started
  /// without a launcher, by a shell that may end before it).
  std::optional<LauncherWatch> m_launcher;
  /// Every rank: answers readers' stage requests for its lazy regions, off the control thread.
  /// After the shards: in-flight requests end before any region goes.
  std::optional<StageWorkers> m_stage_workers;
  // Every rank: rank 0's takes clients and heartbeats, the others' take rank 0's parts; both
  // hand stage requests to m_stage_workers.
  std::optional<ControlServer> m_control;  // after what its thread reads: stops first
};

}  // namespace ddstage::detail
