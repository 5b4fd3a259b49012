// The control messages and the error records they carry: each message reads back as written,
// a refusal comes back as the class of error the server threw, and an ill-formed request is
// refused before any rank sees it.
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstring>
#include <string>

#include "control/control_messages.hpp"
#include "ddstage/error.hpp"
#include "error_record.hpp"

using namespace ddstage;
using detail::ErrorRecord;
using detail::Message;

namespace {

/// The error a reply carries, thrown as the client throws it.
void raise_reply(const Message& reply) {
  const auto failure = detail::failure_of(reply);
  REQUIRE(failure);
  failure->raise();
}

}  // namespace

TEST_CASE("a refusal keeps the class and kind of the server's error", "[control][messages]") {
  const auto io = detail::error_reply(ErrorRecord::of(IoError("open /x", ENOSPC)));
  try {
    raise_reply(io);
    FAIL("no exception");
  } catch (const IoError& e) {
    CHECK(e.native_code() == ENOSPC);
    CHECK(e.kind() == ErrorKind::runtime);
    CHECK(std::string(e.what()) == std::string("open /x: ") + std::strerror(ENOSPC));
  }
  CHECK_THROWS_AS(raise_reply(detail::error_reply(ErrorRecord::of(IndexError("bad")))), IndexError);
  CHECK_THROWS_AS(raise_reply(detail::error_reply(ErrorRecord::of(ChecksumError("bad")))),
                  ChecksumError);
  CHECK_THROWS_AS(raise_reply(detail::error_reply(ErrorRecord::of(StaleError("old")))), StaleError);
  CHECK_THROWS_AS(raise_reply(detail::error_reply(ErrorRecord::of(UsageError("no")))), UsageError);
  CHECK_THROWS_WITH(
      raise_reply(detail::error_reply(ErrorRecord::of(UsageError("no", {.rank = 2})))),
      "no (rank 2)");
}

TEST_CASE("a refusal from a server without classes keeps its kind", "[control][messages]") {
  Message reply;
  reply["ok"] = false;
  reply["error"] = "nope";
  for (const auto kind : {ErrorKind::usage, ErrorKind::runtime}) {
    reply["kind"] = kind == ErrorKind::usage ? "usage" : "runtime";
    try {
      raise_reply(reply);
      FAIL("no exception");
    } catch (const Error& e) {
      CHECK(e.kind() == kind);
      CHECK(std::string(e.what()) == "nope");
    }
  }
  CHECK_FALSE(detail::failure_of(detail::ok_reply()));
}

TEST_CASE("a load request reads back as the command every rank executes", "[control][messages]") {
  const detail::LoadCommand load{.index = "/d/x.ddx",
                                 .name = "x",
                                 .verify = true,
                                 .mem_limit = 1 << 20,
                                 .streams = 2,
                                 .progress = true};
  const auto command = detail::command_of(detail::load_request(load));
  CHECK(command.op == "load");
  CHECK(command.load.index == "/d/x.ddx");
  CHECK(command.load.name == "x");
  CHECK(command.load.verify);
  CHECK_FALSE(command.load.replace);
  CHECK(command.load.mem_limit == 1 << 20);
  CHECK(command.load.streams == 2);
  CHECK(command.load.progress);
  CHECK_FALSE(command.load.lazy);
  // Left out: the server's default.
  CHECK(detail::command_of(detail::load_request({.index = "/d/x.ddx"})).load.streams > 0);
  // lazy and prefetch go on the wire only when asked: a full load's request stays as it was.
  CHECK_FALSE(detail::load_request(load)["lazy"]);
  const auto lazy = detail::command_of(
      detail::load_request({.index = "/d/x.ddx", .lazy = true, .prefetch = true}));
  CHECK(lazy.load.lazy);
  CHECK(lazy.load.prefetch);
  CHECK(detail::command_of(detail::unload_request("x")).dataset == "x");
}

TEST_CASE("ill-formed requests are usage errors", "[control][messages]") {
  Message no_index;
  no_index["op"] = "load";
  CHECK_THROWS_WITH(detail::command_of(no_index), "load request without an index");
  Message unknown;
  unknown["op"] = "explode";
  CHECK_THROWS_AS(detail::command_of(unknown), UsageError);
  CHECK_THROWS_AS(detail::command_of(Message()), UsageError);
  CHECK_THROWS_AS(detail::command_of(detail::load_request({.index = "/d", .streams = 100000})),
                  UsageError);
  CHECK(detail::heartbeat_rank(detail::heartbeat_request(3)) == 3);
  CHECK(detail::heartbeat_rank(unknown) == -1);
}

TEST_CASE("status and stop replies read back, leniently", "[control][messages]") {
  const auto status = detail::status_of(detail::status_reply({{10, 20}, {0, 1.5}, "load"}));
  CHECK(status.memory_used == std::vector<uint64_t>{10, 20});
  CHECK(status.last_heard == std::vector<double>{0, 1.5});
  CHECK(status.busy == "load");
  const auto stop = detail::stop_result_of(
      detail::stop_reply({.stopped = {0}, .unreachable = {{1, "n1", 4.5}}}), {0, 1});
  CHECK(stop.stopped == std::vector<int>{0});
  REQUIRE(stop.unreachable.size() == 1);
  CHECK(stop.unreachable[0].host == "n1");
  // A server from before the rank lists stopped them all.
  CHECK(detail::stop_result_of(detail::ok_reply(), {0, 1, 2}).stopped == std::vector<int>{0, 1, 2});
  const auto progress = detail::progress_of(detail::progress_message({5, 10, 2}));
  CHECK(progress.bytes_done == 5);
  CHECK(detail::is_interim(detail::progress_message({})));
  CHECK_FALSE(detail::is_interim(detail::ok_reply()));
}

TEST_CASE("a malformed entry of a per-rank list keeps the ranks in place", "[control][messages]") {
  // StoreControl::status() reads these lists by rank: skipping rank 1's bad entry would give
  // rank 1 rank 2's numbers.
  auto reply = detail::ok_reply();
  reply["memory_used"].push_back(10);
  reply["memory_used"].push_back("lots");
  reply["memory_used"].push_back(30);
  YAML::Node odd;
  odd["not"] = "a number";
  reply["last_heard"].push_back(0.5);
  reply["last_heard"].push_back(odd);
  reply["last_heard"].push_back(2.5);
  const auto status = detail::status_of(reply);
  CHECK(status.memory_used == std::vector<uint64_t>{10, 0, 30});
  CHECK(status.last_heard == std::vector<double>{0.5, -1, 2.5});
}

TEST_CASE("replicas and repairs read back as the commands rank 0 executes", "[control][messages]") {
  CHECK(detail::command_of(detail::load_request({.index = "/d/x.ddx", .replicas = 3}))
            .load.replicas == 3);
  CHECK(detail::command_of(detail::load_request({.index = "/d/x.ddx"})).load.replicas == 1);
  CHECK_THROWS_AS(detail::command_of(detail::load_request({.index = "/d", .replicas = -1})),
                  UsageError);
  const auto repair =
      detail::command_of(detail::repair_request({.verify = true, .allow_stale = true}, "x"));
  CHECK(repair.op == "repair");
  CHECK(repair.dataset == "x");
  CHECK(repair.load.verify);
  CHECK(repair.load.allow_stale);
  CHECK(detail::command_of(detail::repair_request({}, "")).dataset.empty());
  const std::vector<LoadResult> done{{.name = "x", .samples = 7, .bytes = 70, .warning = "w"}};
  const auto back = detail::repair_results_of(detail::repair_reply(done));
  REQUIRE(back.size() == 1);
  CHECK(back[0].name == "x");
  CHECK(back[0].samples == 7);
  CHECK(back[0].warning == "w");
  CHECK(detail::repair_results_of(detail::repair_reply({})).empty());
}

TEST_CASE("a rank's part and its reply read back whole; a client's request is no part",
          "[control][messages]") {
  const detail::PartCommand part{.op = "fill",
                                 .load = {.index = "/d/x.ddx", .verify = true, .streams = 3},
                                 .dataset = "x",
                                 .regions = {{0, 10}, {20, 35}},
                                 .add = true,
                                 .fingerprint = 0xfeedbeefcafe};
  const auto read = detail::part_command_of(detail::part_request(part));
  CHECK(read.op == "fill");
  CHECK(read.load.index == "/d/x.ddx");
  CHECK(read.load.verify);
  CHECK(read.load.streams == 3);
  CHECK(read.dataset == "x");
  REQUIRE(read.regions.size() == 2);
  CHECK(read.regions[1].first == 20);
  CHECK(read.regions[1].last == 35);
  CHECK(read.add);
  CHECK(read.fingerprint == 0xfeedbeefcafe);
  const detail::PartReply reply{.memory_used = 4096,
                                .regions = {{.span = {0, 10},
                                             .bytes = 512,
                                             .segment = "/ddstage-a-x-g1-r2",
                                             .fabric = detail::PublishedFabric{7, 0x1000}}}};
  const auto back = detail::part_reply_of(detail::part_reply(reply));
  CHECK(back.memory_used == 4096);
  REQUIRE(back.regions.size() == 1);
  CHECK(back.regions[0].segment == "/ddstage-a-x-g1-r2");
  REQUIRE(back.regions[0].fabric);
  CHECK(back.regions[0].fabric->key == 7);
  CHECK_THROWS_AS(detail::part_command_of(detail::stop_request()), UsageError);
  Message forged = detail::part_request(part);
  forged["part"] = "zz";
  CHECK_THROWS_AS(detail::part_command_of(forged), UsageError);
  forged["part"] = "00";
  CHECK_THROWS_AS(detail::part_command_of(forged), UsageError);
  CHECK_THROWS_AS(detail::part_reply_of(detail::ok_reply()), Error);
}
