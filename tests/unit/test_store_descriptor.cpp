// DIR/store.yaml: round trip, permissions, and the errors a client sees for a missing,
// damaged or newer descriptor.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include "ddstage/error.hpp"
#include "ddstage/store_descriptor.hpp"
#include "test_support.hpp"

using namespace ddstage;
namespace fs = std::filesystem;

namespace {

StoreDescriptor sample_descriptor() {
  StoreDescriptor d;
  d.token = random_token();
  d.control = "[::1]:40123";
  d.started = "2024-05-01T12:00:00Z";
  for (int r = 0; r < 3; ++r) {
    d.ranks.push_back({.rank = r,
                       .host = "node" + std::to_string(r / 2),
                       .pid = 4000000 + r,
                       .transports = r == 0 ? std::vector<std::string>{"local", "shm"}
                                            : std::vector<std::string>{"shm"},
                       .memory_limit = (uint64_t{64} << 30) + static_cast<uint64_t>(r)});
  }
  // Ranks 0 and 1 serve over libfabric; rank 2 publishes no endpoint.
  for (int r = 0; r < 2; ++r) {
    d.ranks[r].fabric_provider = "tcp;ofi_rxm";
    d.ranks[r].fabric_address = "0200adb77f00000" + std::to_string(r);
  }
  d.ranks[1].control = "node0:40124";
  d.ranks[1].tiers = {"memory", "nvme:/local/scratch/ddstage"};
  d.ranks[2].lost = true;
  // Two copies of "train": one region per rank each, the second shifted by a rank; one region
  // on a tier, lazily filled.
  StoreDataset train{.name = "train",
                     .index = "/scratch/data sets/train.ddx",
                     .index_fingerprint = 0xfedcba9876543210ull,
                     .replicas = 2};
  const uint64_t cuts[] = {0, 333, 667, 1000};
  for (int c = 0; c < 2; ++c) {
    for (int r = 0; r < 3; ++r) {
      StoreRegion g{.rank = (r + c) % 3,
                    .first = cuts[r],
                    .last = cuts[r + 1],
                    .segment = "/ddstage-a-train-g1-r" + std::to_string((r + c) % 3) + "-i" +
                               std::to_string(c),
                    .bytes = r == 0 ? uint64_t{5} << 32 : 12};
      if ((r + c) % 3 < 2) {
        g.fabric = true;
        g.fabric_key = r == 0 ? ~uint64_t{0} : 7;
        g.fabric_base = r == 0 ? 0x7f0000001000ull : 0;
      }
      train.regions.push_back(g);
    }
  }
  train.regions.back().tier = "nvme";
  train.regions.back().segment = "/local/scratch/ddstage/ddstage-a-train-g1-r0-i1";
  train.regions.back().lazy = true;
  d.datasets.push_back(train);
  d.datasets.push_back(
      {.name = "val: \"quoted\"",
       .index = "/scratch/val.ddx",
       .regions = {{.rank = 2, .first = 0, .last = 7, .segment = "/s2", .bytes = 4096}}});
  return d;
}

void require_same(const StoreDescriptor& a, const StoreDescriptor& b) {
  REQUIRE(a.format_version == b.format_version);
  REQUIRE(a.token == b.token);
  REQUIRE(a.control == b.control);
  REQUIRE(a.started == b.started);
  REQUIRE(a.ranks.size() == b.ranks.size());
  for (std::size_t i = 0; i < a.ranks.size(); ++i) {
    REQUIRE(a.ranks[i].rank == b.ranks[i].rank);
    REQUIRE(a.ranks[i].host == b.ranks[i].host);
    REQUIRE(a.ranks[i].pid == b.ranks[i].pid);
    REQUIRE(a.ranks[i].transports == b.ranks[i].transports);
    REQUIRE(a.ranks[i].memory_limit == b.ranks[i].memory_limit);
    REQUIRE(a.ranks[i].fabric_provider == b.ranks[i].fabric_provider);
    REQUIRE(a.ranks[i].fabric_address == b.ranks[i].fabric_address);
    REQUIRE(a.ranks[i].control == b.ranks[i].control);
    REQUIRE(a.ranks[i].tiers == b.ranks[i].tiers);
    REQUIRE(a.ranks[i].lost == b.ranks[i].lost);
  }
  REQUIRE(a.datasets.size() == b.datasets.size());
  for (std::size_t i = 0; i < a.datasets.size(); ++i) {
    REQUIRE(a.datasets[i].name == b.datasets[i].name);
    REQUIRE(a.datasets[i].index == b.datasets[i].index);
    REQUIRE(a.datasets[i].index_fingerprint == b.datasets[i].index_fingerprint);
    REQUIRE(a.datasets[i].replicas == b.datasets[i].replicas);
    const auto& ga = a.datasets[i].regions;
    const auto& gb = b.datasets[i].regions;
    REQUIRE(ga.size() == gb.size());
    for (std::size_t g = 0; g < ga.size(); ++g) {
      INFO("region " << g);
      REQUIRE(ga[g].rank == gb[g].rank);
      REQUIRE(ga[g].first == gb[g].first);
      REQUIRE(ga[g].last == gb[g].last);
      REQUIRE(ga[g].segment == gb[g].segment);
      REQUIRE(ga[g].bytes == gb[g].bytes);
      REQUIRE(ga[g].tier == gb[g].tier);
      REQUIRE(ga[g].lazy == gb[g].lazy);
      REQUIRE(ga[g].fabric == gb[g].fabric);
      REQUIRE(ga[g].fabric_key == gb[g].fabric_key);
      REQUIRE(ga[g].fabric_base == gb[g].fabric_base);
    }
  }
}

/// Sets the process umask for one scope (tests run on one thread, so nothing else sees it).
class UmaskGuard {
 public:
  explicit UmaskGuard(mode_t mask) : m_old(::umask(mask)) {}
  UmaskGuard(const UmaskGuard&) = delete;
  UmaskGuard& operator=(const UmaskGuard&) = delete;
  ~UmaskGuard() { ::umask(m_old); }

 private:
  mode_t m_old;
};

fs::perms permissions(const fs::path& p) {
  return fs::status(p).permissions() & fs::perms::mask;
}

/// The sample descriptor's text with `from` replaced by `to`, written over DIR/store.yaml.
void write_edited(const fs::path& dir, const std::string& from, const std::string& to) {
  sample_descriptor().write(dir);
  std::string text;
  {
    std::ifstream in(StoreDescriptor::path_in(dir));
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
  std::ofstream(StoreDescriptor::path_in(dir)) << text;
}

}  // namespace

TEST_CASE("a descriptor reads back exactly as written", "[descriptor]") {
  test::TempDir dir;
  const auto written = sample_descriptor();
  written.write(dir.path());
  require_same(StoreDescriptor::read(dir.path()), written);
  // Rewriting replaces the file and leaves no temporary behind.
  auto changed = written;
  changed.datasets.pop_back();
  changed.write(dir.path());
  require_same(StoreDescriptor::read(dir.path()), changed);
  REQUIRE(std::distance(fs::directory_iterator(dir.path()), fs::directory_iterator{}) == 1);
}

TEST_CASE("a descriptor is mode 0600 whatever the umask", "[descriptor]") {
  test::TempDir dir;
  for (mode_t mask : {mode_t{0}, mode_t{022}, mode_t{0277}}) {
    INFO("umask " << std::oct << mask);
    UmaskGuard guard(mask);
    sample_descriptor().write(dir.path());
    REQUIRE(permissions(StoreDescriptor::path_in(dir.path())) ==
            (fs::perms::owner_read | fs::perms::owner_write));
  }
}

TEST_CASE("no descriptor is a usage error naming the directory", "[descriptor]") {
  test::TempDir dir;
  for (const fs::path& where : {dir.path(), dir / "missing"}) {
    try {
      StoreDescriptor::read(where);
      FAIL("read a store that does not exist");
    } catch (const UsageError& e) {
      REQUIRE_THAT(e.what(), Catch::Contains("no store at " + where.string()) &&
                                 Catch::Contains("ddstage serve --store " + where.string()));
    }
  }
}

TEST_CASE("a descriptor from a newer ddstage is refused", "[descriptor]") {
  test::TempDir dir;
  // A newer version may also change keys: the version is what the error must be about.
  write_edited(dir.path(), "format_version: 2\ntoken:", "format_version: 99\nnew_token:");
  REQUIRE_THROWS_MATCHES(
      StoreDescriptor::read(dir.path()), IndexError,
      Catch::Message(
          StoreDescriptor::path_in(dir.path()).string() +
          " was written by a newer ddstage (store format 99; this build reads up to 2)"));
}

TEST_CASE("a damaged descriptor is an index error naming the file and key", "[descriptor]") {
  test::TempDir dir;
  const std::string file = StoreDescriptor::path_in(dir.path()).string();
  auto expect = [&](const std::string& from, const std::string& to, const std::string& what) {
    INFO(from << " -> " << to);
    write_edited(dir.path(), from, to);
    REQUIRE_THROWS_MATCHES(StoreDescriptor::read(dir.path()), IndexError,
                           Catch::Predicate<std::exception>(
                               [&](const std::exception& e) {
                                 return std::string(e.what()).find(file) != std::string::npos &&
                                        std::string(e.what()).find(what) != std::string::npos;
                               },
                               "names " + file + " and " + what));
  };
  expect("control:", "kontrol:", "missing key 'control'");
  expect("host: node1", "hostname: node1", "missing key 'ranks[2].host'");
  expect("pid: 4000002", "pid: many", "key 'ranks[2].pid' has a bad value");
  expect("{rank: 1, first: 333", "{rank: 3, first: 333", "names rank 3 with samples 333..667");
  expect("{rank: 1, first: 333, last: 667", "{rank: 1, first: 700, last: 667",
         "names rank 1 with samples 700..667");
  expect("ranks:\n", "ranks: 3\nold_ranks:\n", "key 'ranks' is not a list");
  expect("fabric_base: 139637976731648", "fabric_base: x",
         "key 'datasets[0].regions[0].fabric_base' has a bad value");
  expect("replicas: 2", "copies: 2", "missing key 'datasets[0].replicas'");
  expect("format_version: 2", "format_version: [2", "is not valid YAML");
  expect("token: ", "token: abc\nold_token: ", "key 'token' is not 32 hex digits");
}

TEST_CASE("dataset lookup names what is loaded", "[descriptor]") {
  auto d = sample_descriptor();
  REQUIRE(d.dataset("train").regions.size() == 6);
  REQUIRE_THROWS_MATCHES(
      d.dataset("test"), UsageError,
      Catch::Message(
          "no dataset 'test' in the store at [::1]:40123 (loaded: train, val: \"quoted\")"));
  d.datasets.clear();
  REQUIRE_THROWS_MATCHES(
      d.dataset("test"), UsageError,
      Catch::Message("no dataset 'test' in the store at [::1]:40123 (none loaded)"));
}

TEST_CASE("tokens are 32 hex digits and differ every time", "[descriptor]") {
  std::set<std::string> seen;
  for (int i = 0; i < 16; ++i) {
    const auto token = random_token();
    REQUIRE(token.size() == 32);
    REQUIRE(token.find_first_not_of("0123456789abcdef") == std::string::npos);
    seen.insert(token);
  }
  REQUIRE(seen.size() == 16);
}

namespace {

/// The UsageError reading DIR's descriptor gives, which must name `path` and `what`.
void require_refused(const fs::path& dir, const fs::path& path, const std::string& what) {
  try {
    StoreDescriptor::read(dir);
    FAIL("read an untrusted descriptor");
  } catch (const UsageError& e) {
    REQUIRE_THAT(e.what(), Catch::Contains(path.string()) && Catch::Contains(what));
  }
}

/// Only root can give a file to another user: elsewhere the cases that need it are skipped,
/// visibly.
bool can_chown() {
  if (::geteuid() == 0) return true;
  WARN("not root: cases that chown to uid 65534 are skipped");
  return false;
}

}  // namespace

TEST_CASE("a store directory or descriptor others can write is refused", "[descriptor][trust]") {
  test::TempDir dir;
  sample_descriptor().write(dir.path());
  const auto file = StoreDescriptor::path_in(dir.path());
  fs::permissions(dir.path(), fs::perms::all);
  require_refused(dir.path(), dir.path(), "writable by its group and other users (mode 0777)");
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_all);
  require_refused(dir.path(), dir.path(), "writable by its group (mode 0770)");
  fs::permissions(dir.path(), fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec);
  for (auto extra : {fs::perms::group_write, fs::perms::others_write}) {
    fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write | extra);
    require_refused(dir.path(), file, "chmod go-w");
  }
  fs::permissions(file, fs::perms::owner_read | fs::perms::owner_write | fs::perms::others_read);
  CHECK_NOTHROW(StoreDescriptor::read(dir.path()));  // readable by others is the user's choice
}

TEST_CASE("a store directory or descriptor owned by another user is refused, also for root",
          "[descriptor][trust]") {
  if (!can_chown()) return;
  test::TempDir dir;
  sample_descriptor().write(dir.path());
  const auto file = StoreDescriptor::path_in(dir.path());
  REQUIRE(::chown(file.c_str(), test::nobody, test::nobody) == 0);
  require_refused(dir.path(), file,
                  "is owned by uid 65534, not you (uid " + std::to_string(::geteuid()) + ")");
  REQUIRE(::chown(file.c_str(), ::geteuid(), ::getegid()) == 0);
  REQUIRE(::chown(dir.path().c_str(), test::nobody, test::nobody) == 0);
  require_refused(dir.path(), dir.path(), "is owned by uid 65534");
  REQUIRE_THROWS_WITH(StoreDescriptor::prepare_directory(dir.path()),
                      Catch::Contains("is owned by uid 65534"));
}

TEST_CASE("store.yaml must be a regular file, not a link or a FIFO", "[descriptor][trust]") {
  test::TempDir dir;
  const auto store = dir / "store";
  const auto elsewhere = dir / "elsewhere";
  fs::create_directories(store);
  fs::create_directories(elsewhere);
  sample_descriptor().write(elsewhere);
  fs::create_symlink(StoreDescriptor::path_in(elsewhere), StoreDescriptor::path_in(store));
  require_refused(store, StoreDescriptor::path_in(store), "is a symbolic link");
  fs::remove(StoreDescriptor::path_in(store));
  // A FIFO with no writer would block a plain open forever.
  REQUIRE(::mkfifo(StoreDescriptor::path_in(store).c_str(), 0600) == 0);
  require_refused(store, StoreDescriptor::path_in(store), "is not a regular file");
  // A link to the store directory is the user's choice of path: what it leads to is checked.
  fs::create_symlink(elsewhere, dir / "link");
  CHECK(StoreDescriptor::read(dir / "link").token == StoreDescriptor::read(elsewhere).token);
}

TEST_CASE("serve's directory is created 0700 whatever the umask, parents too",
          "[descriptor][trust]") {
  test::TempDir dir;
  const auto owner_only = fs::perms::owner_all;
  for (mode_t mask : {mode_t{0}, mode_t{022}, mode_t{0277}}) {
    INFO("umask " << std::oct << mask);
    const auto store = dir / ("u" + std::to_string(mask)) / "jobs" / "store";
    {
      UmaskGuard guard(mask);
      StoreDescriptor::prepare_directory(store);
    }
    CHECK(permissions(store) == owner_only);
    CHECK(permissions(store.parent_path()) == owner_only);
    CHECK(permissions(store.parent_path().parent_path()) == owner_only);
    CHECK_NOTHROW(StoreDescriptor::prepare_directory(store));  // an existing, private one is fine
  }
  const auto shared = dir / "shared";
  fs::create_directories(shared);
  fs::permissions(shared, fs::perms::all);
  REQUIRE_THROWS_AS(StoreDescriptor::prepare_directory(shared), UsageError);
  CHECK(permissions(shared) == fs::perms::all);  // refused, not silently changed
}

TEST_CASE("store.yaml is parsed within limits", "[descriptor][yaml]") {
  test::TempDir dir;
  const std::string file = StoreDescriptor::path_in(dir.path()).string();
  auto expect = [&](const std::string& text, const std::string& what) {
    sample_descriptor().write(dir.path());
    std::ofstream(file, std::ios::trunc) << text;
    REQUIRE_THROWS_MATCHES(StoreDescriptor::read(dir.path()), IndexError,
                           Catch::Predicate<std::exception>(
                               [&](const std::exception& e) {
                                 const std::string w = e.what();
                                 return w.find(file) != std::string::npos &&
                                        w.find(what) != std::string::npos;
                               },
                               "names " + file + " and " + what));
  };
  expect("format_version: 1\ntoken: &t [*t]\n", "aliases are not allowed (line 2)");
  expect(std::string(5000, '[') + std::string(5000, ']'), "nested deeper than 32 levels");
  expect("# " + std::string(std::size_t{16} << 20, 'x') + "\n", "larger than the 16 MiB allowed");
}
