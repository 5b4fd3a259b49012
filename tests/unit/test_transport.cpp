// The transport registry (names, probes, the errors for unknown or unavailable transports, the
// factory) and the InFlight guard's promise: every way out of a batch quiesces what it posted.
#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "ddstage/config.hpp"
#include "ddstage/settings.hpp"
#include "ddstage/tool/transport_info.hpp"
#include "transport/copy_transport.hpp"
#include "transport/transport_registry.hpp"

using namespace ddstage;
using namespace ddstage::detail;

namespace {

constexpr TransportId client_transports[] = {TransportId::shm, TransportId::fabric};
constexpr TransportId store_transports[] = {TransportId::mpi, TransportId::fabric};

/// A real CopyTransport that also counts what the guard asked of it, and can be told to fail
/// its wait as a transport whose peer died does.
class CountingTransport final : public Transport {
 public:
  explicit CountingTransport(const std::vector<std::span<const std::byte>>& regions)
      : m_copy("shm", regions) {}
  std::string_view name() const noexcept override { return m_copy.name(); }
  void post(std::span<const ReadOp> reads) override {
    ++posts;
    m_copy.post(reads);
  }
  void wait() override {
    ++waits;
    if (fail_wait) throw TransportError("peer lost", {.rank = 0}, false);
    m_copy.wait();
  }
  void quiesce() noexcept override { ++quiesces; }

  int posts = 0;
  int waits = 0;
  int quiesces = 0;
  bool fail_wait = false;

 private:
  CopyTransport m_copy;
};

}  // namespace

TEST_CASE("transport registry: one entry per name, in a fixed order", "[transport]") {
  std::vector<std::string_view> names;
  for (const TransportEntry& e : transports()) {
    names.push_back(e.name);
    CHECK(&transport_entry(e.id) == &e);
    CHECK(!e.description.empty());
  }
  CHECK(names == std::vector<std::string_view>{"shm", "mpi", "fabric"});
  CHECK(transport_entry(TransportId::shm).probe().available);
  CHECK(transport_entry(TransportId::mpi).probe().available == bool(DDSTAGE_HAVE_MPI));
  const TransportProbe fabric = transport_entry(TransportId::fabric).probe();
  if (!DDSTAGE_HAVE_FABRIC) CHECK_THAT(fabric.why_not, Catch::Contains("built without libfabric"));
  CHECK(fabric.available == fabric.why_not.empty());
}

TEST_CASE("transport registry: describe_transports says what the probes say", "[transport]") {
  const auto rows = describe_transports();
  REQUIRE(rows.size() == transports().size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const TransportProbe probe = transports()[i].probe();
    CHECK(rows[i].name == transports()[i].name);
    CHECK(rows[i].available == probe.available);
    CHECK(rows[i].why_not == probe.why_not);
  }
}

TEST_CASE("transport registry: parse_transport names the option and what it allows",
          "[transport]") {
  CHECK(parse_transport("auto", client_transports, true, "transport") == std::nullopt);
  CHECK(parse_transport("shm", client_transports, true, "transport") == TransportId::shm);
  CHECK_THROWS_WITH(parse_transport("rdma", client_transports, true, "transport"),
                    "transport must be auto, shm or fabric, not 'rdma'");
  // A registry name the option does not take is refused like an unknown one.
  CHECK_THROWS_WITH(parse_transport("shm", store_transports, false, "StoreOptions::transport"),
                    "StoreOptions::transport must be mpi or fabric, not 'shm'");
  CHECK_THROWS_WITH(parse_transport("auto", store_transports, false, "StoreOptions::transport"),
                    "StoreOptions::transport must be mpi or fabric, not 'auto'");
  CHECK_THROWS_AS(parse_transport("", client_transports, true, "transport"), UsageError);
  const TransportProbe fabric = transport_entry(TransportId::fabric).probe();
  if (fabric.available) {
    CHECK(parse_transport("fabric", store_transports, false, "--transport") == TransportId::fabric);
  } else {
    CHECK_THROWS_WITH(parse_transport("fabric", store_transports, false, "--transport"),
                      "--transport fabric: " + fabric.why_not);
  }
}

TEST_CASE("transport registry: parse_transport_name checks the name alone, availability apart",
          "[transport]") {
  // serve checks the name before MPI_Init and availability after it: an unavailable fabric
  // still parses, and only check_transport_available refuses it, with the probe's reason.
  CHECK(parse_transport_name("fabric", store_transports, false, "serve --transport") ==
        TransportId::fabric);
  CHECK(parse_transport_name("auto", client_transports, true, "serve --transport") == std::nullopt);
  CHECK_THROWS_WITH(parse_transport_name("mpi", client_transports, true, "serve --transport"),
                    "serve --transport must be auto, shm or fabric, not 'mpi'");
  CHECK_NOTHROW(check_transport_available(TransportId::shm, "serve --transport"));
  const TransportProbe fabric = transport_entry(TransportId::fabric).probe();
  if (fabric.available) {
    CHECK_NOTHROW(check_transport_available(TransportId::fabric, "serve --transport"));
  } else {
    CHECK_THROWS_WITH(check_transport_available(TransportId::fabric, "serve --transport"),
                      "serve --transport fabric: " + fabric.why_not);
  }
}

TEST_CASE("transport registry: the transport setting offers auto and registry names only",
          "[transport]") {
  const auto& table = setting_table();
  const auto it = std::find_if(table.begin(), table.end(),
                               [](const SettingDef& d) { return d.key == "transport"; });
  REQUIRE(it != table.end());
  std::string choices(it->choices);
  for (std::size_t start = 0, bar; start <= choices.size(); start = bar + 1) {
    bar = std::min(choices.find('|', start), choices.size());
    const std::string name = choices.substr(start, bar - start);
    const bool known =
        name == "auto" || std::any_of(transports().begin(), transports().end(),
                                      [&](const TransportEntry& e) { return e.name == name; });
    CHECK(known);
    CHECK_THAT(std::string(it->help), Catch::Contains(name));
  }
}

TEST_CASE("transport registry: open_transport makes the shm transport over mapped regions",
          "[transport]") {
  std::vector<std::byte> a(256);
  std::vector<std::byte> b(256);
  std::iota(reinterpret_cast<unsigned char*>(a.data()),
            reinterpret_cast<unsigned char*>(a.data() + a.size()), 0);
  std::fill(b.begin(), b.end(), std::byte{7});
  const TransportTargets targets{.mapped = {a, b}};
  const auto t = open_transport(TransportId::shm, targets, Settings());
  CHECK(t->name() == "shm");
  std::vector<std::byte> dest(20);
  const ReadOp ops[] = {{10, 10, dest.data(), 0}, {0, 10, dest.data() + 10, 1}};
  InFlight batch(*t);
  batch.post(ops);
  batch.complete();
  CHECK(dest[0] == std::byte{10});
  CHECK(dest[9] == std::byte{19});
  CHECK(dest[10] == std::byte{7});
}

TEST_CASE("InFlight: complete() waits; leaving without it quiesces", "[transport]") {
  std::vector<std::byte> region(64, std::byte{1});
  CountingTransport t({region});
  std::vector<std::byte> dest(64);
  const ReadOp op{0, 64, dest.data(), 0};
  {
    InFlight batch(t);
    batch.post({&op, 1});
    batch.complete();
  }
  CHECK((t.posts == 1 && t.waits == 1 && t.quiesces == 0));
  {
    InFlight nothing(t);
    nothing.post({});
    nothing.complete();
  }
  CHECK((t.posts == 1 && t.waits == 1 && t.quiesces == 0));
  try {
    InFlight batch(t);
    batch.post({&op, 1});
    throw std::runtime_error("the batch fails between post and complete");
  } catch (const std::runtime_error&) {
  }
  CHECK((t.posts == 2 && t.waits == 1 && t.quiesces == 1));
  t.fail_wait = true;
  try {
    InFlight batch(t);
    batch.post({&op, 1});
    batch.complete();
    FAIL("wait did not throw");
  } catch (const TransportError& e) {
    CHECK(!e.may_be_withdrawn());
  }
  CHECK((t.posts == 3 && t.waits == 2 && t.quiesces == 2));
}
