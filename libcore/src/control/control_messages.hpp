// Every control message, spelled once: the requests a client sends rank 0 (load, repair,
// unload, status, stop, heartbeat), its replies, a load's interim progress, the failure reply,
// and the parts rank 0 sends each rank once the store serves. The client (store_control.cpp) and
// the server (server/) both go through these, never through keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "control_frame.hpp"
#include "ddstage/tool/store_control.hpp"
#include "error_record.hpp"

namespace ddstage::detail {

/// The keys the store's own messages and the stage messages (stage_messages.hpp) share: a
/// request's operation, and the dataset it names.
inline constexpr const char* key_op = "op";
inline constexpr const char* key_name = "name";

/// A load as the ranks execute it: every option explicit (a request leaves out what it does not
/// change; the server fills in its defaults).
struct LoadCommand {
  std::string index;  ///< absolute path of DATASET.ddx
  std::string name;   ///< empty: the index's dataset name
  bool verify = false;
  bool replace = false;
  bool allow_stale = false;
  uint64_t mem_limit = 0;  ///< 0: the server's
  unsigned streams = 0;    ///< 0: the default (ShardLoadOptions)
  bool progress = false;   ///< send interim progress messages
  /// Copies to keep: 1 or more, or replicas_per_node (0) for one per node.
  int replicas = 1;
  bool lazy = false;      ///< stage each sample on first touch; the load returns at once
  bool prefetch = false;  ///< lazy: also fill the rest in the background

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.index, self.name, self.verify, self.replace, self.allow_stale, self.mem_limit,
      self.streams, self.progress, self.replicas, self.lazy, self.prefetch);
  }
};

/// A request rank 0 executes: op is "load", "repair", "unload", "status" or "stop".
struct ControlCommand {
  std::string op;
  LoadCommand load;     ///< op "load"; for "repair", its options (verify, allow_stale, ...)
  std::string dataset;  ///< op "unload"; op "repair": empty for every degraded dataset

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.op, self.load, self.dataset);
  }
};

/// Samples [first, last) of a dataset, one region on one rank.
struct RegionSpan {
  uint64_t first = 0;
  uint64_t last = 0;

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.first, self.last);
  }
};

/// A rank's share of a command, sent by rank 0 to that rank's own control socket. op: "check"
/// (open the index, check it and that the new regions fit), "fill" (load them, held pending),
/// "commit" (serve them), "abort" (drop them), "unload", "stop".
struct PartCommand {
  std::string op;
  LoadCommand load;                 ///< check, fill
  std::string dataset;              ///< the dataset's name in the store
  std::vector<RegionSpan> regions;  ///< check, fill: this rank's new regions
  bool add = false;  ///< a repair's regions: the dataset's regions held now stay beside them
  uint64_t fingerprint = 0;  ///< check, fill: Index::fingerprint() of the index as rank 0 saw it

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.op, self.load, self.dataset, self.regions, self.add, self.fingerprint);
  }
};

/// A region's libfabric registration as readers name it.
struct PublishedFabric {
  uint64_t key = 0;
  uint64_t base = 0;

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.key, self.base);
  }
};

/// A filled region as store.yaml publishes it.
struct PublishedRegion {
  RegionSpan span;
  uint64_t bytes = 0;
  std::string segment;
  std::string tier;  ///< "memory" or the tier's kind ("nvme")
  std::optional<PublishedFabric> fabric;
  bool lazy = false;  ///< staged on first touch (load --lazy)

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.span, self.bytes, self.segment, self.tier, self.fabric, self.lazy);
  }
};

/// A rank's answer to a part: the bytes it holds now, and (fill) its new regions.
struct PartReply {
  uint64_t memory_used = 0;
  std::vector<PublishedRegion> regions;

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.memory_used, self.regions);
  }
};

Message load_request(const LoadCommand& load);
/// Restores the asked copies of `dataset` (empty: of every dataset short of copies) from origin.
Message repair_request(const LoadCommand& options, const std::string& dataset);
Message unload_request(const std::string& dataset);
Message status_request();
Message stop_request();
Message heartbeat_request(int rank);

/// A request as a command every rank can execute without further checks: UsageError for an
/// ill-formed one (no op, an unknown op, a load without an index, bad streams...), so that it
/// fails on rank 0 alone, before it is broadcast. Heartbeats are the front desk's, not commands.
ControlCommand command_of(const Message& request);

Message part_request(const PartCommand& part);
/// UsageError when the request is not a well-formed part (a client's request sent to a rank's
/// own socket, say).
PartCommand part_command_of(const Message& request);
Message part_reply(const PartReply& reply);
/// Error when the reply carries no well-formed part reply.
PartReply part_reply_of(const Message& reply);

/// The front desk's look at an unchecked request: its op when it has a scalar one.
std::optional<std::string> op_of(const Message& request);
/// The rank a heartbeat names; -1 when it names none.
int heartbeat_rank(const Message& request);

/// {ok: true}: a request done, with nothing to report.
Message ok_reply();
/// {ok: false, error, kind: usage|runtime, class, errno}: the receiver raises the same class.
/// kind is for clients older than class.
Message error_reply(const ErrorRecord& error);
/// A reply's outcome: nullopt when ok, else the error it carries.
std::optional<ErrorRecord> failure_of(const Message& reply);

Message load_reply(const LoadResult& result);
LoadResult load_result_of(const Message& reply);
Message repair_reply(const std::vector<LoadResult>& repaired);
std::vector<LoadResult> repair_results_of(const Message& reply);
/// A load's interim message, sent before its reply.
Message progress_message(const LoadProgress& progress);
/// Whether a message is an interim one (progress) rather than the reply.
bool is_interim(const Message& message);
LoadProgress progress_of(const Message& interim);

/// What rank 0 says of its ranks as of the last command.
struct StatusReply {
  std::vector<uint64_t> memory_used;  ///< by rank
  std::vector<double> last_heard;     ///< by rank, seconds; empty from a one-rank store
  std::string busy;                   ///< op of the command running; empty when idle
};
Message status_reply(const StatusReply& status);
/// Lenient: a reply of an older or newer server yields what it holds.
StatusReply status_of(const Message& reply);

Message stop_reply(const StopResult& result);
/// Lenient; a server from before the rank lists answered {ok: true} alone, having stopped every
/// rank of `all_ranks`.
StopResult stop_result_of(const Message& reply, const std::vector<int>& all_ranks);

}  // namespace ddstage::detail
