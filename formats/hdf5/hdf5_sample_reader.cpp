// Per-sample reads through the HDF5 API: deliberately the naive way, as the bench baseline.
#include "ddstage/formats/hdf5_sample_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "ddstage/error.hpp"
#include "hdf5_handle.hpp"
#include "hdf5_modes.hpp"
#include "hdf5_types.hpp"

namespace ddstage::formats {

using detail::h5_check;
using detail::h5_own;
using detail::H5Handle;

namespace {

/// A rows-mode field of one source, kept open across reads.
struct RowsField {
  H5Handle data;
  H5Handle mem_type;
  H5Handle space;      // data's file space, reselected per read
  H5Handle row_space;  // memory space of one row (fixed fields)
  H5Handle offsets;    // ragged only
  H5Handle offsets_space;
  std::vector<hsize_t> dims;          // of data
  std::vector<hsize_t> offsets_dims;  // N+1
  uint64_t row_bytes = 0;             // one row of data, in memory
  uint64_t row_elements = 0;
  bool variable = false;  // each row one variable-length string or sequence
};

struct Source {
  std::string name;
  H5Handle file;
  std::vector<std::string> groups;  // groups mode: the sample groups, in sample order
  std::vector<RowsField> fields;    // rows mode
};

std::string attribute(const Index& index, std::string_view key) {
  const auto& attrs = index.manifest().attributes;
  auto it = attrs.find(std::string(key));
  if (it == attrs.end()) {
    throw UsageError(
        fmt::format("{} was not flattened from HDF5 (its manifest has no '{}' attribute)",
                    index.dir().string(), key));
  }
  return it->second;
}

H5Handle dataset_space(hid_t dset, const std::string& file) {
  return h5_own(H5Dget_space(dset), H5Sclose, "H5Dget_space", file);
}

RowsField open_rows_field(hid_t file, const FieldInfo& info, const std::string& name) {
  RowsField f;
  std::string data_path = info.source;
  std::string offsets_path;
  // Ragged fields record "DATA:OFFSETS"; the CLI splits --ragged at the first ':' as well.
  if (auto colon = info.source.find(':'); info.variable && colon != std::string::npos) {
    data_path = info.source.substr(0, colon);
    offsets_path = info.source.substr(colon + 1);
  }
  const auto path = detail::split_member(file, data_path);
  f.data = detail::open_dataset(file, path.dataset, name);
  auto type = h5_own(H5Dget_type(f.data.get()), H5Tclose, "H5Dget_type " + data_path, name);
  f.mem_type = path.member.empty()
                   ? detail::memory_type(type.get(), name)
                   : detail::member_type(type.get(), path.member, path.dataset, name).memory;
  f.variable = detail::variable_length(f.mem_type.get());
  f.space = dataset_space(f.data.get(), name);
  f.dims.resize(static_cast<std::size_t>(
      h5_check(H5Sget_simple_extent_ndims(f.space.get()), "H5Sget_simple_extent_ndims", name)));
  H5Sget_simple_extent_dims(f.space.get(), f.dims.data(), nullptr);
  f.row_elements = 1;
  for (std::size_t d = 1; d < f.dims.size(); ++d) f.row_elements *= f.dims[d];
  f.row_bytes = f.row_elements * H5Tget_size(f.mem_type.get());
  hsize_t row = f.row_elements;
  f.row_space = h5_own(H5Screate_simple(1, &row, nullptr), H5Sclose, "H5Screate_simple", name);
  if (!offsets_path.empty()) {
    f.offsets = detail::open_dataset(file, offsets_path, name);
    f.offsets_space = dataset_space(f.offsets.get(), name);
    f.offsets_dims.resize(1);
    H5Sget_simple_extent_dims(f.offsets_space.get(), f.offsets_dims.data(), nullptr);
  }
  return f;
}

void select_rows(hid_t space, const std::vector<hsize_t>& dims, hsize_t first, hsize_t count,
                 const std::string& file) {
  std::vector<hsize_t> start(dims.size(), 0), size(dims);  // all of every dimension but the first
  start[0] = first;
  size[0] = count;
  h5_check(H5Sselect_hyperslab(space, H5S_SELECT_SET, start.data(), nullptr, size.data(), nullptr),
           "H5Sselect_hyperslab", file);
}

void check_room(uint64_t needed, std::span<std::byte> dest) {
  if (needed > dest.size()) {
    throw Error(ErrorKind::runtime,
                fmt::format("destination of {} bytes is too small for a sample of {} bytes",
                            dest.size(), needed));
  }
}

// One variable-length string or sequence (the selected point of file_space): its items.
uint64_t read_variable(hid_t dset, hid_t mem_type, hid_t file_space, std::span<std::byte> dest,
                       const std::string& file) {
  detail::VlenBuffer one(mem_type, 1, file);
  h5_check(H5Dread(dset, mem_type, one.space(), file_space, H5P_DEFAULT, one.data()), "H5Dread",
           file);
  auto items = one.element(0);
  check_room(items.size(), dest);
  if (!items.empty()) std::memcpy(dest.data(), items.data(), items.size());
  return items.size();
}

}  // namespace

struct Hdf5SampleReader::Impl {
  bool groups_mode = false;
  std::vector<std::string> field_names;
  std::vector<uint64_t> starts;
  uint64_t samples = 0;
  std::vector<Source> sources;

  void open_sources(const Index& index);
  uint64_t read_group(const Source& s, uint64_t local, uint32_t field,
                      std::span<std::byte> dest) const;
  uint64_t read_row(RowsField& f, const std::string& file, uint64_t local,
                    std::span<std::byte> dest) const;
};

void Hdf5SampleReader::Impl::open_sources(const Index& index) {
  starts = detail::parse_numbers(attribute(index, detail::attr_source_starts),
                                 detail::attr_source_starts);
  auto files =
      detail::parse_numbers(attribute(index, detail::attr_source_files), detail::attr_source_files);
  const bool ordered =
      std::is_sorted(starts.begin(), starts.end()) && (starts.empty() || starts.back() <= samples);
  if (starts.empty() || starts.front() != 0 || !ordered || files.size() != starts.size()) {
    throw IndexError(fmt::format("{}: manifest attributes {} and {} do not describe the sources",
                                 index.dir().string(), detail::attr_source_starts,
                                 detail::attr_source_files));
  }
  for (auto file : files) {
    if (file >= index.files().size() || index.files()[file].kind == FileKind::pack) {
      throw IndexError(fmt::format("{}: {} names file {}, not a source file", index.dir().string(),
                                   detail::attr_source_files, file));
    }
    auto path = index.resolve(static_cast<uint32_t>(file)).string();
    sources.push_back({.name = path, .file = detail::open_file(path), .groups = {}, .fields = {}});
  }
}

Hdf5SampleReader::Hdf5SampleReader(const Index& index) : m(std::make_unique<Impl>()) {
  detail::silence_hdf5_errors();
  m->groups_mode = attribute(index, detail::attr_mode) == "groups";
  m->samples = index.samples();
  for (const auto& f : index.fields()) m->field_names.push_back(f.name);
  m->open_sources(index);
  const std::string pattern = m->groups_mode ? attribute(index, detail::attr_groups) : "";
  for (std::size_t k = 0; k < m->sources.size(); ++k) {
    auto& s = m->sources[k];
    if (!m->groups_mode) {
      for (const auto& f : index.fields())
        s.fields.push_back(open_rows_field(s.file.get(), f, s.name));
      continue;
    }
    s.groups = detail::matching_groups(s.file.get(), pattern, s.name);
    const uint64_t expected =
        (k + 1 < m->starts.size() ? m->starts[k + 1] : m->samples) - m->starts[k];
    if (s.groups.size() != expected) {
      throw StaleError(fmt::format("{} has {} groups matching '{}' but the index recorded {}",
                                   s.name, s.groups.size(), pattern, expected));
    }
  }
}

Hdf5SampleReader::Hdf5SampleReader(Hdf5SampleReader&&) noexcept = default;
Hdf5SampleReader& Hdf5SampleReader::operator=(Hdf5SampleReader&&) noexcept = default;
Hdf5SampleReader::~Hdf5SampleReader() = default;

uint64_t Hdf5SampleReader::Impl::read_group(const Source& s, uint64_t local, uint32_t field,
                                            std::span<std::byte> dest) const {
  const auto& path = s.groups[local];
  auto group = h5_own(H5Gopen2(s.file.get(), path.c_str(), H5P_DEFAULT), H5Gclose,
                      "H5Gopen2 " + path, s.name);
  const auto& name = field_names[field];
  auto dset = h5_own(H5Dopen2(group.get(), name.c_str(), H5P_DEFAULT), H5Dclose, "H5Dopen2 " + name,
                     s.name);
  auto type = h5_own(H5Dget_type(dset.get()), H5Tclose, "H5Dget_type", s.name);
  auto mem_type = detail::memory_type(type.get(), s.name);
  if (detail::variable_length(mem_type.get()))
    return read_variable(dset.get(), mem_type.get(), H5S_ALL, dest, s.name);
  auto space = dataset_space(dset.get(), s.name);
  const uint64_t bytes = static_cast<uint64_t>(H5Sget_simple_extent_npoints(space.get())) *
                         H5Tget_size(mem_type.get());
  check_room(bytes, dest);
  if (bytes > 0) {
    h5_check(H5Dread(dset.get(), mem_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, dest.data()),
             "H5Dread", s.name);
  }
  return bytes;
}

uint64_t Hdf5SampleReader::Impl::read_row(RowsField& f, const std::string& file, uint64_t local,
                                          std::span<std::byte> dest) const {
  if (f.variable) {
    select_rows(f.space.get(), f.dims, local, 1, file);
    return read_variable(f.data.get(), f.mem_type.get(), f.space.get(), dest, file);
  }
  if (!f.offsets) {
    check_room(f.row_bytes, dest);
    select_rows(f.space.get(), f.dims, local, 1, file);
    h5_check(H5Dread(f.data.get(), f.mem_type.get(), f.row_space.get(), f.space.get(), H5P_DEFAULT,
                     dest.data()),
             "H5Dread", file);
    return f.row_bytes;
  }
  int64_t bounds[2] = {0, 0};
  hsize_t two = 2;
  auto pair_space = h5_own(H5Screate_simple(1, &two, nullptr), H5Sclose, "H5Screate_simple", file);
  select_rows(f.offsets_space.get(), f.offsets_dims, local, 2, file);
  h5_check(H5Dread(f.offsets.get(), H5T_NATIVE_INT64, pair_space.get(), f.offsets_space.get(),
                   H5P_DEFAULT, bounds),
           "H5Dread offsets", file);
  const auto rows = static_cast<hsize_t>(bounds[1] - bounds[0]);
  check_room(rows * f.row_bytes, dest);
  if (rows == 0) return 0;
  select_rows(f.space.get(), f.dims, static_cast<hsize_t>(bounds[0]), rows, file);
  hsize_t elements = rows * f.row_elements;
  auto mem_space =
      h5_own(H5Screate_simple(1, &elements, nullptr), H5Sclose, "H5Screate_simple", file);
  h5_check(H5Dread(f.data.get(), f.mem_type.get(), mem_space.get(), f.space.get(), H5P_DEFAULT,
                   dest.data()),
           "H5Dread", file);
  return rows * f.row_bytes;
}

uint64_t Hdf5SampleReader::read(uint64_t sample, uint32_t field, std::span<std::byte> dest) {
  if (sample >= m->samples || field >= m->field_names.size()) {
    throw UsageError(fmt::format("sample {} field {} out of range ({} samples, {} fields)", sample,
                                 field, m->samples, m->field_names.size()));
  }
  auto k = static_cast<std::size_t>(std::upper_bound(m->starts.begin(), m->starts.end(), sample) -
                                    m->starts.begin() - 1);
  auto& s = m->sources[k];
  const uint64_t local = sample - m->starts[k];
  if (m->groups_mode) return m->read_group(s, local, field, dest);
  return m->read_row(s.fields[field], s.name, local, dest);
}

}  // namespace ddstage::formats
