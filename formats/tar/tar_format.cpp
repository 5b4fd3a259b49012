// The "tar" format: tar shards indexed in place, every regular member's bytes where they lie in
// the archive; compressed shards decoded once into pack files.

#include <fcntl.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <algorithm>
#include <array>
#include <atomic>
#include <exception>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "builtin_formats.hpp"
#include "ddstage/error.hpp"
#include "ddstage/mapped_file.hpp"
#include "tar_decoder.hpp"
#include "tar_layout.hpp"
#include "tar_reader.hpp"

namespace ddstage::formats {
namespace detail {
namespace {

namespace fs = std::filesystem;

constexpr std::array tar_extensions = {".tar",    ".tar.gz", ".tgz",     ".tar.bz2", ".tbz2",
                                       ".tar.xz", ".txz",    ".tar.zst", ".tzst"};

bool has_tar_extension(const std::string& path) {
  return std::any_of(tar_extensions.begin(), tar_extensions.end(),
                     [&path](const char* ext) { return path.ends_with(ext); });
}

/// The first 512 bytes of path (fewer if it is shorter); empty if it cannot be read.
std::vector<std::byte> head_of(const std::string& path) {
  std::vector<std::byte> head(512);
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(head.data()), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<std::size_t>(std::max<std::streamsize>(in.gcount(), 0)));
  return head;
}

bool detect_tar(const FlattenRequest& request) {
  const auto& first = request.sources.front();
  std::error_code ec;
  if (first.starts_with('@') || !fs::is_regular_file(first, ec)) return false;
  return has_tar_extension(first) || has_ustar_magic(head_of(first));
}

void check_request(const FlattenRequest& request) {
  if (!request.fields.empty() || !request.groups.empty() || !request.ragged.empty()) {
    throw UsageError(
        "--field, --groups and --ragged do not apply to tar shards (their fields are the "
        "member names, or the extensions under --webdataset)");
  }
  for (const auto& source : request.sources) {
    std::error_code ec;
    const auto status = fs::status(source, ec);
    if (status.type() == fs::file_type::not_found)
      throw UsageError(fmt::format("{} does not exist", source), {.file = source});
    if (!fs::is_regular_file(status)) {
      throw UsageError(fmt::format("{} is not a file; the tar format takes tar shards (list them, "
                                   "e.g. shards/*.tar)",
                                   source),
                       {.file = source});
    }
  }
}

/// A shard's archive: the file itself, or its decoded copy when it is compressed.
struct Archive {
  FileDescriptor fd;
  bool decoded = false;
  uint64_t size = 0;  ///< when listed
};

/// Shards listed (and decoded) at once: a parallel file system or an SSD serves several
/// streams faster than one, and decoding is bound by a core.
constexpr std::size_t shards_at_once = 8;

Archive open_archive(const std::string& path, const fs::path& scratch_dir) {
  const auto compression = compression_of(head_of(path));
  if (compression.empty()) {
    auto fd = FileDescriptor::open(path, O_RDONLY);
    // Listing reads a header every few hundred KB: on a cold cache, a doubled readahead window
    // makes that ~20% faster (it reads most of the shard either way). Advisory only.
    ::posix_fadvise(fd.get(), 0, 0, POSIX_FADV_SEQUENTIAL);
    return {std::move(fd), false};
  }
  spdlog::debug("{}: decoding {} once into pack files", path, compression);
  return {decode_to_scratch(path, scratch_dir), true};
}

std::vector<FieldInfo> field_infos(const TarLayout& layout) {
  std::vector<FieldInfo> fields;
  for (const auto& name : layout.data_fields) {
    fields.push_back(
        FieldInfo{.name = name, .dtype = DType::bytes, .variable = true, .source = "tar member"});
  }
  fields.push_back(
      FieldInfo{.name = layout.label_field,
                .dtype = DType::bytes,
                .variable = true,
                .source = layout.label_field == "name" ? "tar member name" : "WebDataset key"});
  return fields;
}

/// Lists (and decodes) every shard, shards_at_once at a time. An error is the first failing
/// shard's in the given order, whatever order the threads finished in.
void list_shards(const std::vector<std::string>& sources, const fs::path& scratch,
                 std::vector<TarShard>& shards, std::vector<Archive>& archives) {
  const auto n = sources.size();
  shards.resize(n);
  archives.resize(n);
  std::vector<std::exception_ptr> errors(n);
  std::atomic<std::size_t> next{0};
  const auto work = [&] {
    for (std::size_t i; (i = next++) < n;) {
      try {
        archives[i] = open_archive(sources[i], scratch);
        archives[i].size = archives[i].fd.size();
        shards[i] = {sources[i], list_tar_members(archives[i].fd, sources[i])};
        // Plain shards are reopened when read: a thousand of them do not hold a thousand fds.
        if (!archives[i].decoded) archives[i].fd = {};
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  {
    std::vector<std::jthread> workers;
    for (std::size_t t = 0; t < std::min(n, shards_at_once); ++t) workers.emplace_back(work);
  }
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

/// A shard's bytes, mapped: entries are checksummed straight from the page cache, without the
/// copy a pread makes.
MappedFile map_archive(const TarShard& shard, const Archive& archive) {
  MappedFile map(archive.decoded ? archive.fd.path() : fs::path(shard.path),
                 MappedFile::Mode::read_only);
  if (map.bytes().size() != archive.size) {
    throw Error(ErrorKind::runtime,
                fmt::format("{} changed while being read: {} bytes when listed, {} now", shard.path,
                            archive.size, map.bytes().size()),
                {.file = shard.path});
  }
  map.advise_sequential();
  return map;
}

void flatten_tar(const FlattenRequest& request, IndexWriter& writer) {
  check_request(request);
  const fs::path scratch =
      request.scratch_dir.empty() ? fs::temp_directory_path() : request.scratch_dir;
  std::vector<TarShard> shards;
  std::vector<Archive> archives;
  list_shards(request.sources, scratch, shards, archives);
  const auto layout = request.webdataset ? webdataset_layout(shards) : member_layout(shards);
  spdlog::debug("tar: listed {} shards: {} samples", shards.size(), layout.samples.size());
  if (layout.samples.empty()) {
    throw UsageError(
        shards.size() == 1
            ? fmt::format("{} has no regular file members", shards[0].path)
            : fmt::format("none of the {} shards has a regular file member", shards.size()),
        {.file = shards[0].path});
  }
  writer.define(field_infos(layout), layout.samples.size());
  const auto width = static_cast<uint32_t>(layout.data_fields.size());
  // The ETA follows bytes: a 100 KB jpg and its 1-byte class label are not alike.
  uint64_t total = 0;
  for (const auto& sample : layout.samples) total += sample.label_length;
  for (uint64_t i = 0; i < layout.members.size(); ++i) {
    total += shards[layout.samples[i / width].shard].members[layout.members[i]].size;
  }
  writer.expect_bytes(total);

  uint64_t sample = 0;
  for (uint32_t s = 0; s < shards.size(); ++s) {
    // Recorded even when packed: the manifest names every source, and staleness covers it.
    const uint32_t file = writer.add_source(shards[s].path);
    const bool in_place = !request.pack && !archives[s].decoded;
    const auto put = [&](uint32_t field, uint64_t offset, std::span<const std::byte> bytes) {
      if (in_place) {
        writer.put_in_place(sample, field, file, offset, bytes);
      } else {
        writer.put_packed(sample, field, bytes);
      }
    };
    const auto map = map_archive(shards[s], archives[s]);
    for (; sample < layout.samples.size() && layout.samples[sample].shard == s; ++sample) {
      const auto& plan = layout.samples[sample];
      for (uint32_t f = 0; f < width; ++f) {
        const auto& member = shards[s].members[layout.members[sample * width + f]];
        put(f, member.data_offset, map.bytes().subspan(member.data_offset, member.size));
      }
      // The label's bytes are the member name's first bytes, which the reader took from the
      // archive: where they lie contiguously there, they are referenced in place too.
      const auto& named = shards[s].members[plan.label_member];
      const auto label = std::as_bytes(std::span(named.name).first(plan.label_length));
      if (in_place && named.name_offset) {
        put(width, *named.name_offset, label);
      } else {
        writer.put_packed(sample, width, label);
      }
    }
    archives[s].fd = {};  // a decoded copy's disk space is freed once its bytes are in packs
  }
}

}  // namespace
}  // namespace detail

Format tar_format() {
  return Format{.name = "tar",
                .help =
                    "tar shards (ustar, pax, GNU; .tar.gz/.bz2/.xz/.zst decoded into packs): "
                    "each member is a sample, or each key's members under --webdataset",
                .detect = &detail::detect_tar,
                .flatten = &detail::flatten_tar};
}

}  // namespace ddstage::formats
