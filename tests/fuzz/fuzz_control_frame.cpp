// Control frames (libcore/src/control/control_channel.cpp): the bytes a stranger on the
// network can send rank 0's control port, received over a socketpair. The input is the whole
// stream, so it can hold several frames; the sender then hangs up, which ends the stream.
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "control/control_channel.hpp"
#include "fuzz_support.hpp"

namespace {

/// More than one socket buffer would block the single-threaded writer below; libFuzzer's
/// default -max_len (4096) is far under it.
constexpr size_t max_stream_bytes = 64 << 10;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ddstage;
  if (size > max_stream_bytes) return 0;
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0)
    fuzz::violated("socketpair failed");
  FileDescriptor sender(fds[1], "fuzz sender");
  detail::ControlConnection receiver(FileDescriptor(fds[0], "fuzz receiver"), "fuzz peer");
  for (size_t done = 0; done < size;) {
    const ssize_t n = ::send(sender.get(), data + done, size - done, MSG_NOSIGNAL);
    if (n <= 0) fuzz::violated("socketpair send failed");
    done += static_cast<size_t>(n);
  }
  ::shutdown(sender.get(), SHUT_WR);
  fuzz::expect_clean([&] {
    for (;;) {
      const auto message = receiver.receive(std::chrono::seconds(5));
      if (!message.IsMap()) fuzz::violated("a received message is not a map");
    }
  });
  return 0;
}
