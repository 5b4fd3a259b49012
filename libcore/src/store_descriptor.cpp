#include "ddstage/store_descriptor.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstddef>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "ddstage/error.hpp"
#include "ddstage/tool/atomic_file.hpp"
#include "ddstage/tool/file_descriptor.hpp"
#include "yaml_keys.hpp"
#include "yaml_limits.hpp"

namespace ddstage {
namespace {

namespace fs = std::filesystem;
using detail::optional_key;
using detail::require;

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
  if (!r.control.empty()) out << YAML::Key << "control" << YAML::Value << r.control;
  if (!r.tiers.empty()) out << YAML::Key << "tiers" << YAML::Value << YAML::Flow << r.tiers;
  if (r.lost) out << YAML::Key << "lost" << YAML::Value << true;
  out << YAML::EndMap;
}

void emit_region(YAML::Emitter& out, const StoreRegion& g) {
  out << YAML::Flow << YAML::BeginMap;
  out << YAML::Key << "rank" << YAML::Value << g.rank;
  out << YAML::Key << "first" << YAML::Value << g.first;
  out << YAML::Key << "last" << YAML::Value << g.last;
  out << YAML::Key << "segment" << YAML::Value << g.segment;
  out << YAML::Key << "bytes" << YAML::Value << g.bytes;
  out << YAML::Key << "tier" << YAML::Value << g.tier;
  if (g.lazy) out << YAML::Key << "lazy" << YAML::Value << true;
  if (g.fabric) {
    out << YAML::Key << "fabric_key" << YAML::Value << g.fabric_key;
    out << YAML::Key << "fabric_base" << YAML::Value << g.fabric_base;
  }
  out << YAML::EndMap;
}

void emit_dataset(YAML::Emitter& out, const StoreDataset& d) {
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << d.name;
  out << YAML::Key << "index" << YAML::Value << d.index.string();
  out << YAML::Key << "index_fingerprint" << YAML::Value << d.index_fingerprint;
  out << YAML::Key << "replicas" << YAML::Value << d.replicas;
  out << YAML::Key << "regions" << YAML::Value << YAML::BeginSeq;
  for (const auto& g : d.regions) emit_region(out, g);
  out << YAML::EndSeq;
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
  r.control = optional_key<std::string>(node, "control", file, where, "");
  r.tiers = optional_key<std::vector<std::string>>(node, "tiers", file, where, {});
  r.lost = optional_key<bool>(node, "lost", file, where, false);
  return r;
}

StoreRegion parse_region(const YAML::Node& node, const std::string& where, const fs::path& file) {
  require_map(node, file, where);
  StoreRegion g;
  g.rank = require<int>(node, "rank", file, where);
  g.first = require<uint64_t>(node, "first", file, where);
  g.last = require<uint64_t>(node, "last", file, where);
  g.segment = require<std::string>(node, "segment", file, where);
  g.bytes = require<uint64_t>(node, "bytes", file, where);
  g.tier = require<std::string>(node, "tier", file, where);
  g.lazy = optional_key<bool>(node, "lazy", file, where, false);
  g.fabric = static_cast<bool>(node["fabric_key"]);
  if (g.fabric) {
    g.fabric_key = require<uint64_t>(node, "fabric_key", file, where);
    g.fabric_base = require<uint64_t>(node, "fabric_base", file, where);
  }
  return g;
}

/// Parses one dataset and checks its regions against the rank count, so readers can index
/// ranks by a region's rank without checking again. Whether the regions cover the index's
/// samples is checked by who opens the index (Placement).
StoreDataset parse_dataset(const YAML::Node& node, std::size_t i, std::size_t ranks,
                           const fs::path& file) {
  const std::string where = "datasets[" + std::to_string(i) + "].";
  require_map(node, file, where);
  StoreDataset d;
  d.name = require<std::string>(node, "name", file, where);
  d.index = require<std::string>(node, "index", file, where);
  d.index_fingerprint = require<uint64_t>(node, "index_fingerprint", file, where);
  d.replicas = require<int>(node, "replicas", file, where);
  const auto regions = require_list(node, "regions", file);
  for (std::size_t g = 0; g < regions.size(); ++g) {
    const std::string at = where + "regions[" + std::to_string(g) + "].";
    StoreRegion region = parse_region(regions[g], at, file);
    if (region.rank < 0 || static_cast<std::size_t>(region.rank) >= ranks ||
        region.first > region.last) {
      throw IndexError(fmt::format("{}: {} names rank {} with samples {}..{} ({} ranks)",
                                   file.string(), at.substr(0, at.size() - 1), region.rank,
                                   region.first, region.last, ranks));
    }
    d.regions.push_back(std::move(region));
  }
  if (d.replicas < 0 || d.regions.empty()) {
    throw IndexError(file.string() + ": dataset '" + d.name +
                     "' has no regions or a negative replica count");
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
  if (d.format_version < 2 && datasets.size() != 0) {
    throw IndexError(file.string() +
                     " lists datasets in store format 1 (an older ddstage, one region per rank): "
                     "restart the store with this ddstage");
  }
  for (std::size_t i = 0; i < datasets.size(); ++i) {
    d.datasets.push_back(parse_dataset(datasets[i], i, d.ranks.size(), file));
  }
  return d;
}

UsageError no_store(const fs::path& dir) {
  return UsageError("no store at " + dir.string() +
                    " (no store.yaml; start one with `ddstage serve --store " + dir.string() +
                    "`)");
}

/// Whoever can write the store directory or store.yaml decides which segments, hosts and
/// processes this user's commands read, signal or stop: both must be the user's own.
void check_trusted(const struct stat& st, const fs::path& path) {
  const uid_t me = ::geteuid();
  if (st.st_uid != me) {
    throw UsageError(
        fmt::format("{} is owned by uid {}, not you (uid {}): a store is trusted only in a "
                    "directory and store.yaml of your own (see ddstage-serve(1))",
                    path.string(), st.st_uid, me));
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    const char* who = (st.st_mode & S_IWOTH) == 0 ? "its group"
                      : (st.st_mode & S_IWGRP)    ? "its group and other users"
                                                  : "other users";
    throw UsageError(
        fmt::format("{} is writable by {} (mode {:04o}): a store is trusted only in a directory "
                    "and store.yaml only you can write; run `chmod go-w {}`",
                    path.string(), who, st.st_mode & 07777, path.string()));
  }
}

struct stat stat_of(const FileDescriptor& fd) {
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw IoError("fstat " + fd.path().string(), errno);
  return st;
}

/// The store directory, opened and checked: store.yaml is then opened relative to this very
/// directory, so swapping the path afterwards changes nothing.
FileDescriptor open_store_dir(const fs::path& dir) {
  const int raw = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (raw < 0 && (errno == ENOENT || errno == ENOTDIR)) throw no_store(dir);
  if (raw < 0) throw IoError("open store directory " + dir.string(), errno, {.file = dir.string()});
  FileDescriptor fd(raw, dir);
  check_trusted(stat_of(fd), dir);
  return fd;
}

/// store.yaml, opened without following a link (O_NOFOLLOW) or blocking on a FIFO, and checked
/// on the opened file itself: no window between the check and the read.
FileDescriptor open_descriptor(const fs::path& dir, const fs::path& file) {
  const auto dir_fd = open_store_dir(dir);
  const int raw = ::openat(dir_fd.get(), file.filename().c_str(),
                           O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (raw < 0 && errno == ENOENT) throw no_store(dir);
  if (raw < 0 && errno == ELOOP) {
    throw UsageError(
        file.string() +
        " is a symbolic link: refused (a store's descriptor must be a file of its own)");
  }
  if (raw < 0) throw IoError("open " + file.string(), errno, {.file = file.string()});
  FileDescriptor fd(raw, file);
  const auto st = stat_of(fd);
  if (!S_ISREG(st.st_mode)) throw UsageError(file.string() + " is not a regular file: refused");
  check_trusted(st, file);
  return fd;
}

/// mkdir with mode 0700, then chmod: mkdir's mode is masked by the umask, which may also take
/// the owner's own bits. Missing parents are made the same way.
void make_private_directory(const fs::path& dir) {
  if (::mkdir(dir.c_str(), 0700) != 0) {
    if (errno == EEXIST) return;
    const fs::path parent = dir.parent_path();
    if (errno != ENOENT || parent.empty() || parent == dir)
      throw IoError("mkdir " + dir.string(), errno);
    make_private_directory(parent);
    if (::mkdir(dir.c_str(), 0700) != 0) {
      if (errno == EEXIST) return;
      throw IoError("mkdir " + dir.string(), errno);
    }
  }
  if (::chmod(dir.c_str(), 0700) != 0) throw IoError("chmod " + dir.string(), errno);
}

}  // namespace

StoreDescriptor StoreDescriptor::read(const fs::path& dir) {
  const fs::path file = path_in(dir);
  const auto fd = open_descriptor(dir, file);
  return parse(detail::load_yaml(fd, file.string(), detail::descriptor_yaml_limits), file);
}

void StoreDescriptor::prepare_directory(const fs::path& dir) {
  make_private_directory(dir);
  open_store_dir(dir);
}

void StoreDescriptor::write(const fs::path& dir) const {
  // The token is a secret: 0600 exactly, whatever the umask. No directory fsync: the
  // descriptor describes live processes, so after a crash of the node there is no store for
  // it to describe anyway.
  AtomicFile file(path_in(dir), 0600);
  file.write(emit(*this));
  file.commit();
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
