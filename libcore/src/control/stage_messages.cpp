#include "stage_messages.hpp"

#include <algorithm>
#include <charconv>
#include <exception>
#include <optional>

#include <fmt/format.h>

#include "control_channel.hpp"
#include "control_messages.hpp"
#include "ddstage/error.hpp"
#include "error_record.hpp"
#include "lazy_region.hpp"

namespace ddstage::detail {
namespace {

// The keys, each written here once.
constexpr const char* key_segment = "segment";
constexpr const char* key_ids = "ids";
constexpr const char* key_complete = "complete";
constexpr const char* key_staged = "staged";
constexpr const char* key_origin_reads = "origin_reads";

constexpr const char* stage_op = "stage";

/// Sorted distinct ids as "a-b,c,...": one item per run of consecutive ids.
std::string id_ranges(std::vector<uint64_t> ids) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  std::string out;
  for (std::size_t i = 0; i < ids.size();) {
    std::size_t j = i + 1;
    while (j < ids.size() && ids[j] == ids[j - 1] + 1) ++j;
    if (!out.empty()) out += ',';
    out += j - i == 1 ? fmt::format("{}", ids[i]) : fmt::format("{}-{}", ids[i], ids[j - 1]);
    i = j;
  }
  return out;
}

[[noreturn]] void bad_ids(std::string_view near) {
  throw UsageError(
      fmt::format("stage request with an ill-formed id list near '{}'", near.substr(0, 32)));
}

/// The next id of text at `at`, which it moves past.
uint64_t next_id(std::string_view text, std::size_t& at) {
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data() + at, text.data() + text.size(), v);
  if (ec != std::errc()) bad_ids(text.substr(at));
  at = static_cast<std::size_t>(end - text.data());
  return v;
}

/// id_ranges' text back as ids: strictly ascending items, each an id or an inclusive range,
/// at most max_stage_ids in all (counted before any range is expanded).
std::vector<uint64_t> ids_of(std::string_view text) {
  std::vector<uint64_t> ids;
  for (std::size_t at = 0; !text.empty(); ++at) {  // past the comma
    const std::size_t item = at;
    const uint64_t first = next_id(text, at);
    uint64_t last = first;
    if (at < text.size() && text[at] == '-') last = next_id(text, ++at);
    if (last < first || (!ids.empty() && first <= ids.back())) bad_ids(text.substr(item));
    if (last - first >= max_stage_ids - ids.size())
      throw UsageError(fmt::format("stage request of more than {} ids", max_stage_ids));
    for (uint64_t id = first;; ++id) {
      ids.push_back(id);
      if (id == last) break;  // not id <= last: last may be 2^64 - 1
    }
    if (at == text.size()) break;
    if (text[at] != ',') bad_ids(text.substr(at));
  }
  return ids;
}

}  // namespace

Message stage_request(const std::string& dataset, const std::string& segment,
                      std::span<const uint64_t> ids) {
  Message m;
  m[key_op] = stage_op;
  m[key_name] = dataset;
  m[key_segment] = segment;
  m[key_ids] = id_ranges({ids.begin(), ids.end()});
  return m;
}

StageCommand stage_command_of(const Message& request) {
  const auto dataset = converted<std::string>(request, key_name);
  const auto segment = converted<std::string>(request, key_segment);
  const auto ids = converted<std::string>(request, key_ids);
  if (!dataset || !segment || !ids)
    throw UsageError("stage request without a valid name, segment and ids");
  return {*dataset, *segment, ids_of(*ids)};
}

Message stage_reply(const StageReply& reply) {
  Message m = ok_reply();
  m[key_complete] = reply.complete;
  m[key_staged] = reply.staged;
  m[key_origin_reads] = reply.origin_reads;
  return m;
}

StageReply stage_reply_of(const Message& reply) {
  const auto complete = converted<bool>(reply, key_complete);
  const auto staged = converted<uint64_t>(reply, key_staged);
  const auto origin_reads = converted<uint64_t>(reply, key_origin_reads);
  if (!complete || !staged || !origin_reads)
    throw Error(ErrorKind::runtime,
                "the owner's stage reply has no valid complete, staged and origin_reads");
  return {*complete, *staged, *origin_reads};
}

Message answer_stage(const Message& request, const FindLazyRegion& find) {
  try {
    const StageCommand command = stage_command_of(request);
    const auto region = find(command.dataset, command.segment);
    if (!region) {
      throw UsageError(fmt::format("this rank stages no region {} of dataset '{}'", command.segment,
                                   command.dataset));
    }
    region->stage(command.ids);
    return stage_reply({region->complete(), region->staged(), region->origin_reads()});
  } catch (...) {
    return error_reply(ErrorRecord::of(std::current_exception()));
  }
}

StageReply request_stage(const std::string& control, std::string_view token,
                         const std::string& dataset, const std::string& segment,
                         std::span<const uint64_t> ids, std::chrono::milliseconds timeout) {
  StageReply reply;
  // One request even for no ids: it asks how far the region is.
  std::size_t at = 0;
  do {
    const auto part = ids.subspan(at, std::min(max_stage_ids, ids.size() - at));
    const Message answer =
        control_request(control, token, stage_request(dataset, segment, part), timeout);
    if (const auto failure = failure_of(answer)) failure->raise();
    reply = stage_reply_of(answer);
    at += part.size();
  } while (at < ids.size());
  return reply;
}

}  // namespace ddstage::detail
