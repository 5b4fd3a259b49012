// Attaching to a running store and reading batches from it, with no MPI in the client.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "ddstage/device_buffer.hpp"
#include "ddstage/index.hpp"
#include "ddstage/settings.hpp"
#include "ddstage/store_descriptor.hpp"

namespace ddstage {

class Dataset;
class OriginDataset;
class Store;
namespace detail {
class ReaderBackend;
struct ServedDataset;
}  // namespace detail

/// Per-thread reader of one dataset, of a served store (Dataset::reader), an embedded one
/// (Store::reader) or its origin files (OriginDataset::reader): owns its transport state, shares no
/// lock with other readers. get_batch groups ids by owner rank, coalesces adjacent rows and copies
/// them into the caller's buffer in the caller's order.
class Reader {
 public:
  Reader(Reader&&) noexcept;
  Reader& operator=(Reader&&) noexcept;
  ~Reader();

  /// Total bytes of `field` for ids (repeats counted). UsageError for an unknown field or an id
  /// out of range, before anything is read.
  uint64_t batch_bytes(const std::string& field, std::span<const uint64_t> ids) const;
  /// Per-id sizes of `field`, for variable-length rows (sizes.size() == ids.size()).
  void row_sizes(const std::string& field, std::span<const uint64_t> ids,
                 std::span<uint64_t> sizes) const;
  /// Reads the rows of ids (any order, repeats allowed) into dest, concatenated in the order
  /// asked; dest.size() must equal batch_bytes(). With verify, each row's checksum is checked
  /// against the index (ChecksumError naming sample, field and rank). Bad input is a
  /// UsageError before anything is read. Served store only: every rank the batch touches
  /// is checked once per call, before anything is copied: a rank whose process is gone fails
  /// with a run-time Error naming rank, pid and host. Ranks read over libfabric that make no
  /// progress for read_timeout fail the batch naming them; a rank on another host that serves
  /// no libfabric endpoint is a UsageError. The reader stays usable for the other ranks. A
  /// dataset replaced (`load --replace`) or unloaded since open() fails every later batch with
  /// a run-time Error saying so ("was replaced ...; reopen it"): open it again (never reopened
  /// behind the caller's back: the new load may hold other samples). A batch that meets the
  /// replace half-way waits up to read_timeout for store.yaml to say so. Without verify,
  /// bytes that rotted on disk with an unchanged size and mtime come back as they are.
  void get_batch(const std::string& field, std::span<const uint64_t> ids, std::span<std::byte> dest,
                 bool verify = false);
  /// The same into device memory, by the `gpu.path` setting: staged (rows gathered in this
  /// reader's pinned host buffer, then one copy to dest), direct (one device copy per run of
  /// rows from the mapped shared memory) or auto (what `ddstage bench` cached for this node,
  /// else staged). Either way the copies go on dest.stream and the call returns after one
  /// event wait on it. Error "no GPU: <reason>" when no built runtime has dest.device; rows
  /// read over libfabric need staged (direct is then a UsageError, auto stages and says so).
  /// With verify the rows are checked on the host: in the bounce buffer (staged) or copied
  /// back from dest (direct).
  void get_batch(const std::string& field, std::span<const uint64_t> ids, const DeviceBuffer& dest,
                 bool verify = false);

 private:
  friend class Dataset;
  friend class OriginDataset;
  friend class Store;
  explicit Reader(std::unique_ptr<detail::ReaderBackend> reader);
  std::unique_ptr<detail::ReaderBackend> m;
};

/// A dataset of a running store: its index and the mapped shard regions of every rank.
class Dataset {
 public:
  Dataset(Dataset&&) noexcept;
  Dataset& operator=(Dataset&&) noexcept;
  ~Dataset();

  const Index& index() const noexcept;
  const std::string& name() const noexcept;
  /// A new reader for the calling thread.
  Reader reader() const;

 private:
  friend class Client;
  explicit Dataset(std::shared_ptr<const detail::ServedDataset> data);
  std::shared_ptr<const detail::ServedDataset> m;
};

/// A client of a store served by `ddstage serve`: reads DIR/store.yaml, maps same-node
/// ranks' shared-memory regions read-only. Needs no MPI. Ranks on other hosts do not stop
/// open(): only reads of their samples fail, so a single-node subset of a store still works.
class Client {
 public:
  /// UsageError when DIR holds no running store (no descriptor, or its rank 0 is gone).
  /// settings: `transport` (auto: shared memory on this node, libfabric to other nodes; shm;
  /// fabric: every rank over libfabric), fabric.* and read_timeout for libfabric reads.
  explicit Client(const std::filesystem::path& dir, Settings settings = {});

  const StoreDescriptor& descriptor() const noexcept { return m_descriptor; }
  /// Opens a loaded dataset, from store.yaml as it is now; UsageError listing the loaded ones
  /// when there is none of that name. While the dataset is being replaced, waits up to
  /// read_timeout for the new one, then fails with a run-time Error saying it is being replaced.
  Dataset open(const std::string& name) const;

 private:
  std::filesystem::path m_dir;
  StoreDescriptor m_descriptor;
  Settings m_settings;
};

}  // namespace ddstage
