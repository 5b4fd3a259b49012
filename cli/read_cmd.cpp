#include "read_cmd.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include <spdlog/spdlog.h>

#include "ddstage/error.hpp"
#include "ddstage/file_descriptor.hpp"
#include "ddstage/id_spec.hpp"
#include "ddstage/index.hpp"
#include "ddstage/origin_reader.hpp"
#include "progress_line.hpp"

namespace ddstage::cli {
namespace {

/// Bytes per batch handed to OriginReader: bounds memory for huge --ids lists.
constexpr uint64_t batch_bytes_limit = 64ull << 20;

struct ReadOptions {
  std::string dataset;
  std::string ids;
  std::string field;
  std::string output;
  bool verify = false;
  bool allow_stale = false;
};

/// Output file written beside its final name and renamed on success, so a failed read never
/// leaves a truncated file that looks complete. "-" or empty is stdout.
class Output {
 public:
  explicit Output(const std::string& path) : m_path(path) {
    std::error_code ec;
    if (std::filesystem::is_directory(path, ec)) throw UsageError("output " + path + " is a directory");
    if (path.empty() || path == "-") {
      m_fd = FileDescriptor(::dup(STDOUT_FILENO), "stdout");
    } else {
      m_tmp = path + ".partial";
      m_fd = FileDescriptor::open(m_tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    }
  }
  ~Output() {
    if (!m_tmp.empty() && !m_done) {
      std::error_code ec;
      std::filesystem::remove(m_tmp, ec);
    }
  }
  void write(std::span<const std::byte> bytes) { m_fd.write_all(bytes); }
  void finish() {
    m_fd = FileDescriptor();
    if (!m_tmp.empty() && ::rename(m_tmp.c_str(), m_path.c_str()) != 0) {
      throw IoError("cannot write " + m_path, errno, {.file = m_path});
    }
    m_done = true;
  }

 private:
  std::string m_path;
  std::string m_tmp;
  FileDescriptor m_fd;
  bool m_done = false;
};

void run_read(const ReadOptions& opts, const CliContext& ctx) {
  auto settings = ctx.resolve_settings();
  auto index = Index::open(opts.dataset);
  const uint32_t field = opts.field.empty() ? index.default_field() : index.field_id(opts.field);
  const auto ids = parse_ids(opts.ids, index.samples());
  OriginReader reader(index, {.verify = opts.verify,
                              .allow_stale = opts.allow_stale || settings.get_bool("origin.allow_stale")});
  Output out(opts.output);
  std::vector<std::byte> buffer;
  uint64_t total = 0;
  for (std::size_t begin = 0; begin < ids.size();) {
    // Grow the batch until it reaches the byte limit (always at least one id).
    std::size_t end = begin;
    uint64_t bytes = 0;
    while (end < ids.size() && (end == begin || bytes + index.entry(ids[end], field).length <= batch_bytes_limit)) {
      bytes += index.entry(ids[end++], field).length;
    }
    buffer.resize(bytes);
    reader.read(field, std::span(ids).subspan(begin, end - begin), buffer);
    out.write(buffer);
    total += bytes;
    begin = end;
  }
  out.finish();
  spdlog::debug("read {} samples, {} of field {}{}", ids.size(), human_bytes(static_cast<double>(total)),
                index.fields()[field].name, opts.verify ? ", checksums verified" : "");
}

}  // namespace

void setup_read(CLI::App& app, CliContext& ctx) {
  auto opts = std::make_shared<ReadOptions>();
  auto* sub = app.add_subcommand("read", "Write samples' raw bytes, concatenated in the order asked");
  sub->add_option("dataset", opts->dataset, "The index directory (DATASET.ddx)")->required();
  sub->add_option("--ids", opts->ids, "Sample ids: 0,7,10-19 (inclusive ranges) or @FILE (one per line)")->required();
  sub->add_option("--field", opts->field, "Field to read (required when the dataset has several)");
  sub->add_option("-o,--output", opts->output, "Output file (default: stdout)");
  sub->add_flag("--verify", opts->verify, "Check every sample's checksum (exit 1 on mismatch)");
  sub->add_flag("--allow-stale", opts->allow_stale, "Read sources that changed after flattening");
  sub->callback([opts, &ctx] { run_read(*opts, ctx); });
}

}  // namespace ddstage::cli
