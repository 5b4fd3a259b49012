// Rows mode (--field, --ragged): sample i is row i of each dataset, or a CSR slice of it.
#include <fcntl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <set>

#include "ddstage/error.hpp"
#include "hdf5_dataset.hpp"
#include "hdf5_modes.hpp"
#include "hdf5_types.hpp"

namespace ddstage::formats::detail {
namespace {

/// One requested field: a --field (no offsets) or a --ragged.
struct Column {
  std::string name;
  std::string data;
  std::string offsets;
  bool ragged() const { return !offsets.empty(); }
};

/// A column as found in one source file.
struct ColumnInfo {
  DatasetInfo data;     // a member column's: the whole compound dataset
  DatasetInfo offsets;  // ragged only
  uint64_t samples = 0;
  ElementType element;  // what one element of the field is: data's, or the member's
  std::string member;   // a compound member taken as the field (--field NAME=/DATASET.MEMBER)
  uint64_t member_offset = 0;
  uint64_t row_bytes = 0;  // of the field, in memory (a variable element's hvl_t or char*)
};

struct RowsSource {
  std::string file;
  uint64_t samples = 0;
  std::vector<ColumnInfo> columns;
};

/// Where one source's entries go.
struct SourceWrite {
  IndexWriter& writer;
  const FileDescriptor& fd;
  uint32_t file_id;
  uint64_t start;  // global id of the source's first sample
  uint64_t budget;
  bool pack;
};

Column make_column(const std::string& name, const std::string& data, const std::string& offsets) {
  Column c{name, absolute_h5_path(data), offsets.empty() ? "" : absolute_h5_path(offsets)};
  if (c.name.empty()) c.name = c.data.substr(c.data.find_last_of('/') + 1);
  if (c.name.empty()) throw UsageError(fmt::format("'{}' is not a dataset path", data));
  return c;
}

std::vector<Column> requested_columns(const FlattenRequest& request) {
  std::vector<Column> columns;
  for (const auto& f : request.fields) columns.push_back(make_column(f.name, f.path, ""));
  for (const auto& r : request.ragged) columns.push_back(make_column(r.name, r.data, r.offsets));
  std::set<std::string> seen;
  for (const auto& c : columns) {
    if (!seen.insert(c.name).second) {
      throw UsageError(
          fmt::format("field name '{}' given twice (name them with NAME=PATH)", c.name));
    }
  }
  return columns;
}

int64_t load_offset(std::span<const std::byte> bytes) {
  int64_t v = 0;
  std::memcpy(&v, bytes.data(), sizeof v);
  return v;
}

bool is_integer(DType t) {
  return t != DType::boolean && t >= DType::int8 && t <= DType::uint64;
}

void check_offsets(hid_t dset, const ColumnInfo& col, const std::string& file, uint64_t budget) {
  const auto& o = col.offsets;
  if (!is_integer(o.dtype) || o.dims.size() != 1 || o.dims[0] == 0) {
    throw UsageError(
        fmt::format("offsets {} in {} must be a 1-D integer dataset of N+1 values, not {} {}",
                    o.path, file, dtype_name(o.dtype), shape_text(o.dims)));
  }
  auto stream = RowStream::decoding(dset, H5T_NATIVE_INT64, o, sizeof(int64_t), budget, file);
  int64_t prev = load_offset(stream.rows(0, 1));
  if (prev < 0)
    throw UsageError(fmt::format("offsets {} in {} start at o[0]={} (< 0)", o.path, file, prev));
  for (uint64_t i = 1; i < o.dims[0]; ++i) {
    int64_t v = load_offset(stream.rows(i, i + 1));
    if (v < prev) {
      throw UsageError(fmt::format("offsets {} in {} not monotonic at {}: o[{}]={} > o[{}]={}",
                                   o.path, file, i - 1, i - 1, prev, i, v));
    }
    prev = v;
  }
  if (static_cast<uint64_t>(prev) > col.data.dims[0]) {
    throw UsageError(fmt::format("offsets {} in {} end at o[{}]={}, past the end of {} ({} rows)",
                                 o.path, file, o.dims[0] - 1, prev, col.data.path,
                                 col.data.dims[0]));
  }
}

uint64_t elements_per_row(const DatasetInfo& info) {
  uint64_t n = 1;
  for (std::size_t d = 1; d < info.dims.size(); ++d) n *= info.dims[d];
  return n;
}

// A member field sees its dataset's records as opaque bytes of their stored size: only the
// member must be a supported type (a record may hold strings h5py reads as objects). The
// records stay in place when the member's stored bytes are its memory bytes, and no
// variable-length member makes H5Dget_type's offsets (in memory) differ from those on disk.
DatasetInfo describe_member(hid_t dset, const MemberPath& path, const std::string& name,
                            ColumnInfo& col) {
  auto type = h5_own(H5Dget_type(dset), H5Tclose, "H5Dget_type " + path.dataset, name);
  auto m = member_type(type.get(), path.member, path.dataset, name);
  const bool has_heap = h5_check(H5Tdetect_class(type.get(), H5T_VLEN), "H5Tdetect_class", name);
  const ElementType record{.bytes = H5Tget_size(type.get()),
                           .in_place = m.element.in_place && !has_heap};
  col.element = std::move(m.element);
  col.member = path.member;
  col.member_offset = m.offset;
  return describe_dataset(dset, path.dataset, name, &record);
}

ColumnInfo describe_column(hid_t file, const Column& c, const std::string& name, uint64_t budget) {
  ColumnInfo col;
  const auto path = split_member(file, c.data);
  auto data = open_dataset(file, path.dataset, name);
  if (path.member.empty()) {
    col.data = describe_dataset(data.get(), path.dataset, name);
    col.element = col.data.element;
  } else {
    col.data = describe_member(data.get(), path, name, col);
  }
  if (col.data.dims.empty()) {
    throw UsageError(
        fmt::format("dataset {} in {} is a scalar (0-d): --field and --ragged need rows "
                    "along the first dimension (one value per group is --groups)",
                    c.data, name));
  }
  // In place, a member is one slice of each row, so a row must be one stored record.
  if (!col.member.empty() && (c.ragged() || col.data.dims.size() != 1)) col.data.offset.reset();
  col.row_bytes = col.element.bytes * elements_per_row(col.data);
  if (col.element.variable && (c.ragged() || col.data.dims.size() != 1)) {
    throw UsageError(fmt::format(
        "dataset {} in {} holds variable-length {}: each row is one of them, so it must be "
        "1-D and given with --field (it is {}{})",
        c.data, name, col.element.encoding.empty() ? "sequences" : "strings",
        shape_text(col.data.dims), c.ragged() ? ", given with --ragged" : ""));
  }
  col.samples = col.data.dims[0];
  if (c.ragged()) {
    auto offsets = open_dataset(file, c.offsets, name);
    col.offsets = describe_dataset(offsets.get(), c.offsets, name);
    check_offsets(offsets.get(), col, name, budget);
    col.samples = col.offsets.dims[0] - 1;
  }
  return col;
}

std::string length_text(const Column& c, const ColumnInfo& col) {
  return c.ragged() ? fmt::format("{} ({}: {} offsets)", c.name, c.offsets, col.samples + 1)
                    : fmt::format("{} ({}: {} rows)", c.name, c.data, col.samples);
}

RowsSource describe_source(const std::string& path, const std::vector<Column>& columns,
                           uint64_t budget) {
  RowsSource src{.file = path};
  auto file = open_file(path);
  for (const auto& c : columns) src.columns.push_back(describe_column(file.get(), c, path, budget));
  src.samples = src.columns.front().samples;
  for (std::size_t k = 1; k < columns.size(); ++k) {
    if (src.columns[k].samples != src.samples) {
      throw UsageError(fmt::format("fields {} and {} in {} have different first dimensions",
                                   length_text(columns[0], src.columns[0]),
                                   length_text(columns[k], src.columns[k]), path));
    }
  }
  return src;
}

std::vector<uint64_t> row_shape(const ColumnInfo& col) {
  std::vector<uint64_t> shape(col.data.dims.begin() + 1, col.data.dims.end());
  shape.insert(shape.end(), col.element.shape.begin(), col.element.shape.end());
  return shape;
}

void check_same_layout(const RowsSource& first, const RowsSource& other,
                       const std::vector<Column>& columns) {
  for (std::size_t k = 0; k < columns.size(); ++k) {
    const auto& a = first.columns[k];
    const auto& b = other.columns[k];
    if (!same_element(a.element, b.element) || row_shape(a) != row_shape(b)) {
      throw UsageError(fmt::format(
          "field {}: {} is {} rows of {} in {} but {} rows of {} in {}{}", columns[k].name,
          columns[k].data, dtype_name(b.element.dtype), shape_text(row_shape(b)), other.file,
          dtype_name(a.element.dtype), shape_text(row_shape(a)), first.file,
          a.element.dtype == b.element.dtype ? " (or members, encoding or enum names differ)"
                                             : ""));
    }
  }
}

std::vector<FieldInfo> field_infos(const std::vector<Column>& columns, const RowsSource& first) {
  std::vector<FieldInfo> fields;
  for (std::size_t k = 0; k < columns.size(); ++k) {
    const auto& c = columns[k];
    const auto& col = first.columns[k];
    const auto& e = col.element;
    const bool variable = c.ragged() || e.variable;
    fields.push_back({.name = c.name,
                      .dtype = e.dtype,
                      .shape = e.variable ? e.shape : row_shape(col),
                      .variable = variable,
                      .row_bytes = variable ? 0 : col.row_bytes,
                      .source = c.ragged() ? c.data + ":" + c.offsets : c.data,
                      .members = e.members,
                      .encoding = e.encoding,
                      .enum_names = e.enum_names});
  }
  return fields;
}

// Contiguous data is read with pread even under --pack: decoding it through HDF5 gives the
// same bytes, slower. A member is decoded alone, through a memory record holding only it.
RowStream open_rows(const SourceWrite& s, hid_t dset, const ColumnInfo& col, uint64_t budget,
                    H5Handle& mem_type) {
  if (col.data.offset) return RowStream::in_place(col.data, budget);
  const std::string file = s.fd.path().string();
  auto type = h5_own(H5Dget_type(dset), H5Tclose, "H5Dget_type " + col.data.path, file);
  mem_type = col.member.empty() ? memory_type(type.get(), file)
                                : member_type(type.get(), col.member, col.data.path, file).memory;
  return RowStream::decoding(dset, mem_type.get(), col.data, col.row_bytes, budget, file);
}

// In place, the stream serves whole stored records; a member is a slice of each, at a stride
// of the record size.
void put(const SourceWrite& s, uint64_t local, uint32_t field, const ColumnInfo& col, uint64_t row,
         std::span<const std::byte> bytes) {
  if (!s.pack && col.data.offset) {
    const uint64_t offset = *col.data.offset + row * col.data.row_bytes + col.member_offset;
    s.writer.put_in_place(s.start + local, field, s.file_id, offset, bytes);
  } else {
    s.writer.put_packed(s.start + local, field, bytes);
  }
}

void put_fixed(const SourceWrite& s, uint32_t field, hid_t dset, const ColumnInfo& col) {
  H5Handle mem_type;
  auto stream = open_rows(s, dset, col, s.budget, mem_type);
  const bool slice = col.data.offset && !col.member.empty();
  if (!s.pack && col.data.offset && !slice && col.row_bytes > 0 &&
      col.row_bytes == col.data.row_bytes) {
    // Whole contiguous rows: handed over at once (the writer checksums them block by block),
    // so a billion-row dataset costs no billion calls.
    s.writer.put_rows_in_place(field, s.start, col.samples, s.file_id, *col.data.offset,
                               col.row_bytes, col.row_bytes, stream.rows(0, col.samples));
    return;
  }
  for (uint64_t i = 0; i < col.samples; ++i) {
    auto row = stream.rows(i, i + 1);
    put(s, i, field, col, i, slice ? row.subspan(col.member_offset, col.row_bytes) : row);
  }
}

void put_ragged(const SourceWrite& s, uint32_t field, hid_t data, hid_t offsets,
                const ColumnInfo& col) {
  H5Handle mem_type;
  auto rows = open_rows(s, data, col, s.budget - s.budget / 4, mem_type);
  auto offs = RowStream::decoding(offsets, H5T_NATIVE_INT64, col.offsets, sizeof(int64_t),
                                  s.budget / 4, s.fd.path().string());
  auto begin = static_cast<uint64_t>(load_offset(offs.rows(0, 1)));
  for (uint64_t i = 0; i < col.samples; ++i) {
    auto end = static_cast<uint64_t>(load_offset(offs.rows(i + 1, i + 2)));
    put(s, i, field, col, begin, rows.rows(begin, end));
    begin = end;
  }
}

// Variable-length strings and sequences live on HDF5's heap: H5Dread hands out one allocation
// per element, so rows are read a chunk-aligned block at a time and freed after packing.
void put_variable(const SourceWrite& s, uint32_t field, hid_t dset, const ColumnInfo& col) {
  const std::string file = s.fd.path().string();
  auto type = h5_own(H5Dget_type(dset), H5Tclose, "H5Dget_type " + col.data.path, file);
  auto mem_type = memory_type(type.get(), file);
  const uint64_t step = std::max<uint64_t>(4096 / col.data.chunk_rows, 1) * col.data.chunk_rows;
  auto file_space = h5_own(H5Dget_space(dset), H5Sclose, "H5Dget_space", file);
  for (uint64_t first = 0; first < col.samples; first += step) {
    const hsize_t start = first, count = std::min(step, col.samples - first);
    h5_check(
        H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, &start, nullptr, &count, nullptr),
        "H5Sselect_hyperslab", file);
    VlenBuffer block(mem_type.get(), count, file);
    h5_check(
        H5Dread(dset, mem_type.get(), block.space(), file_space.get(), H5P_DEFAULT, block.data()),
        "H5Dread " + col.data.path, file);
    for (uint64_t i = 0; i < count; ++i) {
      s.writer.put_packed(s.start + first + i, field, block.element(i));
    }
  }
}

void write_source(const RowsSource& src, const std::vector<Column>& columns, const SourceWrite& s) {
  auto file = open_file(src.file);
  for (uint32_t f = 0; f < columns.size(); ++f) {
    const auto& col = src.columns[f];
    // In-place entries point into the file that holds the dataset (another one behind an
    // external link).
    SourceWrite column = s;
    column.file_id = add_data_files(s.writer, col.data);
    auto data = open_dataset(file.get(), col.data.path, src.file);
    if (col.element.variable) {
      put_variable(column, f, data.get(), col);
    } else if (!columns[f].ragged()) {
      put_fixed(column, f, data.get(), col);
    } else {
      add_data_files(s.writer, src.columns[f].offsets);
      auto offsets = open_dataset(file.get(), columns[f].offsets, src.file);
      put_ragged(column, f, data.get(), offsets.get(), src.columns[f]);
    }
  }
}

}  // namespace

void flatten_rows(const FlattenRequest& request, IndexWriter& writer) {
  auto columns = requested_columns(request);
  std::vector<RowsSource> sources;
  for (const auto& path : request.sources) {
    sources.push_back(describe_source(path, columns, request.memory_budget));
    check_same_layout(sources.front(), sources.back(), columns);
  }
  std::vector<uint64_t> starts;
  uint64_t total = 0;
  for (const auto& s : sources) {
    starts.push_back(total);
    total += s.samples;
  }
  if (total == 0) {
    std::string empty;
    for (const auto& src : sources)
      empty += fmt::format("{}{}: {}", empty.empty() ? "" : ", ", src.file,
                           length_text(columns[0], src.columns[0]));
    throw UsageError("no samples to index: " + empty);
  }
  writer.define(field_infos(columns, sources.front()), total);
  // Known only for fixed rows; variable ones (ragged, strings) leave the ETA to samples.
  uint64_t bytes = 0;
  bool known = true;
  for (const auto& src : sources) {
    for (const auto& col : src.columns) {
      known = known && !col.element.variable && col.offsets.path.empty();
      bytes += col.row_bytes * src.samples;
    }
  }
  if (known) writer.expect_bytes(bytes);
  std::vector<std::string> files;
  for (const auto& s : sources) files.push_back(s.file);
  const auto file_ids = record_sources(writer, "rows", starts, files);
  for (std::size_t k = 0; k < sources.size(); ++k) {
    auto fd = FileDescriptor::open(sources[k].file, O_RDONLY);
    write_source(sources[k], columns,
                 {writer, fd, file_ids[k], starts[k], request.memory_budget, request.pack});
  }
}

}  // namespace ddstage::formats::detail
