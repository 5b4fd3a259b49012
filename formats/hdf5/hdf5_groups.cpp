// Groups mode (--groups PATTERN): each matching group is a sample, its datasets the fields.
// A metadata pass records where every (group, field) lives before define(); the data pass
// then preads contiguous data in file order (kept in place, or copied under --pack) and
// decodes the rest group by group.
#include <fcntl.h>
#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>

#include "ddstage/error.hpp"
#include "hdf5_dataset.hpp"
#include "hdf5_links.hpp"
#include "hdf5_modes.hpp"
#include "hdf5_types.hpp"

namespace ddstage::formats::detail {
namespace {

constexpr uint64_t decode_marker = std::numeric_limits<uint64_t>::max();
// In-place datasets of consecutive groups are separated by small object headers; reading
// across such gaps is cheaper than another pread.
constexpr uint64_t max_read_gap = 256 << 10;

/// Where one (group, field) dataset's bytes are: an offset in data file `file` (read with pread,
/// then kept in place or, under --pack, copied), or decode_marker when only HDF5 can decode them.
struct GroupEntry {
  uint64_t offset;
  uint64_t bytes;
  uint32_t file;  // into GroupsSource::data_files
};

/// What the metadata pass learns about one field across all groups.
struct FieldStats {
  std::string name;
  bool seen = false;
  ElementType element;
  std::vector<uint64_t> dims;  // of the first group's dataset
  std::string first;           // "PATH in FILE" of that dataset, for messages
  bool same_shape = true;
  bool same_tail = true;  // every dataset has rank >= 1 and the first one's dims[1:]
};

struct GroupsSource {
  std::string file;
  std::vector<std::string> groups;
  std::vector<GroupEntry> entries;  // [group * fields + field]
  /// Every file the datasets' bytes come from: the source itself, files reached through
  /// external links, external raw data files. Each becomes a source of the index.
  std::vector<std::string> data_files;
  std::map<std::string, uint32_t> data_file_ids;

  uint32_t data_file(const std::string& path) {
    auto [it, added] = data_file_ids.try_emplace(path, static_cast<uint32_t>(data_files.size()));
    if (added) data_files.push_back(path);
    return it->second;
  }
};

herr_t collect_link(hid_t, const char* name, const H5L_info_t*, void* data) noexcept {
  try {
    static_cast<std::vector<std::string>*>(data)->emplace_back(name);
    return 0;
  } catch (...) {
    return -1;
  }
}

bool same_tail(const std::vector<uint64_t>& a, const std::vector<uint64_t>& b) {
  return !a.empty() && !b.empty() && std::equal(a.begin() + 1, a.end(), b.begin() + 1, b.end());
}

class GroupScan {
 public:
  explicit GroupScan(const FlattenRequest& request) : m_request(request) {}

  /// Metadata pass over one source file.
  GroupsSource scan(const std::string& path);
  std::vector<FieldInfo> field_infos() const;
  std::size_t field_count() const { return m_fields.size(); }
  const std::vector<FieldStats>& fields() const { return m_fields; }

 private:
  void take_fields_from(hid_t group, const std::string& path, const std::string& file);
  void scan_group(hid_t group, const std::string& path, GroupsSource& src);
  [[noreturn]] void missing_field(hid_t group, const std::string& path, const std::string& field,
                                  const std::string& file) const;
  void note(FieldStats& field, const DatasetInfo& info, const std::string& file) const;

  const FlattenRequest& m_request;
  std::vector<FieldStats> m_fields;
  std::string m_first_group;  // "PATH in FILE"
};

GroupsSource GroupScan::scan(const std::string& path) {
  GroupsSource src{
      .file = path, .groups = {}, .entries = {}, .data_files = {}, .data_file_ids = {}};
  src.data_file(path);
  auto file = open_file(path);
  for_each_matching_group(file.get(), m_request.groups, path,
                          [&](const std::string& group_path, hid_t group) {
                            if (m_fields.empty()) take_fields_from(group, group_path, path);
                            scan_group(group, group_path, src);
                          });
  if (src.groups.empty()) {
    throw UsageError(fmt::format("--groups '{}' matches no group in {}", m_request.groups, path));
  }
  return src;
}

void GroupScan::take_fields_from(hid_t group, const std::string& path, const std::string& file) {
  std::vector<std::string> names;
  h5_check(H5Literate(group, H5_INDEX_NAME, H5_ITER_INC, nullptr, collect_link, &names),
           "H5Literate " + path, file);
  for (auto& name : names) {
    H5Handle object(H5Oopen(group, name.c_str(), H5P_DEFAULT), H5Oclose);
    if (!object) {
      if (auto why = broken_link(group, path, name, file)) throw UsageError(*why);
    }
    if (object && H5Iget_type(object.get()) == H5I_DATASET)
      m_fields.push_back({.name = std::move(name)});
  }
  if (m_fields.empty()) {
    throw UsageError(
        fmt::format("group {} in {} (the first match of --groups '{}') has no datasets", path, file,
                    m_request.groups));
  }
  m_first_group = fmt::format("{} in {}", path, file);
}

void GroupScan::scan_group(hid_t group, const std::string& path, GroupsSource& src) {
  for (auto& field : m_fields) {
    H5Handle dset(H5Dopen2(group, field.name.c_str(), H5P_DEFAULT), H5Dclose);
    if (!dset) missing_field(group, path, field.name, src.file);
    auto info = describe_dataset(dset.get(), path + "/" + field.name, src.file);
    note(field, info, src.file);
    for (const auto& other : info.other_files) src.data_file(other);
    src.entries.push_back(
        {info.offset.value_or(decode_marker), info.total_bytes, src.data_file(info.file)});
  }
  src.groups.push_back(path);
}

void GroupScan::missing_field(hid_t group, const std::string& path, const std::string& field,
                              const std::string& file) const {
  if (auto why = broken_link(group, path, field, file)) throw UsageError(*why);
  if (H5Lexists(group, field.c_str(), H5P_DEFAULT) > 0) {
    throw UsageError(fmt::format("{}/{} in {} is not a dataset (it is one in {})", path, field,
                                 file, m_first_group));
  }
  std::string names;
  for (const auto& f : m_fields) names += (names.empty() ? "" : ", ") + f.name;
  throw UsageError(
      fmt::format("group {} in {} has no dataset '{}' (fields come from the first group, {}: {})",
                  path, file, field, m_first_group, names));
}

void GroupScan::note(FieldStats& field, const DatasetInfo& info, const std::string& file) const {
  if (info.element.variable && !info.dims.empty()) {
    throw UsageError(
        fmt::format("dataset {} in {} holds {} variable-length {}: --groups takes one per group (a "
                    "scalar), a 1-D dataset of them is a variable field with --field",
                    info.path, file, shape_text(info.dims),
                    info.element.encoding.empty() ? "sequences" : "strings"));
  }
  if (!field.seen) {
    field.seen = true;
    field.element = info.element;
    field.dims = info.dims;
    field.first = fmt::format("{} in {}", info.path, file);
    return;
  }
  if (!same_element(info.element, field.element)) {
    throw UsageError(fmt::format(
        "dataset {} in {} is {} but {} is {}: a field's dtype (with its members, encoding or "
        "enum names) must agree across groups",
        info.path, file, dtype_name(info.dtype), field.first, dtype_name(field.element.dtype)));
  }
  if (info.dims != field.dims) field.same_shape = false;
  if (!same_tail(info.dims, field.dims)) field.same_tail = false;
}

std::vector<FieldInfo> GroupScan::field_infos() const {
  std::vector<FieldInfo> out;
  for (const auto& f : m_fields) {
    const auto& e = f.element;
    FieldInfo info{.name = f.name,
                   .dtype = e.dtype,
                   .shape = {},
                   .variable = !f.same_shape,
                   .row_bytes = 0,
                   .source = m_request.groups + "/" + f.name,
                   .members = e.members,
                   .encoding = e.encoding,
                   .enum_names = e.enum_names};
    if (f.same_shape) {
      info.shape = f.dims;
      info.row_bytes = e.bytes;
      for (auto d : f.dims) info.row_bytes *= d;
    } else if (f.same_tail) {
      info.shape.assign(f.dims.begin() + 1, f.dims.end());
    }
    // A variable field without a common tail is opaque bytes: its last axis cannot be a
    // record's or a string's size.
    if (!f.same_shape && !f.same_tail && !e.shape.empty()) {
      throw UsageError(
          fmt::format("field {} ({}) has a different shape in different groups: "
                      "--groups can vary the first dimension of {} only",
                      f.name, f.first, dtype_name(e.dtype)));
    }
    if (f.same_shape || f.same_tail)
      info.shape.insert(info.shape.end(), e.shape.begin(), e.shape.end());
    if (e.variable) {  // one string or sequence per group: its items are the rows
      info.variable = true;
      info.row_bytes = 0;
    }
    out.push_back(std::move(info));
  }
  return out;
}

/// Where one source's entries go.
struct SourceWrite {
  IndexWriter& writer;
  const GroupsSource& src;
  std::size_t fields;
  std::vector<uint32_t> file_ids;  // of src.data_files
  uint64_t start;
  uint64_t budget;
  bool pack;
};

void write_contiguous(const SourceWrite& s) {
  const auto& entries = s.src.entries;
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < entries.size(); ++i) {
    if (entries[i].offset != decode_marker) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](uint64_t a, uint64_t b) {
    return std::pair(entries[a].file, entries[a].offset) <
           std::pair(entries[b].file, entries[b].offset);
  });
  FileDescriptor fd;
  std::vector<std::byte> block;
  for (std::size_t b = 0; b < order.size();) {
    const uint32_t file = entries[order[b]].file;
    if (b == 0 || entries[order[b - 1]].file != file) {
      fd = FileDescriptor::open(s.src.data_files[file], O_RDONLY);
    }
    const uint64_t begin = entries[order[b]].offset;
    uint64_t end = begin + entries[order[b]].bytes;
    std::size_t e = b + 1;
    for (; e < order.size(); ++e) {
      const auto& next = entries[order[e]];
      const uint64_t new_end = std::max(end, next.offset + next.bytes);
      if (next.file != file || next.offset > end + max_read_gap || new_end - begin > s.budget)
        break;
      end = new_end;
    }
    block.resize(end - begin);
    fd.pread_exact(block, begin);
    for (; b < e; ++b) {
      const uint64_t i = order[b];
      std::span<const std::byte> bytes(block.data() + (entries[i].offset - begin),
                                       entries[i].bytes);
      const uint64_t sample = s.start + i / s.fields;
      const auto field = static_cast<uint32_t>(i % s.fields);
      if (s.pack) {
        s.writer.put_packed(sample, field, bytes);
      } else {
        s.writer.put_in_place(sample, field, s.file_ids[file], entries[i].offset, bytes);
      }
    }
  }
}

void write_decoded(const SourceWrite& s, const std::vector<FieldStats>& fields) {
  const auto& file_name = s.src.file;
  auto file = open_file(file_name);
  std::vector<std::byte> buffer;
  for (std::size_t g = 0; g < s.src.groups.size(); ++g) {
    auto first = s.src.entries.begin() + static_cast<std::ptrdiff_t>(g * s.fields);
    if (std::none_of(first, first + static_cast<std::ptrdiff_t>(s.fields),
                     [](const GroupEntry& e) { return e.offset == decode_marker; })) {
      continue;
    }
    const auto& path = s.src.groups[g];
    auto group = h5_own(H5Gopen2(file.get(), path.c_str(), H5P_DEFAULT), H5Gclose,
                        "H5Gopen2 " + path, file_name);
    for (std::size_t f = 0; f < s.fields; ++f) {
      const auto& entry = first[static_cast<std::ptrdiff_t>(f)];
      if (entry.offset != decode_marker) continue;
      const auto& name = fields[f].name;
      auto dset = h5_own(H5Dopen2(group.get(), name.c_str(), H5P_DEFAULT), H5Dclose,
                         "H5Dopen2 " + path + "/" + name, file_name);
      auto type = h5_own(H5Dget_type(dset.get()), H5Tclose, "H5Dget_type", file_name);
      auto mem_type = memory_type(type.get(), file_name);
      if (fields[f].element.variable) {
        VlenBuffer one(mem_type.get(), 1, file_name);
        h5_check(H5Dread(dset.get(), mem_type.get(), one.space(), H5S_ALL, H5P_DEFAULT, one.data()),
                 "H5Dread " + path + "/" + name, file_name);
        s.writer.put_packed(s.start + g, static_cast<uint32_t>(f), one.element(0));
        continue;
      }
      buffer.resize(entry.bytes);
      read_all(dset.get(), mem_type.get(), buffer, path + "/" + name, file_name);
      s.writer.put_packed(s.start + g, static_cast<uint32_t>(f), buffer);
    }
  }
}

}  // namespace

void flatten_groups(const FlattenRequest& request, IndexWriter& writer) {
  GroupScan scan(request);
  std::vector<GroupsSource> sources;
  for (const auto& path : request.sources) sources.push_back(scan.scan(path));
  std::vector<uint64_t> starts;
  uint64_t total = 0;
  for (const auto& s : sources) {
    starts.push_back(total);
    total += s.groups.size();
  }
  writer.define(scan.field_infos(), total);
  writer.set_attribute(std::string(attr_groups), request.groups);
  std::vector<std::string> files;
  for (const auto& s : sources) files.push_back(s.file);
  record_sources(writer, "groups", starts, files);
  for (std::size_t k = 0; k < sources.size(); ++k) {
    std::vector<uint32_t> file_ids;
    for (const auto& f : sources[k].data_files) file_ids.push_back(writer.add_source(f));
    SourceWrite s{writer,
                  sources[k],
                  scan.field_count(),
                  std::move(file_ids),
                  starts[k],
                  request.memory_budget,
                  request.pack};
    write_contiguous(s);
    write_decoded(s, scan.fields());
  }
}

}  // namespace ddstage::formats::detail
