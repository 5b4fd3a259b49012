// Control-plane messages as bytes: what a node leader sends on a tree link or a probe's
// connection (behind the control frame's header and token, control_frame.hpp). A peer's bytes
// are checked before the logic sees them: a message that does not decode, or names a node, rank
// or time outside the store, is dropped whole, never half-applied.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "cluster_layout.hpp"
#include "cluster_message.hpp"

namespace ddstage::detail {

std::string encode_cluster_message(const ClusterMessage& message);

/// The message in `bytes`, or nullopt when they are not one this store's nodes could have sent:
/// malformed, truncated or trailing bytes, an unknown op, a node or rank out of `layout`, more
/// dead nodes or ranks than it has, or a command's time beyond an hour.
std::optional<ClusterMessage> decode_cluster_message(std::string_view bytes,
                                                     const ClusterLayout& layout);

}  // namespace ddstage::detail
