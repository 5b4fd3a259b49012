// Control frames (libcore/src/control/control_frame.cpp): the bytes a peer on the network can
// send rank 0's control port, taken apart in the order the front desk does (control_server.cpp):
// the fixed header, the token, the length, then the YAML body. The input is the whole stream,
// so it can hold several frames; the first refusal drops the connection, as the server does.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "control/control_frame.hpp"
#include "fuzz_support.hpp"

namespace {

/// The token the committed seeds carry (tests/fuzz/make_seeds.sh), so that mutations reach the
/// length check and the body parser and not only the token comparison.
constexpr std::string_view fuzz_token = "0123456789abcdef0123456789abcdef";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddstage::detail;
  auto stream = std::as_bytes(std::span(data, size));
  ddstage::fuzz::expect_clean([&] {
    while (stream.size() >= frame_header_bytes) {
      const auto header = decode_header(stream.first<frame_header_bytes>(), "fuzz peer");
      stream = stream.subspan(frame_header_bytes);
      if (!same_token(header.token, fuzz_token)) return;
      check_length(header.length, "fuzz peer");
      if (header.length > stream.size()) return;  // the peer hung up mid-body
      const std::string body(reinterpret_cast<const char*>(stream.data()), header.length);
      stream = stream.subspan(header.length);
      if (!decode_body(body, "fuzz peer").IsMap())
        ddstage::fuzz::violated("a decoded message is not a map");
    }
  });
  return 0;
}
