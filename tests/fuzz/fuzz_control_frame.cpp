// Control frames (libcore/src/control/control_frame.cpp): the bytes a peer on the network can
// send rank 0's control port, taken apart in the order the front desk does (control_server.cpp):
// the fixed header, the token, the length, then the YAML body. The input is the whole stream,
// so it can hold several frames; the first refusal drops the connection, as the server does.
// Each decoded body then goes through every typed reader of control_messages.cpp and
// stage_messages.cpp, as a rank reads a request or a part and a client a reply: each may refuse
// it, none may crash.
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "control/control_frame.hpp"
#include "control/control_messages.hpp"
#include "control/stage_messages.hpp"
#include "fuzz_support.hpp"

namespace {

/// The token the committed seeds carry (tests/fuzz/make_seeds.sh), so that mutations reach the
/// length check and the body parser and not only the token comparison.
constexpr std::string_view fuzz_token = "0123456789abcdef0123456789abcdef";

/// What either end makes of a message: the server's request readers, the client's reply
/// readers. Each on its own, so one refusal does not hide the next reader's crash.
void read_typed(const ddstage::detail::Message& message) {
  using namespace ddstage::detail;
  using ddstage::fuzz::expect_clean;
  expect_clean([&] { command_of(message); });
  expect_clean([&] { heartbeat_rank(message); });
  expect_clean([&] { failure_of(message); });
  expect_clean([&] { load_result_of(message); });
  expect_clean([&] {
    if (is_interim(message)) progress_of(message);
  });
  expect_clean([&] { status_of(message); });
  expect_clean([&] { stop_result_of(message, {0, 1, 2, 3}); });
  expect_clean([&] { repair_results_of(message); });
  // What a rank's own socket reads: rank 0's parts (wire structs in YAML's binary scalar) and
  // readers' stage requests; and what rank 0 and readers read back.
  expect_clean([&] { part_command_of(message); });
  expect_clean([&] { part_reply_of(message); });
  expect_clean([&] { stage_command_of(message); });
  expect_clean([&] { stage_reply_of(message); });
}

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
      const auto message = decode_body(body, "fuzz peer");
      if (!message.IsMap()) ddstage::fuzz::violated("a decoded message is not a map");
      read_typed(message);
    }
  });
  return 0;
}
