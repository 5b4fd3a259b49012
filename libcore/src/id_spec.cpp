#include "ddstage/id_spec.hpp"

#include <charconv>
#include <fstream>
#include <string>

#include "ddstage/error.hpp"

namespace ddstage {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

uint64_t parse_id(std::string_view token, std::string_view where) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
  if (token.empty() || ec != std::errc() || end != token.data() + token.size()) {
    throw UsageError("bad id '" + std::string(token) + "' in --ids " + std::string(where) +
                     " (expected ids and ranges like 0,7,10-19)");
  }
  return v;
}

void check_limit(uint64_t id, uint64_t limit) {
  if (id >= limit) {
    throw UsageError("id " + std::to_string(id) + " is out of range (the dataset has " + std::to_string(limit) +
                     " samples: 0-" + std::to_string(limit - 1) + ")");
  }
}

/// One comma-separated item: an id or an inclusive range "a-b".
void parse_item(std::string_view item, uint64_t limit, std::string_view where, std::vector<uint64_t>& out) {
  item = trim(item);
  auto dash = item.find('-');
  if (dash == std::string_view::npos) {
    uint64_t id = parse_id(item, where);
    check_limit(id, limit);
    out.push_back(id);
    return;
  }
  uint64_t lo = parse_id(trim(item.substr(0, dash)), where);
  uint64_t hi = parse_id(trim(item.substr(dash + 1)), where);
  if (hi < lo) throw UsageError("bad range '" + std::string(item) + "' in --ids (end before start)");
  check_limit(hi, limit);
  for (uint64_t id = lo; id <= hi; ++id) out.push_back(id);
}

}  // namespace

std::vector<uint64_t> parse_ids(std::string_view spec, uint64_t limit) {
  std::vector<uint64_t> ids;
  if (!spec.empty() && spec.front() == '@') {
    std::string path(spec.substr(1));
    std::ifstream in(path);
    if (!in) throw UsageError("cannot read id file " + path);
    std::string line;
    for (uint64_t n = 1; std::getline(in, line); ++n) {
      auto item = trim(line);
      if (item.empty() || item.front() == '#') continue;
      parse_item(item, limit, path + ":" + std::to_string(n), ids);
    }
  } else {
    std::size_t start = 0;
    while (start <= spec.size()) {
      auto comma = spec.find(',', start);
      auto item = spec.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
      parse_item(item, limit, "'" + std::string(spec) + "'", ids);
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
  }
  if (ids.empty()) throw UsageError("--ids " + std::string(spec) + " names no sample");
  return ids;
}

}  // namespace ddstage
