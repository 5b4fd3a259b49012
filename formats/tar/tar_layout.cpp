#include "tar_layout.hpp"

#include <fmt/format.h>
#include <algorithm>
#include <cctype>
#include <map>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "ddstage/error.hpp"

namespace ddstage::formats {
namespace {

[[noreturn]] void refuse(const TarShard& shard, const std::string& why) {
  throw UsageError(fmt::format("{}: {}", shard.path, why), {.file = shard.path});
}

/// WebDataset's split (its regex ^((?:.*/|)[^.]+)[.]([^/]*)$): the key ends at the first dot of
/// the basename, the extension is the rest.
std::pair<std::string_view, std::string_view> split_key(std::string_view name) {
  const auto slash = name.rfind('/');
  const auto base = slash == std::string_view::npos ? 0 : slash + 1;
  const auto dot = name.find('.', base);
  if (dot == std::string_view::npos || dot == base || dot + 1 == name.size()) return {};
  return {name.substr(0, dot), name.substr(dot + 1)};
}

/// A key's members by field id, in archive order.
struct Group {
  uint32_t shard = 0;
  uint32_t first_member = 0;
  uint32_t key_length = 0;
  std::vector<std::pair<uint32_t, uint32_t>> fields;  // (field id, member)
};

}  // namespace

TarLayout member_layout(const std::vector<TarShard>& shards) {
  TarLayout layout{.data_fields = {"data"}, .label_field = "name"};
  for (uint32_t s = 0; s < shards.size(); ++s) {
    for (uint32_t m = 0; m < shards[s].members.size(); ++m) {
      const auto length = shards[s].members[m].name.size();
      layout.samples.push_back(
          {.shard = s, .label_member = m, .label_length = static_cast<uint32_t>(length)});
      layout.members.push_back(m);
    }
  }
  return layout;
}

TarLayout webdataset_layout(const std::vector<TarShard>& shards) {
  std::unordered_map<std::string, uint32_t> field_ids;  // extension -> id, in first-seen order
  std::vector<Group> groups;
  for (uint32_t s = 0; s < shards.size(); ++s) {
    const auto& shard = shards[s];
    std::unordered_map<std::string_view, uint32_t> seen;  // key -> member that started it
    for (uint32_t m = 0; m < shard.members.size(); ++m) {
      const auto& name = shard.members[m].name;
      const auto [key, ext] = split_key(name);
      if (key.empty()) {
        refuse(shard, fmt::format("member '{}' has no extension after its key (WebDataset names "
                                  "members KEY.EXTENSION, e.g. 000123.jpg)",
                                  name));
      }
      std::string field(ext);
      std::transform(field.begin(), field.end(), field.begin(),
                     [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
      if (field == "__key__")
        refuse(shard, fmt::format("member '{}': extension '__key__' is the "
                                  "key field's name",
                                  name));
      const bool same_key = !groups.empty() && groups.back().shard == s &&
                            std::string_view(shard.members[groups.back().first_member].name)
                                    .substr(0, groups.back().key_length) == key;
      if (!same_key) {
        if (const auto [it, fresh] = seen.emplace(key, m); !fresh) {
          refuse(shard, fmt::format("key '{}' comes back at member '{}' after other keys (first "
                                    "at member '{}'); WebDataset groups consecutive members only",
                                    key, name, shard.members[it->second].name));
        }
        groups.push_back(
            {.shard = s, .first_member = m, .key_length = static_cast<uint32_t>(key.size())});
      }
      const auto id =
          field_ids.emplace(field, static_cast<uint32_t>(field_ids.size())).first->second;
      auto& fields = groups.back().fields;
      if (std::any_of(fields.begin(), fields.end(), [id](auto f) { return f.first == id; })) {
        refuse(shard, fmt::format("key '{}' has two members with extension '{}' (the second is "
                                  "'{}')",
                                  key, field, name));
      }
      fields.emplace_back(id, m);
    }
  }

  // Fields sorted by name, so the layout does not depend on the order a writer used.
  std::map<std::string, uint32_t> sorted(field_ids.begin(), field_ids.end());
  TarLayout layout{.label_field = "__key__"};
  std::vector<uint32_t> column(field_ids.size());
  for (const auto& [name, id] : sorted) {
    column[id] = static_cast<uint32_t>(layout.data_fields.size());
    layout.data_fields.push_back(name);
  }
  const auto width = layout.data_fields.size();
  constexpr auto missing = UINT32_MAX;
  layout.members.assign(groups.size() * width, missing);
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const auto& group = groups[g];
    for (const auto& [id, member] : group.fields) layout.members[g * width + column[id]] = member;
    for (std::size_t f = 0; f < width; ++f) {
      if (layout.members[g * width + f] != missing) continue;
      const auto& shard = shards[group.shard];
      refuse(shard, fmt::format("key '{}' has no '{}' member, which other keys have; every "
                                "sample needs every field",
                                shard.members[group.first_member].name.substr(0, group.key_length),
                                layout.data_fields[f]));
    }
    layout.samples.push_back({.shard = group.shard,
                              .label_member = group.first_member,
                              .label_length = group.key_length});
  }
  return layout;
}

}  // namespace ddstage::formats
