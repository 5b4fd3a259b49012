#include "control_messages.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "ddstage/error.hpp"
#include "ddstage/tool/shard_loader.hpp"
#include "mpi/wire_bytes.hpp"

namespace ddstage::detail {
namespace {

// The keys, each written here once.
constexpr const char* key_ok = "ok";
constexpr const char* key_error = "error";
constexpr const char* key_kind = "kind";
constexpr const char* key_class = "class";
constexpr const char* key_errno = "errno";
constexpr const char* key_index = "index";
constexpr const char* key_verify = "verify";
constexpr const char* key_replace = "replace";
constexpr const char* key_allow_stale = "allow_stale";
constexpr const char* key_mem_limit = "mem_limit";
constexpr const char* key_streams = "streams";
constexpr const char* key_progress = "progress";  ///< a load request's wish; an interim's bytes
constexpr const char* key_lazy = "lazy";
constexpr const char* key_prefetch = "prefetch";
constexpr const char* key_total = "total";
constexpr const char* key_samples = "samples";
constexpr const char* key_bytes = "bytes";
constexpr const char* key_seconds = "seconds";
constexpr const char* key_verified = "verified";
constexpr const char* key_rank = "rank";
constexpr const char* key_host = "host";
constexpr const char* key_memory_used = "memory_used";
constexpr const char* key_last_heard = "last_heard";
constexpr const char* key_busy = "busy";
constexpr const char* key_stopped = "stopped";
constexpr const char* key_unreachable = "unreachable";
constexpr const char* key_replicas = "replicas";
constexpr const char* key_warning = "warning";
constexpr const char* key_repaired = "repaired";
constexpr const char* key_part = "part";

Message request(const char* op) {
  Message m;
  m[key_op] = op;
  return m;
}

/// map[key] into out when it is there and converts; out is left as it was otherwise.
template <class T>
void scalar(const Message& map, const char* key, T& out) {
  const auto node = map[key];
  if (node && node.IsScalar()) YAML::convert<T>::decode(node, out);
}

/// A list of T from a reply of a newer or older server: empty when absent. A malformed item
/// becomes `placeholder` where positions mean ranks (so that it never shifts the next rank's
/// value into its place), and is skipped without one.
template <class T>
std::vector<T> list_of(const Message& node, std::optional<T> placeholder = std::nullopt) {
  std::vector<T> out;
  if (!node || !node.IsSequence()) return out;
  for (const auto& item : node) {
    T v{};
    if (item.IsScalar() && YAML::convert<T>::decode(item, v)) {
      out.push_back(v);
    } else if (placeholder) {
      out.push_back(*placeholder);
    }
  }
  return out;
}

/// A request's field: a UsageError for the client when it is missing or not a T.
template <class T>
T request_field(const Message& request, const char* key, const char* what) {
  if (auto v = converted<T>(request, key)) return *v;
  throw UsageError(fmt::format("{} without a valid '{}'", what, key));
}

/// A reply's field: the store's reply is unusable when it is missing or not a T.
template <class T>
T reply_field(const Message& reply, const char* key) {
  if (auto v = converted<T>(reply, key)) return *v;
  throw Error(ErrorKind::runtime, fmt::format("the store's reply has no valid '{}'", key));
}

/// request[key] as T, or fallback when the request leaves it out.
template <class T>
T optional_field(const Message& request, const char* key, T fallback) {
  return request[key] ? request_field<T>(request, key, "load request") : fallback;
}

LoadCommand load_command_of(const Message& request) {
  if (!request[key_index]) throw UsageError("load request without an index");
  LoadCommand load{.index = request_field<std::string>(request, key_index, "load request"),
                   .name = optional_field<std::string>(request, key_name, ""),
                   .verify = optional_field(request, key_verify, false),
                   .replace = optional_field(request, key_replace, false),
                   .allow_stale = optional_field(request, key_allow_stale, false),
                   .mem_limit = optional_field<uint64_t>(request, key_mem_limit, 0),
                   .streams = optional_field(request, key_streams, ShardLoadOptions{}.streams),
                   .progress = optional_field(request, key_progress, false),
                   .replicas = optional_field(request, key_replicas, 1),
                   .lazy = optional_field(request, key_lazy, false),
                   .prefetch = optional_field(request, key_prefetch, false)};
  check_load_streams(load.streams);
  if (load.replicas < 0)
    throw UsageError(fmt::format("load request with {} replicas", load.replicas));
  return load;
}

/// The wire struct a part message carries under key_part.
template <class T>
T part_of(const Message& message) {
  // YAML's binary scalar (base64): a peer's bytes, so decoded without YAML's exception, and
  // only once every character is base64's: yaml-cpp 0.7's decoder indexes its table with a
  // signed char, so a byte above 127 reads outside it (found by fuzz_control_frame).
  const auto text = converted<std::string>(message, key_part);
  const auto is_base64 = [](unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '+' ||
           c == '/' || c == '=' || c == '\n' || c == ' ';
  };
  if (!text || !std::all_of(text->begin(), text->end(), is_base64))
    throw Error(ErrorKind::runtime, "a part message without a valid 'part'");
  const auto bytes = converted<YAML::Binary>(message, key_part);
  if (!bytes || bytes->size() == 0)
    throw Error(ErrorKind::runtime, "a part message without a valid 'part'");
  return from_wire<T>(
      std::string_view(reinterpret_cast<const char*>(bytes->data()), bytes->size()));
}

/// A wire struct as YAML's binary scalar.
template <class T>
YAML::Binary binary_of(const T& value) {
  const std::string bytes = to_wire(value);
  YAML::Binary out;
  std::vector<unsigned char> owned(bytes.begin(), bytes.end());
  out.swap(owned);
  return out;
}

}  // namespace

Message load_request(const LoadCommand& load) {
  Message m = request("load");
  m[key_index] = load.index;
  m[key_name] = load.name;
  m[key_verify] = load.verify;
  m[key_replace] = load.replace;
  m[key_allow_stale] = load.allow_stale;
  m[key_mem_limit] = load.mem_limit;
  if (load.streams) m[key_streams] = load.streams;
  m[key_progress] = load.progress;
  m[key_replicas] = load.replicas;
  // Only when asked: a full load's request stays what servers before lazy loads know.
  if (load.lazy) m[key_lazy] = true;
  if (load.prefetch) m[key_prefetch] = true;
  return m;
}

Message repair_request(const LoadCommand& options, const std::string& dataset) {
  Message m = load_request(options);
  m[key_op] = "repair";
  m[key_name] = dataset;
  return m;
}

Message part_request(const PartCommand& part) {
  Message m = request("part");
  m[key_part] = binary_of(part);
  return m;
}

PartCommand part_command_of(const Message& request) {
  if (op_of(request) != "part") throw UsageError("a rank's own socket takes only rank 0's parts");
  try {
    return part_of<PartCommand>(request);
  } catch (const Error& e) {
    throw UsageError(e.message());
  }
}

Message part_reply(const PartReply& reply) {
  Message m = ok_reply();
  m[key_part] = binary_of(reply);
  return m;
}

PartReply part_reply_of(const Message& reply) {
  return part_of<PartReply>(reply);
}

Message unload_request(const std::string& dataset) {
  Message m = request("unload");
  m[key_name] = dataset;
  return m;
}

Message status_request() {
  return request("status");
}

Message stop_request() {
  return request("stop");
}

Message heartbeat_request(int rank) {
  Message m = request("heartbeat");
  m[key_rank] = rank;
  return m;
}

ControlCommand command_of(const Message& request) {
  if (!request.IsMap() || !request[key_op]) throw UsageError("control request without an op");
  ControlCommand command{.op = request_field<std::string>(request, key_op, "control request")};
  if (command.op == "load") {
    command.load = load_command_of(request);
  } else if (command.op == "repair") {
    Message options = YAML::Clone(request);
    options[key_index] = "";  // a repair loads from the indexes the store loaded
    command.load = load_command_of(options);
    command.dataset = optional_field<std::string>(request, key_name, "");
  } else if (command.op == "unload") {
    if (!request[key_name]) throw UsageError("unload request without a name");
    command.dataset = request_field<std::string>(request, key_name, "unload request");
  } else if (command.op != "status" && command.op != "stop") {
    throw UsageError("unknown control operation '" + command.op + "'");
  }
  return command;
}

std::optional<std::string> op_of(const Message& request) {
  const auto op = request[key_op];
  if (!op || !op.IsScalar()) return std::nullopt;
  return op.Scalar();
}

int heartbeat_rank(const Message& request) {
  int rank = -1;
  scalar(request, key_rank, rank);
  return rank;
}

Message ok_reply() {
  Message reply;
  reply[key_ok] = true;
  return reply;
}

Message error_reply(const ErrorRecord& error) {
  Message reply;
  reply[key_ok] = false;
  reply[key_error] = error.text;
  reply[key_kind] = error.kind == ErrorKind::usage ? "usage" : "runtime";
  reply[key_class] = std::string(class_name(error.type));
  if (error.type == ErrorClass::io) reply[key_errno] = error.native_code;
  return reply;
}

std::optional<ErrorRecord> failure_of(const Message& reply) {
  bool ok = false;
  scalar(reply, key_ok, ok);
  if (ok) return std::nullopt;
  ErrorRecord error{.text = "the store refused the request"};
  std::string kind, type;
  scalar(reply, key_error, error.text);
  scalar(reply, key_kind, kind);
  scalar(reply, key_class, type);
  scalar(reply, key_errno, error.native_code);
  error.kind = kind == "usage" ? ErrorKind::usage : ErrorKind::runtime;
  error.type = class_named(type);
  // An IoError's kind follows its errno: without one, keep the kind the reply states.
  if (error.type == ErrorClass::io && error.native_code == 0) error.type = ErrorClass::error;
  return error;
}

Message load_reply(const LoadResult& result) {
  Message reply = ok_reply();
  reply[key_name] = result.name;
  reply[key_samples] = result.samples;
  reply[key_bytes] = result.bytes;
  reply[key_seconds] = result.seconds;
  reply[key_verified] = result.verified;
  if (!result.warning.empty()) reply[key_warning] = result.warning;
  return reply;
}

LoadResult load_result_of(const Message& reply) {
  LoadResult result{
      reply_field<std::string>(reply, key_name), reply_field<uint64_t>(reply, key_samples),
      reply_field<uint64_t>(reply, key_bytes), reply_field<double>(reply, key_seconds),
      reply_field<bool>(reply, key_verified)};
  scalar(reply, key_warning, result.warning);
  return result;
}

Message repair_reply(const std::vector<LoadResult>& repaired) {
  Message reply = ok_reply();
  reply[key_repaired] = YAML::Node(YAML::NodeType::Sequence);
  for (const auto& r : repaired) reply[key_repaired].push_back(load_reply(r));
  return reply;
}

std::vector<LoadResult> repair_results_of(const Message& reply) {
  std::vector<LoadResult> out;
  const auto list = reply[key_repaired];
  if (!list || !list.IsSequence())
    throw Error(ErrorKind::runtime, "the store's reply has no valid 'repaired'");
  for (const auto& item : list) out.push_back(load_result_of(item));
  return out;
}

Message progress_message(const LoadProgress& progress) {
  Message m;
  m[key_progress] = progress.bytes_done;
  m[key_total] = progress.bytes_total;
  m[key_samples] = progress.samples_total;
  return m;
}

bool is_interim(const Message& message) {
  return static_cast<bool>(message[key_progress]);
}

LoadProgress progress_of(const Message& interim) {
  return {reply_field<uint64_t>(interim, key_progress), reply_field<uint64_t>(interim, key_total),
          reply_field<uint64_t>(interim, key_samples)};
}

Message status_reply(const StatusReply& status) {
  Message reply = ok_reply();
  for (auto s : status.last_heard) reply[key_last_heard].push_back(s);
  for (auto u : status.memory_used) reply[key_memory_used].push_back(u);
  if (!status.busy.empty()) reply[key_busy] = status.busy;
  return reply;
}

StatusReply status_of(const Message& reply) {
  // The placeholders are RankStatus's "not reported".
  StatusReply status{list_of<uint64_t>(reply[key_memory_used], 0),
                     list_of<double>(reply[key_last_heard], -1.0)};
  scalar(reply, key_busy, status.busy);
  return status;
}

Message stop_reply(const StopResult& result) {
  Message reply = ok_reply();
  for (int r : result.stopped) reply[key_stopped].push_back(r);
  reply[key_unreachable] = YAML::Node(YAML::NodeType::Sequence);
  for (const auto& u : result.unreachable) {
    Message rank;
    rank[key_rank] = u.rank;
    rank[key_host] = u.host;
    rank[key_last_heard] = u.last_heard;
    reply[key_unreachable].push_back(rank);
  }
  return reply;
}

StopResult stop_result_of(const Message& reply, const std::vector<int>& all_ranks) {
  StopResult result;
  if (!reply[key_stopped] || !reply[key_stopped].IsSequence()) {
    result.stopped = all_ranks;
    return result;
  }
  for (double r : list_of<double>(reply[key_stopped]))
    result.stopped.push_back(static_cast<int>(r));
  const auto unreachable = reply[key_unreachable];
  for (std::size_t i = 0; unreachable && unreachable.IsSequence() && i < unreachable.size(); ++i) {
    const auto item = unreachable[i];
    if (!item.IsMap()) continue;
    UnreachableRank u;
    scalar(item, key_rank, u.rank);
    scalar(item, key_host, u.host);
    scalar(item, key_last_heard, u.last_heard);
    result.unreachable.push_back(u);
  }
  return result;
}

}  // namespace ddstage::detail
