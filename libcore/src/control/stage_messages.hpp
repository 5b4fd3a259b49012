// The stage request (`load --lazy`): a reader asks the rank that owns a lazily staged region to
// bring samples in from origin before it reads them there; the owner answers once they are in.
// Sent to the owner's own control address, with the store's token, in control frames.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "control_frame.hpp"

namespace ddstage {
class LazyRegion;
}

namespace ddstage::detail {

/// Most ids one stage request carries (a batch is far smaller): a bigger list is split by
/// request_stage, and refused by stage_command_of before it is expanded.
inline constexpr std::size_t max_stage_ids = 1u << 20;

/// A stage request as the owner executes it.
struct StageCommand {
  std::string dataset;
  /// The region the ids are in, by its segment (store.yaml's name): stable while positions in
  /// store.yaml's list are not (a repair drops a lost rank's regions).
  std::string segment;
  std::vector<uint64_t> ids;  ///< ascending, no repeats; may be empty (asks how far it is)
};

/// What the owner says of the region once the ids asked are staged.
struct StageReply {
  bool complete = false;      ///< every sample of the region is staged: no need to ask again
  uint64_t staged = 0;        ///< samples of the region staged
  uint64_t origin_reads = 0;  ///< samples the owner read from origin for the region so far
};

/// {op: stage, name, region, ids}: ids in any order, repeats allowed; they travel sorted, as
/// ranges ("0-9,12,40-41"), so a batch of 4096 random ids of a million is about 30 KB.
Message stage_request(const std::string& dataset, const std::string& segment,
                      std::span<const uint64_t> ids);
/// UsageError for a request without a dataset or region, or with an ill-formed id list or one
/// of more than max_stage_ids ids.
StageCommand stage_command_of(const Message& request);

Message stage_reply(const StageReply& reply);
/// Error when the reply lacks a field.
StageReply stage_reply_of(const Message& reply);

/// The lazily staged region of dataset in `segment` on this rank, or null when it has none: shared,
/// so that an unload while a stage request runs frees the region (and the memory under it)
/// only once that request is done with it.
using FindLazyRegion = std::function<std::shared_ptr<LazyRegion>(const std::string& dataset,
                                                                 const std::string& segment)>;

/// The owner's whole answer to a stage request (op "stage"): parses it, finds its region, stages
/// the ids and replies; any failure becomes an error reply carrying its class (a StaleError
/// reaches the reader as one; a region find does not know, a UsageError). Blocks while origin
/// is read: run it where nothing else waits on the thread (StageWorkers).
Message answer_stage(const Message& request, const FindLazyRegion& find);

/// Asks the owner at `control` to stage ids of the dataset's region and returns its reply once
/// they are in (in several requests when there are more than max_stage_ids), each request
/// bounded by timeout. Throws the error the owner sent, of its class, or Error naming the
/// address when it does not answer.
StageReply request_stage(const std::string& control, std::string_view token,
                         const std::string& dataset, const std::string& segment,
                         std::span<const uint64_t> ids, std::chrono::milliseconds timeout);

}  // namespace ddstage::detail
