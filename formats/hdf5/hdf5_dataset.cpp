#include "hdf5_dataset.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "ddstage/error.hpp"
#include "hdf5_links.hpp"
#include "hdf5_storage.hpp"
#include "hdf5_types.hpp"

namespace ddstage::formats::detail {
namespace {

std::vector<uint64_t> dataset_dims(hid_t space, const std::string& path, const std::string& file) {
  if (H5Sget_simple_extent_type(space) == H5S_NULL) {
    throw UsageError(fmt::format("dataset {} in {} has no data (null dataspace)", path, file));
  }
  int rank = h5_check(H5Sget_simple_extent_ndims(space), "H5Sget_simple_extent_ndims", file);
  std::vector<hsize_t> dims(static_cast<std::size_t>(rank));
  h5_check(H5Sget_simple_extent_dims(space, dims.data(), nullptr), "H5Sget_simple_extent_dims",
           file);
  return {dims.begin(), dims.end()};
}

uint64_t chunk_rows_of(hid_t dcpl, std::size_t rank, const std::string& file) {
  if (rank == 0 || H5Pget_layout(dcpl) != H5D_CHUNKED) return 1;
  std::vector<hsize_t> chunk(rank);
  h5_check(H5Pget_chunk(dcpl, static_cast<int>(rank), chunk.data()), "H5Pget_chunk", file);
  return std::max<uint64_t>(chunk[0], 1);
}

}  // namespace

DatasetInfo describe_dataset(hid_t dset, std::string path, const std::string& file,
                             const ElementType* element) {
  DatasetInfo info;
  info.file = file_of(dset, file);
  auto type = h5_own(H5Dget_type(dset), H5Tclose, "H5Dget_type " + path, file);
  info.element = element ? *element : element_type(type.get(), path, file);
  info.dtype = info.element.dtype;
  auto space = h5_own(H5Dget_space(dset), H5Sclose, "H5Dget_space " + path, file);
  info.dims = dataset_dims(space.get(), path, file);
  info.row_bytes = info.element.bytes;
  for (std::size_t d = 1; d < info.dims.size(); ++d) info.row_bytes *= info.dims[d];
  info.total_bytes = info.dims.empty() ? info.row_bytes : info.row_bytes * info.dims[0];
  // HADDR_UNDEF for chunked, compact, external and not yet allocated storage; filters need
  // chunks, so a defined offset already means contiguous, unfiltered and in this file (which
  // spares in-place datasets a creation property list: 40,000 small ones took 30% longer).
  haddr_t offset = H5Dget_offset(dset);
  if (offset != HADDR_UNDEF && info.element.in_place &&
      H5Dget_storage_size(dset) == info.total_bytes) {
    info.offset = offset;
  } else {
    const std::string where =
        info.file == file
            ? file
            : fmt::format("{} (stored in {} through an external link)", file, info.file);
    auto dcpl = h5_own(H5Dget_create_plist(dset), H5Pclose, "H5Dget_create_plist " + path, file);
    check_filters(dset, dcpl.get(), path, where);
    auto raw = external_raw_data(dset, dcpl.get(), path, info.file, where);
    std::error_code ec;
    if (raw.size() == 1 && info.element.in_place && raw[0].size >= info.total_bytes &&
        std::filesystem::file_size(raw[0].file, ec) >= raw[0].offset + info.total_bytes && !ec) {
      // All of it, as stored, at one place in one raw file: read in place like contiguous data.
      // (A shorter file reads as zeros past its end: HDF5 decodes that.)
      info.other_files = {info.file};
      info.file = raw[0].file;
      info.offset = raw[0].offset;
    } else {
      for (auto& slot : raw) info.other_files.push_back(std::move(slot.file));
      info.chunk_rows = chunk_rows_of(dcpl.get(), info.dims.size(), file);
    }
  }
  info.path = std::move(path);
  return info;
}

uint32_t add_data_files(IndexWriter& writer, const DatasetInfo& info) {
  const uint32_t id = writer.add_source(info.file);
  for (const auto& other : info.other_files) writer.add_source(other);
  return id;
}

std::string shape_text(const std::vector<uint64_t>& dims) {
  return fmt::format("[{}]", fmt::join(dims, ","));
}

void read_all(hid_t dset, hid_t mem_type, std::span<std::byte> dest, const std::string& path,
              const std::string& file) {
  if (dest.empty()) return;
  h5_check(H5Dread(dset, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, dest.data()), "H5Dread " + path,
           file);
}

RowStream::RowStream(const DatasetInfo& info, uint64_t row_bytes, uint64_t granule, uint64_t budget)
    : m_dims(info.dims), m_path(info.path), m_row_bytes(row_bytes), m_granule(granule) {
  // Half the budget per read: rows kept from the previous block (a ragged sample that
  // straddles two reads) can take the other half.
  const uint64_t granule_bytes = std::max<uint64_t>(granule * row_bytes, 1);
  m_step = granule * std::max<uint64_t>(budget / 2 / granule_bytes, 1);
}

RowStream RowStream::decoding(hid_t dset, hid_t mem_type, const DatasetInfo& info,
                              uint64_t row_bytes, uint64_t budget, const std::string& file) {
  RowStream s(info, row_bytes, info.chunk_rows, budget);
  s.m_dset = dset;
  s.m_mem_type = mem_type;
  s.m_file = file;
  return s;
}

RowStream RowStream::in_place(const DatasetInfo& info, uint64_t budget) {
  RowStream s(info, info.row_bytes, 1, budget);
  s.m_file = info.file;
  s.m_map = MappedFile(info.file, MappedFile::Mode::read_only);
  s.m_map.advise_sequential();
  const uint64_t offset = info.offset.value();
  const uint64_t bytes = info.dims.empty() ? info.row_bytes : info.dims[0] * info.row_bytes;
  if (s.m_map.bytes().size() < offset + bytes) {
    throw Error(ErrorKind::runtime,
                fmt::format("{} is shorter than dataset {} says ({} < {} bytes)", s.m_file,
                            info.path, s.m_map.bytes().size(), offset + bytes),
                {.file = s.m_file});
  }
  s.m_mapped = s.m_map.bytes().subspan(offset, bytes);
  return s;
}

std::span<const std::byte> RowStream::rows(uint64_t first, uint64_t last) {
  if (first < m_begin || last < first || last > m_dims.at(0)) {
    throw std::logic_error(fmt::format("RowStream: rows [{}, {}) out of order", first, last));
  }
  if (m_row_bytes == 0) return {};
  if (m_map.bytes().data())
    return m_mapped.subspan(first * m_row_bytes, (last - first) * m_row_bytes);
  if (last > m_end) {
    if (first >= m_end) {
      m_begin = m_end = first / m_granule * m_granule;
    } else {
      std::memmove(m_buffer.get(), m_buffer.get() + (first - m_begin) * m_row_bytes,
                   (m_end - first) * m_row_bytes);
      m_begin = first;
    }
    while (m_end < last) read_block();
  }
  return {m_buffer.get() + (first - m_begin) * m_row_bytes, (last - first) * m_row_bytes};
}

void RowStream::read_block() {
  const uint64_t count = std::min(m_step, m_dims[0] - m_end);
  const uint64_t held = (m_end - m_begin) * m_row_bytes;
  const uint64_t needed = held + count * m_row_bytes;
  if (needed > m_capacity) {
    auto bigger = std::make_unique_for_overwrite<std::byte[]>(needed);
    if (held > 0) std::memcpy(bigger.get(), m_buffer.get(), held);
    m_buffer = std::move(bigger);
    m_capacity = needed;
  }
  std::span<std::byte> dest(m_buffer.get() + held, count * m_row_bytes);
  std::vector<hsize_t> start(m_dims.size(), 0), size(m_dims.begin(), m_dims.end());
  start[0] = m_end;
  size[0] = count;
  auto file_space = h5_own(H5Dget_space(m_dset), H5Sclose, "H5Dget_space", m_file);
  h5_check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, size.data(),
                               nullptr),
           "H5Sselect_hyperslab", m_file);
  auto mem_space = h5_own(H5Screate_simple(static_cast<int>(size.size()), size.data(), nullptr),
                          H5Sclose, "H5Screate_simple", m_file);
  h5_check(H5Dread(m_dset, m_mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, dest.data()),
           fmt::format("H5Dread {} rows [{}, {})", m_path, m_end, m_end + count), m_file);
  m_end += count;
}

}  // namespace ddstage::formats::detail
