// The stage request and its reply: ids travel as sorted ranges and read back as asked, an
// ill-formed or oversized id list is refused before it is expanded, and a batch of 4096
// random ids is a small frame.
#include <catch2/catch.hpp>
#include <random>
#include <string>
#include <vector>

#include "control/control_frame.hpp"
#include "control/stage_messages.hpp"
#include "ddstage/error.hpp"

using namespace ddstage;
using detail::Message;

namespace {

/// request as the owner reads it off the wire.
detail::StageCommand over_the_wire(const Message& request) {
  const std::string frame = detail::encode_frame(request, std::string(detail::token_chars, 'a'));
  return detail::stage_command_of(
      detail::decode_body(frame.substr(detail::frame_header_bytes), "test"));
}

Message with_ids(const std::string& ids) {
  Message m = detail::stage_request("d", "/s0", {});
  m["ids"] = ids;
  return m;
}

}  // namespace

TEST_CASE("a stage request reads back sorted and without repeats", "[stage][messages]") {
  const std::vector<uint64_t> ids{9, 5, 1, 2, 3, 100, 9, 4, 18446744073709551615ull};
  const Message request = detail::stage_request("train", "/s7", ids);
  CHECK(request["ids"].as<std::string>() == "1-5,9,100,18446744073709551615");
  const auto command = over_the_wire(request);
  CHECK(command.dataset == "train");
  CHECK(command.segment == "/s7");
  CHECK(command.ids == std::vector<uint64_t>{1, 2, 3, 4, 5, 9, 100, 18446744073709551615ull});

  CHECK(over_the_wire(detail::stage_request("train", "/s0", {})).ids.empty());
  CHECK(over_the_wire(with_ids("12")).ids == std::vector<uint64_t>{12});
}

TEST_CASE("an ill-formed stage request is refused", "[stage][messages]") {
  for (const char* ids : {"3-1", "1,,2", "1,", ",1", "a", "2,1", "1-3,3", "1-2-3", "1;2", "-1",
                          "1 ,2", "99999999999999999999"}) {
    INFO(ids);
    CHECK_THROWS_AS(over_the_wire(with_ids(ids)), UsageError);
  }
  const std::string too_many = "0-" + std::to_string(detail::max_stage_ids);
  CHECK_THROWS_WITH(over_the_wire(with_ids(too_many)), Catch::Contains("more than"));
  CHECK(over_the_wire(with_ids("0-" + std::to_string(detail::max_stage_ids - 1))).ids.size() ==
        detail::max_stage_ids);
  Message no_region = detail::stage_request("d", "/s0", {});
  no_region.remove("segment");
  CHECK_THROWS_AS(detail::stage_command_of(no_region), UsageError);
}

TEST_CASE("a batch of 4096 random ids is a small stage request", "[stage][messages]") {
  std::mt19937_64 random(4096);
  std::uniform_int_distribution<uint64_t> id(0, 10'000'000 - 1);
  std::vector<uint64_t> ids(4096);
  for (auto& i : ids) i = id(random);
  const Message request = detail::stage_request("train", "/s0", ids);
  const std::string frame = detail::encode_frame(request, std::string(detail::token_chars, 'a'));
  CHECK(frame.size() < 40'000);  // ~8 digits and a comma an id
  CHECK(frame.size() * 100 < detail::max_message_bytes);
  auto sorted = ids;
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  CHECK(over_the_wire(request).ids == sorted);
}

TEST_CASE("a stage reply reads back", "[stage][messages]") {
  const auto reply = detail::stage_reply_of(detail::stage_reply({true, 12, 34}));
  CHECK(reply.complete);
  CHECK(reply.staged == 12);
  CHECK(reply.origin_reads == 34);
  Message partial = detail::stage_reply({false, 1, 2});
  partial.remove("staged");
  CHECK_THROWS_AS(detail::stage_reply_of(partial), Error);
}
