#include "control_frame.hpp"

#include <algorithm>
#include <cstring>

#include "ddstage/error.hpp"
#include "yaml_limits.hpp"

namespace ddstage::detail {
namespace {

constexpr std::array<char, 4> magic{'D', 'D', 'S', 'C'};
constexpr std::size_t version_at = 4;
constexpr std::size_t token_at = 8;
constexpr std::size_t length_at = token_at + token_chars;

void put_u32(std::string& out, std::size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) out[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

uint32_t get_u32(std::span<const std::byte, frame_header_bytes> bytes, std::size_t at) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= std::to_integer<uint32_t>(bytes[at + i]) << (8 * i);
  return v;
}

}  // namespace

std::string encode_frame(const Message& message, std::string_view token) {
  if (!token.empty() && token.size() != token_chars) {
    throw Error(ErrorKind::usage, "the store token is " + std::to_string(token.size()) +
                                      " characters, not " + std::to_string(token_chars));
  }
  YAML::Emitter out;
  out << message;
  if (!out.good()) {
    throw Error(ErrorKind::runtime, "cannot encode a control message: " + out.GetLastError());
  }
  const std::size_t size = out.size();
  if (size > max_message_bytes) {
    throw Error(ErrorKind::runtime, "control message of " + std::to_string(size) +
                                        " bytes is over the limit of " +
                                        std::to_string(max_message_bytes));
  }
  std::string frame(frame_header_bytes, '\0');
  std::copy(magic.begin(), magic.end(), frame.begin());
  put_u32(frame, version_at, control_protocol_version);
  std::copy(token.begin(), token.end(), frame.begin() + token_at);
  put_u32(frame, length_at, static_cast<uint32_t>(size));
  frame.append(out.c_str(), size);
  return frame;
}

FrameHeader decode_header(std::span<const std::byte, frame_header_bytes> bytes,
                          const std::string& peer) {
  if (std::memcmp(bytes.data(), magic.data(), magic.size()) != 0) {
    throw Error(ErrorKind::runtime,
                peer +
                    " did not send a ddstage control frame (another program, or a ddstage "
                    "from before control protocol 2)");
  }
  if (const uint32_t version = get_u32(bytes, version_at); version != control_protocol_version) {
    throw Error(ErrorKind::runtime, peer + " speaks control protocol version " +
                                        std::to_string(version) + ", this ddstage speaks " +
                                        std::to_string(control_protocol_version) +
                                        ": use the same ddstage for serve and its clients");
  }
  return {std::string_view(reinterpret_cast<const char*>(bytes.data()) + token_at, token_chars),
          get_u32(bytes, length_at)};
}

void check_length(uint32_t length, const std::string& peer) {
  if (length > max_message_bytes) {
    throw Error(ErrorKind::runtime, "control message from " + peer + " says it is " +
                                        std::to_string(length) + " bytes, over the limit of " +
                                        std::to_string(max_message_bytes));
  }
}

Message decode_body(const std::string& text, const std::string& peer) {
  // Only a token holder gets this far, but its body is still bounded: yaml-cpp recurses once per
  // nesting level and follows aliases, so an unchecked body could take rank 0's stack.
  const Message message = load_yaml(text, "control message from " + peer, control_yaml_limits);
  if (!message.IsMap()) {
    throw Error(ErrorKind::runtime, "control message from " + peer + " is not a YAML map");
  }
  return message;
}

bool same_token(std::string_view sent, std::string_view expected) noexcept {
  // The length is public (token_chars); only the bytes are secret.
  if (sent.size() != expected.size() || expected.empty()) return false;
  unsigned char diff = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    diff |= static_cast<unsigned char>(sent[i] ^ expected[i]);
  }
  // volatile: keeps the compiler from turning the loop back into an early-exit comparison.
  volatile unsigned char result = diff;
  return result == 0;
}

}  // namespace ddstage::detail
