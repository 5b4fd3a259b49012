#include "ddstage/store_descriptor.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstddef>
#include <span>

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include "ddstage/error.hpp"
#include "ddstage/file_descriptor.hpp"
#include "yaml_keys.hpp"

namespace ddstage {
namespace {

namespace fs = std::filesystem;
using detail::require;
using detail::optional_key;

/// The list at key; IndexError when it is missing or not a list.
YAML::Node require_list(const YAML::Node& node, const std::string& key, const fs::path& file) {
  auto v = node[key];
  if (!v) throw IndexError(file.string() + ": missing key '" + key + "'");
  if (!v.IsSequence()) throw IndexError(file.string() + ": key '" + key + "' is not a list");
  return v;
}

/// Subscripting a scalar throws yaml-cpp's own exception, so list items are checked first.
void require_map(const YAML::Node& node, const fs::path& file, const std::string& where) {
  if (!node.IsMap()) {
    throw IndexError(file.string() + ": '" + where.substr(0, where.size() - 1) + "' is not a map");
  }
}

bool is_token(const std::string& s) {
  return s.size() == 32 && s.find_first_not_of("0123456789abcdef") == std::string::npos;
}

void emit_rank(YAML::Emitter& out, const RankInfo& r) {
  out << YAML::BeginMap;
  out << YAML::Key << "rank" << YAML::Value << r.rank;
  out << YAML::Key << "host" << YAML::Value << r.host;
  out << YAML::Key << "pid" << YAML::Value << r.pid;
  out << YAML::Key << "transports" << YAML::Value << YAML::Flow << r.transports;
  out << YAML::Key << "memory_limit" << YAML::Value << r.memory_limit;
  if (!r.fabric_provider.empty()) {
    out << YAML::Key << "fabric_provider" << YAML::Value << r.fabric_provider;
    out << YAML::Key << "fabric_address" << YAML::Value << r.fabric_address;
  }
  out << YAML::EndMap;
}

void emit_dataset(YAML::Emitter& out, const StoreDataset& d) {
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << d.name;
  out << YAML::Key << "index" << YAML::Value << d.index.string();
  out << YAML::Key << "boundaries" << YAML::Value << YAML::Flow << d.boundaries;
  out << YAML::Key << "segments" << YAML::Value << YAML::Flow << d.segments;
  out << YAML::Key << "region_bytes" << YAML::Value << YAML::Flow << d.region_bytes;
  out << YAML::Key << "index_fingerprint" << YAML::Value << d.index_fingerprint;
  if (!d.fabric_keys.empty()) {
    out << YAML::Key << "fabric_keys" << YAML::Value << YAML::Flow << d.fabric_keys;
    out << YAML::Key << "fabric_bases" << YAML::Value << YAML::Flow << d.fabric_bases;
  }
  out << YAML::EndMap;
}

std::string emit(const StoreDescriptor& d) {
  YAML::Emitter out;
  out << YAML::Comment(
      "ddstage store descriptor: private to the user who started the store (mode 0600)");
  out << YAML::BeginMap;
  out << YAML::Key << "format_version" << YAML::Value << d.format_version;
  out << YAML::Key << "token" << YAML::Value << d.token;
  // Quoted: 12 hex digits can look like a number to YAML readers (scripts, tests).
  out << YAML::Key << "id" << YAML::Value << YAML::DoubleQuoted << d.id;
  out << YAML::Key << "control" << YAML::Value << d.control;
  out << YAML::Key << "started" << YAML::Value << d.started;
  out << YAML::Key << "ranks" << YAML::Value << YAML::BeginSeq;
  for (const auto& r : d.ranks) emit_rank(out, r);
  out << YAML::EndSeq;
  out << YAML::Key << "datasets" << YAML::Value << YAML::BeginSeq;
  for (const auto& ds : d.datasets) emit_dataset(out, ds);
  out << YAML::EndSeq;
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

RankInfo parse_rank(const YAML::Node& node, std::size_t i, const fs::path& file) {
  const std::string where = "ranks[" + std::to_string(i) + "].";
  require_map(node, file, where);
  RankInfo r;
  r.rank = require<int>(node, "rank", file, where);
  r.host = require<std::string>(node, "host", file, where);
  r.pid = require<int64_t>(node, "pid", file, where);
  r.transports = require<std::vector<std::string>>(node, "transports", file, where);
  r.memory_limit = require<uint64_t>(node, "memory_limit", file, where);
  r.fabric_provider = optional_key<std::string>(node, "fabric_provider", file, where, "");
  r.fabric_address = optional_key<std::string>(node, "fabric_address", file, where, "");
  return r;
}

/// Parses one dataset and checks its per-rank lists against the rank count, so readers can
/// index them by rank without checking again.
StoreDataset parse_dataset(const YAML::Node& node, std::size_t i, std::size_t ranks,
                           const fs::path& file) {
  const std::string where = "datasets[" + std::to_string(i) + "].";
  require_map(node, file, where);
  StoreDataset d;
  d.name = require<std::string>(node, "name", file, where);
  d.index = require<std::string>(node, "index", file, where);
  d.boundaries = require<std::vector<uint64_t>>(node, "boundaries", file, where);
  d.segments = require<std::vector<std::string>>(node, "segments", file, where);
  d.region_bytes = require<std::vector<uint64_t>>(node, "region_bytes", file, where);
  d.index_fingerprint = require<uint64_t>(node, "index_fingerprint", file, where);
  d.fabric_keys = optional_key<std::vector<uint64_t>>(node, "fabric_keys", file, where, {});
  d.fabric_bases = optional_key<std::vector<uint64_t>>(node, "fabric_bases", file, where, {});
  const bool fabric_ok = (d.fabric_keys.empty() && d.fabric_bases.empty()) ||
                         (d.fabric_keys.size() == ranks && d.fabric_bases.size() == ranks);
  if (d.boundaries.size() != ranks + 1 || d.segments.size() != ranks ||
      d.region_bytes.size() != ranks || !fabric_ok) {
    throw IndexError(file.string() + ": dataset '" + d.name +
                     "' does not have one shard per rank (" + std::to_string(ranks) + " ranks)");
  }
  return d;
}

StoreDescriptor parse(const YAML::Node& root, const fs::path& file) {
  if (!root.IsMap()) throw IndexError(file.string() + " is not a ddstage store descriptor");
  StoreDescriptor d;
  // The version comes first: a newer layout may lack keys this build requires.
  d.format_version = require<uint32_t>(root, "format_version", file);
  if (d.format_version > store_format_version) {
    throw IndexError(file.string() + " was written by a newer ddstage (store format " +
                     std::to_string(d.format_version) + "; this build reads up to " +
                     std::to_string(store_format_version) + ")");
  }
  d.token = require<std::string>(root, "token", file);
  if (!is_token(d.token)) throw IndexError(file.string() + ": key 'token' is not 32 hex digits");
  d.id = root["id"] ? require<std::string>(root, "id", file) : "";
  d.control = require<std::string>(root, "control", file);
  d.started = root["started"] ? require<std::string>(root, "started", file) : "";
  const auto ranks = require_list(root, "ranks", file);
  for (std::size_t i = 0; i < ranks.size(); ++i) d.ranks.push_back(parse_rank(ranks[i], i, file));
  if (d.ranks.empty()) throw IndexError(file.string() + ": no ranks");
  const auto datasets = require_list(root, "datasets", file);
  for (std::size_t i = 0; i < datasets.size(); ++i) {
    d.datasets.push_back(parse_dataset(datasets[i], i, d.ranks.size(), file));
  }
  return d;
}

std::string read_text(const fs::path& dir, const fs::path& file) {
  FileDescriptor fd;
  try {
    fd = FileDescriptor::open(file, O_RDONLY);
  } catch (const IoError& e) {
    if (e.native_code() != ENOENT && e.native_code() != ENOTDIR) throw;
    throw UsageError("no store at " + dir.string() +
                     " (no store.yaml; start one with `ddstage serve --store " + dir.string() +
                     "`)");
  }
  std::string text(fd.size(), '\0');
  fd.pread_exact(std::as_writable_bytes(std::span(text)), 0);
  return text;
}

/// Removes the temporary file unless it was renamed into place.
class TempFile {
 public:
  explicit TempFile(fs::path path) : m_path(std::move(path)) {}
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (!m_committed && ::unlink(m_path.c_str()) != 0 && errno != ENOENT) {
      spdlog::warn("cannot remove {}: errno {}", m_path.string(), errno);
    }
  }
  const fs::path& path() const noexcept { return m_path; }
  void committed() noexcept { m_committed = true; }

 private:
  fs::path m_path;
  bool m_committed = false;
};

}  // namespace

StoreDescriptor StoreDescriptor::read(const fs::path& dir) {
  const fs::path file = path_in(dir);
  const std::string text = read_text(dir, file);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    throw IndexError(file.string() + " is not valid YAML: " + e.msg);
  }
  return parse(root, file);
}

void StoreDescriptor::write(const fs::path& dir) const {
  const fs::path file = path_in(dir);
  // A unique name with O_EXCL: a leftover from a crashed writer, or a link planted there, is
  // never opened.
  TempFile temp(dir / (".store.yaml." + random_token().substr(0, 12) + ".tmp"));
  auto fd = FileDescriptor::open(temp.path(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  // The token is a secret: 0600 exactly, whatever the umask (open's mode is masked by it).
  if (::fchmod(fd.get(), 0600) != 0) throw IoError("fchmod " + temp.path().string(), errno);
  const std::string text = emit(*this);
  fd.write_all(std::as_bytes(std::span(text)));
  fd.sync();
  // No directory fsync: the descriptor describes live processes, so after a crash of the node
  // there is no store for it to describe anyway.
  if (::rename(temp.path().c_str(), file.c_str()) != 0) {
    throw IoError("rename " + temp.path().string() + " to " + file.string(), errno,
                  {.file = file.string()});
  }
  temp.committed();
}

const StoreDataset& StoreDescriptor::dataset(const std::string& name) const {
  std::string loaded;
  for (const auto& d : datasets) {
    if (d.name == name) return d;
    loaded += (loaded.empty() ? "" : ", ") + d.name;
  }
  throw UsageError("no dataset '" + name + "' in the store at " + control + " (" +
                   (loaded.empty() ? "none loaded" : "loaded: " + loaded) + ")");
}

std::string random_token() {
  std::array<unsigned char, 16> bytes{};
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::getrandom(bytes.data() + done, bytes.size() - done, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw IoError("getrandom", errno);
    }
    done += static_cast<std::size_t>(n);
  }
  static constexpr char digits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * bytes.size());
  for (unsigned char b : bytes) {
    out += digits[b >> 4];
    out += digits[b & 0xf];
  }
  return out;
}

}  // namespace ddstage
