// The control wire format: a fixed-layout header (magic, version, token, body length), then a
// YAML body. The token sits at a fixed place so that rank 0 can refuse a peer without it after
// reading the header alone, before it reads or parses anything that peer chose the size of.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

namespace ddstage::detail {

/// A control message: a YAML map (control_messages.hpp spells each one).
using Message = YAML::Node;

/// Version 2 moved the token out of the YAML into the fixed header (version 1 was a bare
/// 4-byte length and YAML with a "token" key).
inline constexpr uint32_t control_protocol_version = 2;
/// A store token: 32 hex digits (StoreDescriptor::token).
inline constexpr std::size_t token_chars = 32;
/// magic "DDSC", version (u32 LE), token (32 bytes), body length (u32 LE).
inline constexpr std::size_t frame_header_bytes = 4 + 4 + token_chars + 4;
/// Largest body accepted from a peer that proved it holds the token; a bigger length is an
/// error, not an allocation. A peer without the token gets no body read at all.
inline constexpr uint32_t max_message_bytes = 16u << 20;

using FrameHeaderBytes = std::array<std::byte, frame_header_bytes>;

struct FrameHeader {
  std::string_view token;  ///< into the header bytes; all zeros in replies
  uint32_t length = 0;
};

/// One frame. Requests carry the store's token; replies pass an empty token and carry zeros
/// instead, so that a reply to a peer without the token never hands it over. Error when the
/// token is not token_chars long or the body is over max_message_bytes.
std::string encode_frame(const Message& message, std::string_view token);

/// Reads a header: Error naming peer when it does not start with the magic (not a ddstage
/// control frame) or is of another protocol version. Checks neither the token nor the length:
/// the caller does, in that order.
FrameHeader decode_header(std::span<const std::byte, frame_header_bytes> bytes,
                          const std::string& peer);

/// Error naming peer when length is over max_message_bytes.
void check_length(uint32_t length, const std::string& peer);

/// The body's message: Error naming peer when it is not YAML or not a map.
Message decode_body(const std::string& text, const std::string& peer);

/// map[key] as T; nullopt when it is absent or not a T (a peer's bytes: never YAML's exception).
template <class T>
std::optional<T> converted(const Message& map, const char* key) {
  const auto node = map[key];
  T v{};
  if (!node || !node.IsScalar() || !YAML::convert<T>::decode(node, v)) return std::nullopt;
  return v;
}

/// Whether a token a peer sent is the store's, in time that does not depend on where they
/// differ (a byte-by-byte early exit would let a peer find the token a byte at a time).
bool same_token(std::string_view sent, std::string_view expected) noexcept;

}  // namespace ddstage::detail
