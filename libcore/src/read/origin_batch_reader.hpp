// A Reader over the origin files themselves (OriginDataset): each batch one sorted run of
// preads through the index, into host memory or staged into device memory.
#pragma once

#include <memory>
#include <optional>

#include "ddstage/index.hpp"
#include "ddstage/settings.hpp"
#include "ddstage/tool/origin_reader.hpp"
#include "gpu/gpu_destination.hpp"
#include "read/reader_backend.hpp"

namespace ddstage::detail {

/// One per thread, as every reader. Its files are opened, and checked against the index's
/// sizes and times (unless origin.allow_stale), on first use.
class OriginBatchReader final : public ReaderBackend {
 public:
  OriginBatchReader(std::shared_ptr<const Index> index, const Settings& settings);

  uint64_t batch_bytes(const std::string& field, std::span<const uint64_t> ids) const override;
  void row_sizes(const std::string& field, std::span<const uint64_t> ids,
                 std::span<uint64_t> sizes) const override;
  void get_batch(const std::string& field, std::span<const uint64_t> ids, std::span<std::byte> dest,
                 bool verify) override;
  /// Always staged: the rows come from files, so gpu.path=direct is a UsageError saying so.
  void get_batch(const std::string& field, std::span<const uint64_t> ids, const DeviceBuffer& dest,
                 bool verify) override;

 private:
  /// The reader checking rows (verify) or not: OriginReader fixes that when it is made.
  OriginReader& origin(bool verify);

  std::shared_ptr<const Index> m_index;  // outlives the OriginReaders that point into it
  bool m_allow_stale;
  std::string m_gpu_path;
  std::optional<OriginReader> m_plain;
  std::optional<OriginReader> m_checked;
  std::optional<GpuDestination> m_gpu;
};

}  // namespace ddstage::detail
