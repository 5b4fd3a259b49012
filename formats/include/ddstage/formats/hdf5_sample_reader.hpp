// The baseline `ddstage bench origin` measures index reads against: samples read through the
// plain HDF5 API, one call sequence per sample, the way a naive PyTorch Dataset does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "ddstage/index.hpp"

namespace ddstage::formats {

/// Reads samples of an index flattened from HDF5 through the HDF5 API rather than the index:
/// groups mode opens the sample's group and dataset and H5Dreads it on every call; rows mode
/// keeps the datasets open and H5Dreads a hyperslab of row i (ragged: the two offsets, then
/// the rows between them). The source files are opened once, in the constructor.
/// Bytes read equal the index's bytes for the same entry. Not thread-safe.
class Hdf5SampleReader {
 public:
  /// UsageError when the index was not flattened from HDF5 or its files are gone.
  explicit Hdf5SampleReader(const Index& index);
  Hdf5SampleReader(Hdf5SampleReader&&) noexcept;
  Hdf5SampleReader& operator=(Hdf5SampleReader&&) noexcept;
  ~Hdf5SampleReader();

  /// Reads (sample, field) into the front of dest and returns the number of bytes read.
  /// UsageError for an id out of range; Error when dest is too small or HDF5 fails.
  uint64_t read(uint64_t sample, uint32_t field, std::span<std::byte> dest);

 private:
  struct Impl;
  std::unique_ptr<Impl> m;
};

}  // namespace ddstage::formats
