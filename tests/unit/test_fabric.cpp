// The fabric layer on real providers over loopback: tcp (tcp;ofi_rxm pinned to lo) and shm.
// A provider missing here is reported as skipped, never passed silently.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <random>
#include <sstream>
#include <thread>

#include <catch2/catch.hpp>

#include "ddstage/tool/fabric_floor.hpp"
#include "fabric/fabric_endpoint.hpp"
#include "fabric/fabric_provider.hpp"
#include "fabric/fabric_region.hpp"
#include "fabric/fabric_server.hpp"
#include "transport/fabric_transport.hpp"
#include "transport/transport_registry.hpp"

using namespace ddstage;
using namespace ddstage::detail;
using Clock = std::chrono::steady_clock;

namespace {

// libfabric reads its environment once, at the first fi_getinfo: pin every IP provider to the
// loopback interface before any test runs, so no test traffic can leave 127.0.0.0/8.
const bool loopback_only = [] {
  for (const char* var : {"FI_TCP_IFACE", "FI_NET_IFACE", "FI_SOCKETS_IFACE", "FI_UDP_IFACE"})
    setenv(var, "lo", 1);
  return true;
}();

struct Provider {
  const char* name;
  const char* domain;  // IP providers: the loopback interface, as a user would name it
};
constexpr Provider providers[] = {{"tcp", "lo"}, {"shm", ""}};

bool present(const Provider& p) {
  try {
    choose_provider(p.name, p.domain);
    return true;
  } catch (const UsageError& e) {
    WARN("skipped: no provider " << p.name << ": " << e.what());
    return false;
  }
}

constexpr std::pair<FabricProgress, const char*> progress_modes[] = {
    {FabricProgress::adaptive, "adaptive"},
    {FabricProgress::sleep, "sleep"},
    {FabricProgress::spin, "spin"}};

FabricOptions options_for(const Provider& p, FabricProgress progress = FabricProgress::adaptive) {
  FabricOptions o;
  o.provider = p.name;
  o.domain = p.domain;
  o.progress = progress;
  o.read_timeout = std::chrono::seconds(5);
  return o;
}

std::vector<std::byte> pattern(std::size_t bytes, unsigned seed) {
  std::vector<std::byte> out(bytes);
  for (std::size_t i = 0; i < bytes; ++i)
    out[i] = static_cast<std::byte>((i * 131 + seed * 7 + (i >> 12)) & 0xff);
  return out;
}

FabricRemote remote(const FabricServer& server, uint64_t region) {
  return {server.peer(), server.region(region), "localhost"};
}

void post_and_wait(FabricTransport& t, std::span<const ReadOp> ops) {
  t.post(ops);
  t.wait();
}

/// Random rows over `regions` (by rank), read in one batch and compared byte for byte.
void read_and_compare(FabricTransport& t, const std::vector<std::vector<std::byte>*>& regions,
                      std::mt19937& rng, std::size_t rows, bool split_posts) {
  std::vector<ReadOp> ops;
  std::size_t total = 0;
  std::uniform_int_distribution<int> rank_dist(0, static_cast<int>(regions.size()) - 1);
  std::uniform_int_distribution<uint64_t> size_dist(3 << 10, 1 << 20);
  for (std::size_t i = 0; i < rows; ++i) {
    const int rank = rank_dist(rng);
    const uint64_t bytes = size_dist(rng);
    const uint64_t offset =
        std::uniform_int_distribution<uint64_t>(0, regions[rank]->size() - bytes)(rng);
    ops.push_back({offset, bytes, nullptr, rank});
    total += bytes;
  }
  ops.push_back(ops.front());  // a repeat
  total += ops.back().bytes;
  std::vector<std::byte> dest(total);
  std::size_t at = 0;
  for (ReadOp& op : ops) {
    op.dest = dest.data() + at;
    at += op.bytes;
  }
  if (split_posts) {
    const std::size_t half = ops.size() / 2;
    t.post(std::span(ops).first(half));
    t.post(std::span(ops).subspan(half));
  } else {
    t.post(ops);
  }
  t.wait();
  for (const ReadOp& op : ops) {
    const std::byte* want = regions[op.target]->data() + op.offset;
    REQUIRE(std::memcmp(op.dest, want, op.bytes) == 0);
  }
}

/// Rank 0: a live in-process server. Rank 1: a region on an endpoint nobody drives: with manual
/// progress its reads never complete, like a hung server's, until somebody drives it.
struct LiveAndHung {
  LiveAndHung(const Provider& p, unsigned seed)
      : live(options_for(p)),
        a(pattern(1 << 20, seed)),
        ra(live.add_region(a)),
        hung(*choose_provider(p.name, p.domain)),
        b(pattern(1 << 20, seed + 1)),
        region(hung, b) {}
  std::vector<FabricRemote> remotes(const std::string& hung_host) const {
    return {remote(live, ra),
            {{hung.provider(), to_hex(hung.address())}, region.info(), hung_host}};
  }

  FabricServer live;
  std::vector<std::byte> a;
  uint64_t ra;
  FabricEndpoint hung;
  std::vector<std::byte> b;
  FabricRegion region;
};

constexpr std::byte canary{0xa5};

/// Reads covering `dest` in `pieces` equal parts from `rank` at offset 0.
std::vector<ReadOp> reads_into(std::span<std::byte> dest, std::size_t pieces, int rank) {
  std::vector<ReadOp> ops;
  const std::size_t piece = dest.size() / pieces;
  for (std::size_t i = 0; i < pieces; ++i)
    ops.push_back({i * piece, piece, dest.data() + i * piece, rank});
  return ops;
}

/// Whether `dest` stays as the caller left it once the transport said nothing would write into
/// it any more: fills it with a canary, then drives the transport with batches of `other` (a
/// provider still holding reads aimed at dest would land them now) and looks again.
bool stays_untouched(FabricTransport& t, std::span<std::byte> dest, std::span<const ReadOp> other) {
  std::fill(dest.begin(), dest.end(), canary);
  for (int i = 0; i < 3; ++i) {
    post_and_wait(t, other);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
  }
  return std::all_of(dest.begin(), dest.end(), [](std::byte b) { return b == canary; });
}

/// A FabricServer in a forked process serving pattern(bytes, seed): proves reads cross
/// processes, and can be killed like a crashed server rank. Killed and reaped on destruction.
class ChildServer {
 public:
  ChildServer(const Provider& p, std::size_t bytes, unsigned seed,
              FabricProgress progress = FabricProgress::adaptive) {
    int to_parent[2];
    REQUIRE(::pipe(to_parent) == 0);
    REQUIRE(::pipe(m_to_child) == 0);
    m_pid = ::fork();
    REQUIRE(m_pid >= 0);
    if (m_pid == 0) {
      ::close(to_parent[0]);
      ::close(m_to_child[1]);
      serve(p, progress, bytes, seed, to_parent[1], m_to_child[0]);
    }
    ::close(to_parent[1]);
    ::close(m_to_child[0]);
    std::string text;
    char buf[512];
    for (ssize_t n;
         text.find('\n') == std::string::npos && (n = ::read(to_parent[0], buf, sizeof buf)) > 0;) {
      text.append(buf, static_cast<std::size_t>(n));
    }
    ::close(to_parent[0]);
    std::istringstream in(text);
    in >> m_remote.peer.provider >> m_remote.peer.address_hex >> m_remote.region.key >>
        m_remote.region.base >> m_remote.region.bytes;
    m_remote.host = "child";
    REQUIRE(in);
  }
  ~ChildServer() { finish(); }

  const FabricRemote& remote() const { return m_remote; }
  void kill() { ::kill(m_pid, SIGKILL); }
  /// SIGSTOP, returning once the child is stopped (the signal alone lands later).
  void stop() {
    ::kill(m_pid, SIGSTOP);
    int status = 0;
    REQUIRE(::waitpid(m_pid, &status, WUNTRACED) == m_pid);
    REQUIRE(WIFSTOPPED(status));
  }
  void resume() { ::kill(m_pid, SIGCONT); }
  /// Lets the child stop on its own (bounded), then reaps it; its exit status.
  int finish() {
    if (m_pid <= 0) return m_status;
    ::close(m_to_child[1]);
    for (int i = 0; i < 100 && ::waitpid(m_pid, &m_status, WNOHANG) == 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (::waitpid(m_pid, &m_status, WNOHANG) == 0) {
      ::kill(m_pid, SIGKILL);
      ::waitpid(m_pid, &m_status, 0);
    }
    // libfabric's shm provider names its regions "/dev/shm/PID:..."; a killed child leaves them.
    const std::string prefix = std::to_string(m_pid) + ":";
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
      if (e.path().filename().string().starts_with(prefix)) std::filesystem::remove(e.path());
    }
    m_pid = -1;
    return m_status;
  }

 private:
  /// The server process: publish what a reader needs, serve until the parent closes the pipe.
  [[noreturn]] static void serve(const Provider& p, FabricProgress progress, std::size_t bytes,
                                 unsigned seed, int out, int in) {
    int code = 0;
    try {
      auto memory = pattern(bytes, seed);
      FabricServer server(options_for(p, progress));
      const FabricRegionInfo r = server.region(server.add_region(memory));
      const std::string line = server.peer().provider + " " + server.peer().address_hex + " " +
                               std::to_string(r.key) + " " + std::to_string(r.base) + " " +
                               std::to_string(r.bytes) + "\n";
      if (::write(out, line.data(), line.size()) != static_cast<ssize_t>(line.size())) code = 3;
      char c;
      while (::read(in, &c, 1) > 0) {
      }
    } catch (...) {
      code = 2;
    }
    ::_exit(code);
  }

  pid_t m_pid = -1;
  int m_to_child[2] = {-1, -1};
  int m_status = 0;
  FabricRemote m_remote;
};

}  // namespace

TEST_CASE("fabric: peer addresses round-trip through hex", "[fabric]") {
  const std::string raw("\x00\x01\xab\xff\x10", 5);
  CHECK(to_hex(raw) == "0001abff10");
  CHECK(from_hex("0001ABff10") == raw);
  CHECK_THROWS_AS(from_hex("abc"), UsageError);
  CHECK_THROWS_AS(from_hex("zz"), UsageError);
}

TEST_CASE("fabric: an absent provider is a usage error naming what exists", "[fabric]") {
  try {
    choose_provider("nosuchprovider", "");
    FAIL("no error");
  } catch (const UsageError& e) {
    CHECK_THAT(e.what(), Catch::Contains("'nosuchprovider'") && Catch::Contains("present:"));
  }
  CHECK_THROWS_WITH(choose_provider("tcp", "nosuchif0"), Catch::Contains("domain 'nosuchif0'"));
  // sockets and udp;ofi_rxd are never picked by auto; shm only when nothing reaches other nodes.
  const auto rows = describe_providers("auto", "");
  for (const auto& r : rows) {
    if (r.provider == "sockets" || r.provider == "udp;ofi_rxd") CHECK(!r.chosen);
  }
  CHECK(std::count_if(rows.begin(), rows.end(), [](const auto& r) { return r.chosen; }) ==
        (rows.empty() ? 0 : 1));
}

TEST_CASE("fabric: random batches read byte for byte from an in-process server", "[fabric]") {
  for (const Provider& p : providers) {
    SECTION(p.name) {
      if (!present(p)) continue;
      auto a = pattern(6 << 20, 1);
      auto b = pattern(3 << 20, 2);
      for (const auto& [progress, mode] : progress_modes) {
        INFO("fabric.progress=" << mode);
        FabricServer server(options_for(p, progress));
        const uint64_t ra = server.add_region(a);
        const uint64_t rb = server.add_region(b);
        FabricOptions o = options_for(p);
        o.window = 16;                 // fills, so posting must reap mid-batch
        o.max_read_bytes = 256 << 10;  // 1 MB rows are split in four
        FabricTransport t(o, {remote(server, ra), remote(server, rb)});
        CHECK(t.provider() == server.peer().provider);
        std::mt19937 rng(42);
        for (int batch = 0; batch < 6; ++batch)
          read_and_compare(t, {&a, &b}, rng, 40, batch % 2 == 1);
      }
    }
  }
}

TEST_CASE("fabric: regions come and go while the server runs", "[fabric]") {
  for (const Provider& p : providers) {
    SECTION(p.name) {
      if (!present(p)) continue;
      FabricServer server(options_for(p));
      auto a = pattern(1 << 20, 3);
      const uint64_t ra = server.add_region(a);
      std::mt19937 rng(7);
      {
        auto b = pattern(2 << 20, 4);
        const uint64_t rb = server.add_region(b);
        FabricTransport t(options_for(p), {remote(server, ra), remote(server, rb)});
        read_and_compare(t, {&a, &b}, rng, 8, false);
        server.remove_region(rb);
      }
      auto c = pattern(2 << 20, 5);
      const uint64_t rc = server.add_region(c);
      FabricTransport t(options_for(p), {remote(server, ra), remote(server, rc)});
      read_and_compare(t, {&a, &c}, rng, 8, false);
    }
  }
}

TEST_CASE("fabric: a wrong key is an error naming the rank, not data", "[fabric]") {
  // tcp only: shm 1.17 reads a same-node peer by virtual address and checks no key (a process
  // of the same user on that node could read the memory anyway).
  for (const Provider& p : {providers[0]}) {
    SECTION(p.name) {
      if (!present(p)) continue;
      FabricServer server(options_for(p));
      auto a = pattern(1 << 20, 6);
      FabricRemote r = remote(server, server.add_region(a));
      r.region.key ^= 0x5a5a;
      FabricOptions o = options_for(p);
      o.read_timeout = std::chrono::seconds(2);
      FabricTransport t(o, {r});
      std::vector<std::byte> dest(4096);
      const ReadOp op{0, dest.size(), dest.data(), 0};
      t.post({&op, 1});
      CHECK_THROWS_WITH(t.wait(), Catch::Contains("rank 0"));
    }
  }
}

TEST_CASE("fabric: a peer that never answers fails the batch within read_timeout", "[fabric]") {
  for (const Provider& p : providers) {
    SECTION(p.name) {
      if (!present(p)) continue;
      LiveAndHung targets(p, 8);
      FabricOptions o = options_for(p);
      o.read_timeout = std::chrono::seconds(1);
      FabricTransport t(o, targets.remotes("hungnode"));
      std::vector<std::byte> dest(8 * 4096);
      std::vector<ReadOp> ops;
      for (int i = 0; i < 8; ++i)
        ops.push_back({uint64_t(i) * 4096, 4096, dest.data() + i * 4096, i % 2});
      const auto start = Clock::now();
      // rxm's lazy connect can stall the post itself: either call may report it.
      CHECK_THROWS_WITH(post_and_wait(t, ops), Catch::Contains("rank 1 on hungnode") &&
                                                   Catch::Contains("read_timeout") &&
                                                   !Catch::Contains("rank 0"));
      CHECK(Clock::now() - start < std::chrono::seconds(4));
      std::mt19937 rng(9);
      read_and_compare(t, {&targets.a}, rng, 16, false);
    }
  }
}

TEST_CASE("fabric: the floor reader gives up on a target that never answers within read_timeout",
          "[fabric]") {
  const Provider& p =
      providers[0];  // tcp: rxm connects lazily, so an unreachable target refuses every post
  if (!present(p)) return;
  FabricEndpoint hung(*choose_provider(p.name, p.domain));
  auto b = pattern(1 << 20, 10);
  FabricRegion region(hung, b);
  const auto info = region.info();
  const auto hex = to_hex(hung.address());
  const auto settings = Settings::resolve(
      {{"fabric.provider", p.name}, {"fabric.domain", p.domain}, {"read_timeout", "1s"}}, {},
      std::nullopt, false);
  FabricFloorReader reader(
      settings, fabric_floor_address(hung.provider(), hex, info.key, info.base, info.bytes));
  CHECK_THROWS_WITH(reader.run(4096, 16, 8, 1),
                    Catch::Contains(hex) && Catch::Contains("read_timeout (1000 ms)"));
}

TEST_CASE("fabric: a reader in another process reads a server's region", "[fabric]") {
  for (const Provider& p : providers) {
    SECTION(p.name) {
      if (!present(p)) continue;
      auto a = pattern(4 << 20, 11);
      for (const auto& [progress, mode] : progress_modes) {
        INFO("fabric.progress=" << mode);
        ChildServer child(p, 4 << 20, 11, progress);
        {
          FabricTransport t(options_for(p), {child.remote()});
          std::mt19937 rng(11);
          read_and_compare(t, {&a}, rng, 32, false);
          // After a pause longer than the adaptive spin, the server sleeps again: the next
          // reads must wake it.
          std::this_thread::sleep_for(std::chrono::milliseconds(30));
          read_and_compare(t, {&a}, rng, 8, false);
        }
        const int status = child.finish();
        CHECK(WIFEXITED(status));
        CHECK(WEXITSTATUS(status) == 0);
      }
    }
  }
}

TEST_CASE("fabric: a stopped server fails the batch within read_timeout in every progress mode",
          "[fabric]") {
  for (const Provider& p : providers) {
    // Not shm: its reader takes a spin lock the server shares, and a server stopped while its
    // progress thread held it (1 in 6 beside a CPU hog) keeps the reader spinning inside
    // fi_readmsg until it resumes, beyond any timeout of ours (ddstage-fabric(7), SHARED
    // MEMORY). A killed shm server is covered below.
    if (std::string_view(p.name) == "shm") continue;
    SECTION(p.name) {
      if (!present(p)) continue;
      for (const auto& [progress, mode] : progress_modes) {
        INFO("fabric.progress=" << mode);
        ChildServer child(p, 1 << 20, 14, progress);
        FabricOptions o = options_for(p);
        o.read_timeout = std::chrono::seconds(1);
        FabricTransport t(o, {child.remote()});
        std::vector<std::byte> dest(64 << 10);
        const auto ops = reads_into(dest, 16, 0);
        post_and_wait(t, ops);
        child.stop();
        const auto start = Clock::now();
        CHECK_THROWS_WITH(post_and_wait(t, ops),
                          Catch::Contains("rank 0 on child") && Catch::Contains("read_timeout"));
        CHECK(Clock::now() - start < std::chrono::seconds(4));
        child.resume();
      }
    }
  }
}

TEST_CASE("fabric: a killed server fails the batch in bounded time; other ranks still read",
          "[fabric]") {
  for (const Provider& p : providers) {
    SECTION(p.name) {
      if (!present(p)) continue;
      FabricServer live(options_for(p));
      auto a = pattern(1 << 20, 12);
      const uint64_t ra = live.add_region(a);
      ChildServer child(p, 1 << 20, 13);
      FabricOptions o = options_for(p);
      o.read_timeout = std::chrono::seconds(1);
      FabricTransport t(o, {remote(live, ra), child.remote()});
      std::vector<std::byte> dest(1 << 20);
      const ReadOp op{0, dest.size(), dest.data(), 1};
      post_and_wait(t, {&op, 1});
      child.kill();
      child.finish();
      const auto start = Clock::now();
      CHECK_THROWS_WITH(post_and_wait(t, {&op, 1}), Catch::Contains("rank 1 on child"));
      CHECK(Clock::now() - start < std::chrono::seconds(4));
      std::mt19937 rng(12);
      read_and_compare(t, {&a}, rng, 16, false);
    }
  }
}

TEST_CASE("fabric: only tcp and net before 1.18, with manual data progress, leave an endpoint open",
          "[fabric]") {
  const auto leaves_open = [](const char* provider, fi_progress progress, uint32_t version) {
    InfoPtr info(fabric_api().allocinfo());
    REQUIRE(info);
    info->fabric_attr->prov_name = ::strdup(provider);
    info->domain_attr->data_progress = progress;
    return abandons_with_reads_in_flight(*info, version);
  };
  CHECK(leaves_open("tcp;ofi_rxm", FI_PROGRESS_MANUAL, FI_VERSION(1, 17)));
  CHECK(leaves_open("net;ofi_rxm", FI_PROGRESS_MANUAL, FI_VERSION(1, 17)));
  CHECK(leaves_open("tcp", FI_PROGRESS_MANUAL, FI_VERSION(1, 17)));
  // A provider thread would still land the reads in a buffer the caller freed: closed.
  CHECK_FALSE(leaves_open("tcp;ofi_rxm", FI_PROGRESS_AUTO, FI_VERSION(1, 17)));
  CHECK_FALSE(leaves_open("tcp;ofi_rxm", FI_PROGRESS_MANUAL, FI_VERSION(1, 18)));
  CHECK_FALSE(leaves_open("shm", FI_PROGRESS_MANUAL, FI_VERSION(1, 17)));
  CHECK_FALSE(leaves_open("verbs;ofi_rxm", FI_PROGRESS_MANUAL, FI_VERSION(1, 17)));
}

TEST_CASE("fabric: endpoints left open after time-outs are capped per process", "[fabric]") {
  for (const Provider& p : providers) {
    SECTION(p.name) {
      if (!present(p)) continue;
      LiveAndHung targets(p, 14);
      const bool leaves_open =
          abandons_with_reads_in_flight(targets.hung.info(), fabric_api().version());
      const std::size_t before = FabricTransport::abandoned_endpoints();
      FabricOptions o = options_for(p);
      o.read_timeout = std::chrono::milliseconds(300);
      o.max_abandoned_endpoints = before + 1;
      const std::vector<FabricRemote> remotes = targets.remotes("hungnode");
      FabricTransport t(o, remotes);
      std::vector<std::byte> dest(8 * 4096);
      std::vector<ReadOp> ops;
      for (int i = 0; i < 8; ++i)
        ops.push_back({uint64_t(i) * 4096, 4096, dest.data() + i * 4096, i % 2});
      CHECK_THROWS_WITH(post_and_wait(t, ops),
                        Catch::Contains("rank 1 on hungnode") && Catch::Contains("read_timeout"));
      CHECK(FabricTransport::abandoned_endpoints() == before + (leaves_open ? 1 : 0));
      std::mt19937 rng(14);
      if (leaves_open) {
        // At the cap: this transport, and any new one under the same cap, fails saying why
        // rather than opening endpoints it may have to leak.
        const ReadOp op{0, 4096, dest.data(), 0};
        CHECK_THROWS_WITH(
            post_and_wait(t, {&op, 1}),
            Catch::Contains("too many fabric endpoints left open") && Catch::Contains("restart"));
        CHECK_THROWS_WITH(FabricTransport(o, remotes),
                          Catch::Contains("too many fabric endpoints left open"));
      } else {
        WARN(p.name << ": closed after the time-out, nothing left open");
        read_and_compare(t, {&targets.a}, rng, 8, false);
      }
      // The default cap is not reached.
      FabricTransport fresh(options_for(p), {remote(targets.live, targets.ra)});
      read_and_compare(fresh, {&targets.a}, rng, 8, false);
    }
  }
}

TEST_CASE("fabric: a read of a registration the server closed is one a replace can cause",
          "[fabric]") {
  // tcp only: shm 1.17 reads a same-node peer by virtual address and checks no key.
  const Provider& p = providers[0];
  if (!present(p)) return;
  FabricServer server(options_for(p));
  auto a = pattern(1 << 20, 16);
  const uint64_t id = server.add_region(a);
  FabricOptions o = options_for(p);
  o.read_timeout = std::chrono::seconds(2);
  FabricTransport t(o, {remote(server, id)});
  std::vector<std::byte> dest(4096);
  const ReadOp op{0, dest.size(), dest.data(), 0};
  post_and_wait(t, {&op, 1});
  server.remove_region(id);
  try {
    post_and_wait(t, {&op, 1});
    FAIL("a read of a closed registration succeeded");
  } catch (const TransportError& e) {  // what a reader catches, without the fabric headers
    CHECK_THAT(e.what(), Catch::Contains("rank 0"));
    CHECK(e.may_be_withdrawn());
  }
}

TEST_CASE("fabric: quiesce mid-batch returns once nothing writes into the destination",
          "[fabric][quiesce]") {
  for (const Provider& p : providers) {
    SECTION(p.name) {
      if (!present(p)) continue;
      FabricServer server(options_for(p));
      auto a = pattern(4 << 20, 17);
      const uint64_t ra = server.add_region(a);
      FabricTransport t(options_for(p), {remote(server, ra)});
      std::vector<std::byte> dest(a.size());
      std::vector<std::byte> scratch(64 << 10);
      const auto other = reads_into(scratch, 1, 0);
      post_and_wait(t, other);  // connected: the batch below is all in flight at once
      const std::size_t abandoned = FabricTransport::abandoned_endpoints();
      for (int round = 0; round < 3; ++round) {
        const auto ops = reads_into(dest, 64, 0);
        t.post(ops);
        t.quiesce();  // the caller gives up on the batch
        CHECK(stays_untouched(t, dest, other));
      }
      // Reads to a live server are reaped, not abandoned with the endpoint.
      CHECK(FabricTransport::abandoned_endpoints() == abandoned);
      std::mt19937 rng(17);
      read_and_compare(t, {&a}, rng, 16, false);
    }
  }
}

TEST_CASE("fabric: a batch that fails mid-way leaves nothing in flight into the destination",
          "[fabric][quiesce]") {
  for (const Provider& p : providers) {
    SECTION(p.name) {
      if (!present(p)) continue;
      // Rank 1 hangs until the batch has failed, then is driven: a read still aimed at dest
      // would land.
      LiveAndHung targets(p, 18);
      FabricOptions o = options_for(p);
      o.read_timeout = std::chrono::milliseconds(300);
      o.max_abandoned_endpoints = 64;
      FabricTransport t(o, targets.remotes("latenode"));
      std::vector<std::byte> dest(1 << 20);
      auto ops = reads_into(dest, 32, 0);
      for (std::size_t i = 1; i < ops.size(); i += 2) ops[i].target = 1;
      CHECK_THROWS_WITH(post_and_wait(t, ops),
                        Catch::Contains("rank 1 on latenode") && Catch::Contains("read_timeout"));
      t.quiesce();
      std::jthread target([&targets](std::stop_token stop) {
        std::array<fi_cq_entry, 16> entries;
        while (!stop.stop_requested())
          fi_cq_read(targets.hung.cq(), entries.data(), entries.size());
      });
      std::vector<std::byte> scratch(64 << 10);
      CHECK(stays_untouched(t, dest, reads_into(scratch, 4, 0)));
    }
  }
}

TEST_CASE("fabric: a failed read fails its batch only once the others are reaped",
          "[fabric][quiesce]") {
  // tcp only: shm 1.17 checks no key (see above).
  const Provider& p = providers[0];
  if (!present(p)) return;
  FabricServer good(options_for(p));
  FabricServer refusing(options_for(p));
  auto a = pattern(2 << 20, 20);
  auto b = pattern(1 << 20, 21);
  FabricRemote wrong = remote(refusing, refusing.add_region(b));
  wrong.region.key ^= 0x5a5a;
  FabricOptions o = options_for(p);
  o.read_timeout = std::chrono::seconds(2);
  FabricTransport t(o, {remote(good, good.add_region(a)), wrong});
  std::vector<std::byte> dest(2 << 20);
  auto ops = reads_into(dest, 64, 0);
  ops[40].target = 1;
  CHECK_THROWS_WITH(post_and_wait(t, ops), Catch::Contains("rank 1"));
  t.quiesce();
  std::vector<std::byte> scratch(64 << 10);
  CHECK(stays_untouched(t, dest, reads_into(scratch, 1, 0)));
}

TEST_CASE("fabric: an InFlight guard left without complete() quiesces its reads",
          "[fabric][quiesce]") {
  for (const Provider& p : providers) {
    SECTION(p.name) {
      if (!present(p)) continue;
      FabricServer server(options_for(p));
      auto a = pattern(4 << 20, 22);
      FabricTransport t(options_for(p), {remote(server, server.add_region(a))});
      std::vector<std::byte> dest(a.size());
      std::vector<std::byte> scratch(64 << 10);
      const auto other = reads_into(scratch, 1, 0);
      const auto ops = reads_into(dest, 64, 0);
      try {
        InFlight batch(t);
        batch.post(ops);
        throw std::runtime_error("the batch fails elsewhere");
      } catch (const std::runtime_error&) {
      }
      CHECK(stays_untouched(t, dest, other));
      {
        InFlight batch(t);
        batch.post(ops);
        batch.complete();
      }
      CHECK(dest == a);
    }
  }
}

TEST_CASE("fabric: options take the progress mode and spin from settings", "[fabric]") {
  CHECK(FabricOptions::from(Settings()).progress == FabricProgress::adaptive);
  CHECK(FabricOptions::from(Settings()).spin == std::chrono::milliseconds(1));
  for (const auto& [progress, mode] : progress_modes) {
    const auto s = Settings::resolve({{"fabric.progress", mode}, {"fabric.spin", "20ms"}}, {},
                                     std::nullopt, false);
    CHECK(FabricOptions::from(s).progress == progress);
    CHECK(FabricOptions::from(s).spin == std::chrono::milliseconds(20));
  }
}

TEST_CASE("fabric: the registry opens a fabric transport from settings", "[fabric][transport]") {
  CHECK(transport_entry(TransportId::fabric).probe().available);
  const Provider& p = providers[0];
  if (!present(p)) return;
  FabricServer server(options_for(p));
  auto a = pattern(1 << 20, 23);
  const TransportTargets targets{.remotes = {remote(server, server.add_region(a))}};
  const auto settings = Settings::resolve(
      {{"fabric.provider", p.name}, {"fabric.domain", p.domain}}, {}, std::nullopt, false);
  const auto t = open_transport(TransportId::fabric, targets, settings);
  CHECK(t->name() == "fabric");
  std::vector<std::byte> dest(a.size());
  InFlight batch(*t);
  batch.post(reads_into(dest, 16, 0));
  batch.complete();
  CHECK(dest == a);
}
