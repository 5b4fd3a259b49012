#include "ddstage/tool/id_spec.hpp"

#include <charconv>
#include <fstream>
#include <string>

#include "ddstage/error.hpp"

namespace ddstage {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r'))
    s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
    s.remove_suffix(1);
  return s;
}

/// A token as a message quotes it: cut short, since a spec can be megabytes of ids.
std::string quoted(std::string_view token) {
  constexpr std::size_t max_shown = 64;
  return "'" + std::string(token.substr(0, max_shown)) + (token.size() > max_shown ? "...'" : "'");
}

/// Where an item is, for messages: "item N" of the spec, or "FILE:LINE". Built only for an
/// error: building it per item made a long spec quadratic.
struct Where {
  std::string_view file;  ///< empty for an inline spec
  uint64_t number = 0;

  std::string str() const {
    return "--ids " + (file.empty() ? "item " : std::string(file) + ":") + std::to_string(number);
  }
};

uint64_t parse_id(std::string_view token, const Where& where) {
  uint64_t v = 0;
  auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), v);
  if (token.empty() || ec != std::errc() || end != token.data() + token.size()) {
    throw UsageError("bad id " + quoted(token) + " in " + where.str() +
                     " (expected ids and ranges like 0,7,10-19)");
  }
  return v;
}

void check_limit(uint64_t id, uint64_t limit) {
  if (id < limit) return;
  const std::string has = limit == 0
                              ? "no samples"
                              : std::to_string(limit) + " samples: 0-" + std::to_string(limit - 1);
  throw UsageError("id " + std::to_string(id) + " is out of range (the dataset has " + has + ")");
}

/// One comma-separated item: an id or an inclusive range "a-b".
void parse_item(std::string_view item, uint64_t limit, const Where& where,
                std::vector<uint64_t>& out) {
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
  if (hi < lo)
    throw UsageError("bad range " + quoted(item) + " in " + where.str() + " (end before start)");
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
      parse_item(item, limit, {.file = path, .number = n}, ids);
    }
  } else {
    std::size_t start = 0;
    for (uint64_t n = 1; start <= spec.size(); ++n) {
      auto comma = spec.find(',', start);
      auto item = spec.substr(
          start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
      parse_item(item, limit, {.number = n}, ids);
      if (comma == std::string_view::npos) break;
      start = comma + 1;
    }
  }
  if (ids.empty()) throw UsageError("--ids " + quoted(spec) + " names no sample");
  return ids;
}

}  // namespace ddstage
