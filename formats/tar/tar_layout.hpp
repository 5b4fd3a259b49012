// How the members of tar shards become samples and fields: one sample per member, or
// WebDataset's grouping by key.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tar_reader.hpp"

namespace ddstage::formats {

/// The regular members of one shard, in archive order.
struct TarShard {
  std::string path;  ///< as given, for messages and add_source
  std::vector<TarMember> members;
};

/// Samples over a set of shards, in shard order then archive order. Every sample has one member
/// per data field, and a label: the first label_length bytes of one member's name (the member
/// name, or the WebDataset key).
struct TarLayout {
  std::vector<std::string> data_fields;
  std::string label_field;
  struct Sample {
    uint32_t shard = 0;
    uint32_t label_member = 0;
    uint32_t label_length = 0;
  };
  std::vector<Sample> samples;
  /// samples.size() x data_fields.size(): the member (index in its shard) of each data field.
  std::vector<uint32_t> members;
};

/// One sample per member: fields "data" (its bytes) and "name" (its path in the archive).
TarLayout member_layout(const std::vector<TarShard>& shards);

/// WebDataset's layout: members grouped by key (the path up to the first dot of the basename,
/// "dir/000123.seg.png" -> "dir/000123"), one field per extension ("seg.png", lower-cased as
/// WebDataset does), fields sorted by name, and "__key__" with the key. Consecutive members of
/// a key form its sample. UsageError naming the shard and member for a member without an
/// extension, a key that comes back after other keys, an extension twice in one key, and a
/// key that lacks a field other keys have.
TarLayout webdataset_layout(const std::vector<TarShard>& shards);

}  // namespace ddstage::formats
