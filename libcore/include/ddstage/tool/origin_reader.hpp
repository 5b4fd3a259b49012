// Reads samples straight from the origin files through an Index: one pread per entry.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <unordered_map>
#include <vector>

#include "ddstage/index.hpp"
#include "ddstage/tool/file_descriptor.hpp"
#include "ddstage/tool/splice_copier.hpp"

namespace ddstage {

/// A file whose shared mapping from offset 0 starts at `base`.
struct DestinationFile {
  const FileDescriptor* file = nullptr;
  const std::byte* base = nullptr;
};

struct OriginReaderOptions {
  /// Check each row against the index: a row checksummed on its own directly, a row of a
  /// multi-row block by reading and hashing the whole block (once per batch) and comparing.
  bool verify = false;
  bool allow_stale = false;  ///< skip the size/mtime check when a file is first opened
  /// Open files kept cached; 0 picks a quarter of the open-file limit (at most 1024). When the
  /// cache is full it is emptied: a batch visits files in order, so little is reopened.
  std::size_t max_open_files = 0;
  /// Set when every destination lies in this file's mapping (a shared-memory segment being
  /// loaded): rows read straight into their destination are then copied file to file
  /// (SpliceCopier), falling back to pread where the source cannot splice.
  DestinationFile destination;
};

/// One (sample, field) to read and where its bytes go (entry.length bytes).
struct EntryRead {
  uint64_t sample;
  uint32_t field;
  std::byte* dest;
};

/// Per-thread reader of origin files. Caches open fds (bounded) and checks each file's
/// freshness the first time it opens it, so a batch touching few files of a million-file
/// dataset stats only those. Not thread-safe: give each thread its own (they share the Index).
class OriginReader {
 public:
  OriginReader(const Index& index, OriginReaderOptions options = {});

  /// Total bytes of field `field` for ids (repeats counted). Throws UsageError for a bad id.
  uint64_t batch_bytes(uint32_t field, std::span<const uint64_t> ids) const;
  /// Reads the rows of ids into dest, concatenated in the order asked. Within the batch the
  /// preads are issued sorted by (file, offset), and entries adjacent in a file are coalesced
  /// into one pread. dest.size() must equal batch_bytes().
  void read(uint32_t field, std::span<const uint64_t> ids, std::span<std::byte> dest);
  /// Bytes of every field of one sample.
  uint64_t sample_bytes(uint64_t sample) const;
  /// Reads every field of one sample into dest, concatenated in field order (one pread when
  /// the fields lie next to each other in the file, as HDF5 groups usually do).
  void read_sample(uint64_t sample, std::span<std::byte> dest);
  /// Reads arbitrary entries, each to its own destination: how a store rank loads its shard
  /// (one pread per run of entries adjacent in a file, whatever the destinations).
  void read_entries(std::span<const EntryRead> reads);
  /// Reads one entry into dest (sized entry.length) and returns whether its block's checksum
  /// matches (reading the whole block when it has several rows) and the row is that block's.
  bool read_and_check(uint64_t sample, uint32_t field, std::span<std::byte> dest);
  /// Whether row holds (sample, field)'s bytes as the index checksums them: a row checksummed
  /// on its own directly, else against its block read from origin and verified once (the
  /// checksums of the verified blocks' rows are kept, 8 bytes a row, so rows checked at random
  /// read each block once): how benches check what they timed.
  bool check_row(uint64_t sample, uint32_t field, std::span<const std::byte> row);
  /// Reads the rows of a block of field back to back into bytes (resized) and returns whether
  /// their checksum is the block's.
  bool read_block(uint32_t field, const Block& block, std::vector<std::byte>& bytes);

 private:
  /// One entry to read and where its bytes go.
  struct Request {
    Entry entry;
    std::byte* dest;
    uint64_t sample;
    uint32_t field;
  };
  const FileDescriptor& fd_for(uint32_t file);
  void check_ids(std::span<const uint64_t> ids) const;
  /// Sorts m_requests by (file, offset), preads each run of adjacent entries at once, verifies.
  void execute();
  /// ChecksumError unless every request's row matches its block.
  void verify_requests();
  /// The ChecksumError for request r's block: names the file, the block's samples (when it
  /// has several rows), and r's sample and field.
  [[noreturn]] void throw_mismatch(const Request& r, const Block& block) const;
  void read_run(std::size_t begin, std::size_t end);
  /// Bytes of fd at offset straight into dest: file to file into options.destination when the
  /// run is long enough and the source splices, else one pread.
  void read_into(const FileDescriptor& fd, uint64_t offset, std::span<std::byte> dest);

  const Index* m_index;
  OriginReaderOptions m_options;
  std::unordered_map<uint32_t, FileDescriptor> m_fds;
  std::vector<bool> m_checked;  // files whose freshness was checked, cached or not
  // Reused across batches: no allocation per call once warm.
  std::vector<Request> m_requests;
  std::vector<std::byte> m_scratch;
  std::vector<std::byte> m_block;  // a block being verified
  std::map<std::pair<uint32_t, uint64_t>, std::vector<uint64_t>>
      m_verified_rows;                 // check_row: (field, block) -> its rows' checksums
  std::vector<std::size_t> m_grouped;  // requests of multi-row blocks, by block
  SpliceCopier m_splice;               // used only with options.destination
};

}  // namespace ddstage
