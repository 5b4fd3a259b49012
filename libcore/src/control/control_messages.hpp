// Every control message, spelled once: the requests a client sends rank 0 (load, unload,
// status, stop, heartbeat), its replies, a load's interim progress and the failure reply. The
// client (store_control.cpp) and the server (server/) both go through these, never through keys.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "control_frame.hpp"
#include "ddstage/tool/store_control.hpp"
#include "error_record.hpp"

namespace ddstage::detail {

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
  bool lazy = false;       ///< stage each sample on first touch; the load returns at once
  bool prefetch = false;   ///< lazy: also fill the rest in the background

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.index, self.name, self.verify, self.replace, self.allow_stale, self.mem_limit,
      self.streams, self.progress, self.lazy, self.prefetch);
  }
};

/// A command every rank executes in the same order: op is "load", "unload", "status" or "stop".
struct ControlCommand {
  std::string op;
  LoadCommand load;     ///< op "load"
  std::string dataset;  ///< op "unload"

  template <class Self, class Fields>
  static void fields(Self& self, Fields& f) {
    f(self.op, self.load, self.dataset);
  }
};

Message load_request(const LoadCommand& load);
Message unload_request(const std::string& dataset);
Message status_request();
Message stop_request();
Message heartbeat_request(int rank);

/// A request as a command every rank can execute without further checks: UsageError for an
/// ill-formed one (no op, an unknown op, a load without an index, bad streams...), so that it
/// fails on rank 0 alone, before it is broadcast. Heartbeats are the front desk's, not commands.
ControlCommand command_of(const Message& request);

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
