#include "manifest.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <fstream>
#include <set>

#include <fmt/format.h>
#include <xxhash.h>
#include <yaml-cpp/yaml.h>

#include "ddstage/error.hpp"
#include "yaml_keys.hpp"
#include "yaml_limits.hpp"

namespace ddstage::detail {
namespace {

void emit_field(YAML::Emitter& out, const FieldInfo& f) {
  out << YAML::BeginMap;
  out << YAML::Key << "name" << YAML::Value << f.name;
  out << YAML::Key << "dtype" << YAML::Value << std::string(dtype_name(f.dtype));
  out << YAML::Key << "shape" << YAML::Value << YAML::Flow << f.shape;
  out << YAML::Key << "variable" << YAML::Value << f.variable;
  out << YAML::Key << "row_bytes" << YAML::Value << f.row_bytes;
  out << YAML::Key << "source" << YAML::Value << f.source;
  // Written only when present, so indexes of plain numeric fields read as they always did.
  if (!f.members.empty()) {
    out << YAML::Key << "members" << YAML::Value << YAML::BeginSeq;
    for (const auto& m : f.members) {
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value << m.name
          << YAML::Key << "dtype" << YAML::Value << std::string(dtype_name(m.dtype)) << YAML::Key
          << "offset" << YAML::Value << m.offset << YAML::Key << "shape" << YAML::Value
          << YAML::Flow << m.shape << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  if (!f.encoding.empty()) out << YAML::Key << "encoding" << YAML::Value << f.encoding;
  if (!f.enum_names.empty()) {
    out << YAML::Key << "enum" << YAML::Value << YAML::BeginSeq;
    for (const auto& e : f.enum_names) {
      out << YAML::Flow << YAML::BeginMap << YAML::Key << "name" << YAML::Value << e.name
          << YAML::Key << "value" << YAML::Value << e.value << YAML::EndMap;
    }
    out << YAML::EndSeq;
  }
  out << YAML::EndMap;
}

bool is_pack(const FileInfo& f) {
  return f.kind == FileKind::pack;
}

void emit_files(YAML::Emitter& out, const std::vector<FileInfo>& files, bool packs) {
  std::size_t listed = 0;
  out << YAML::BeginSeq;
  for (const auto& f : files) {
    if (is_pack(f) != packs || listed++ >= max_listed_files) continue;
    out << YAML::Flow << YAML::BeginMap << YAML::Key << "path" << YAML::Value << f.path << YAML::Key
        << "size" << YAML::Value << f.size << YAML::Key << "mtime_ns" << YAML::Value << f.mtime_ns;
    if (f.kind == FileKind::copied) out << YAML::Key << "copied" << YAML::Value << true;
    out << YAML::EndMap;
  }
  out << YAML::EndSeq;
}

std::size_t count_packs(const std::vector<FileInfo>& files, bool packs) {
  std::size_t n = 0;
  for (const auto& f : files) n += is_pack(f) == packs;
  return n;
}

FieldInfo parse_field(const YAML::Node& node, const std::filesystem::path& path) {
  FieldInfo f;
  f.name = require<std::string>(node, "name", path);
  auto dtype = parse_dtype(require<std::string>(node, "dtype", path));
  if (!dtype) throw IndexError(path.string() + ": field '" + f.name + "' has an unknown dtype");
  f.dtype = *dtype;
  f.shape = require<std::vector<uint64_t>>(node, "shape", path);
  f.variable = require<bool>(node, "variable", path);
  f.row_bytes = require<uint64_t>(node, "row_bytes", path);
  f.source = node["source"] ? node["source"].as<std::string>() : "";
  for (const auto& m : node["members"]) {
    FieldMember member;
    member.name = require<std::string>(m, "name", path);
    const auto member_dtype = parse_dtype(require<std::string>(m, "dtype", path));
    if (!member_dtype) {
      throw IndexError(path.string() + ": member '" + member.name + "' of field '" + f.name +
                       "' has an unknown dtype");
    }
    member.dtype = *member_dtype;
    member.offset = require<uint64_t>(m, "offset", path);
    member.shape = require<std::vector<uint64_t>>(m, "shape", path);
    f.members.push_back(std::move(member));
  }
  f.encoding = optional_key<std::string>(node, "encoding", path, "", "");
  for (const auto& e : node["enum"]) {
    f.enum_names.push_back(
        {require<std::string>(e, "name", path), require<int64_t>(e, "value", path)});
  }
  return f;
}

std::string shape_text(const FieldInfo& f) {
  return fmt::format("[{}] of {}", fmt::join(f.shape, ", "), dtype_name(f.dtype));
}

// A reader builds a numpy record dtype from the members: each must lie inside the record and
// be a plain type, or numpy refuses it (or worse, views bytes past the row).
template <typename Bad>
void check_members(const FieldInfo& f, const Bad& bad) {
  if (f.dtype != DType::structured) {
    if (!f.members.empty()) throw bad("has members but is not structured");
    return;
  }
  if (f.shape.empty() || f.shape.back() == 0) {
    throw bad("is structured but its shape has no record size as its last axis");
  }
  if (f.members.empty()) throw bad("is structured but has no members");
  const uint64_t record = f.shape.back();
  std::set<std::string> names;
  for (const auto& m : f.members) {
    if (m.name.empty() || !names.insert(m.name).second) {
      throw bad(fmt::format("has an empty or repeated member name '{}'", m.name));
    }
    if (m.dtype == DType::structured) throw bad("has a nested record member '" + m.name + "'");
    if (m.shape.size() > max_shape_dims)
      throw bad("has member '" + m.name + "' with too many dimensions");
    uint64_t size = dtype_size(m.dtype);
    for (uint64_t d : m.shape) {
      if (__builtin_mul_overflow(size, d, &size))
        throw bad("has member '" + m.name + "' too large");
    }
    if (m.offset > record || size > record - m.offset) {
      throw bad(fmt::format("has member '{}' at offset {} of {} bytes, past its {}-byte record",
                            m.name, m.offset, size, record));
    }
  }
}

}  // namespace

// Sizes every reader derives from a field (Python arrays from the shape, copies from
// row_bytes) must agree before anything is sized by either.
void check_field(const FieldInfo& f, const std::filesystem::path& path) {
  const auto bad = [&](const std::string& what) {
    return IndexError(fmt::format("{}: field '{}' {}", path.string(), f.name, what),
                      {.file = path.string()});
  };
  if (f.name.empty())
    throw IndexError(path.string() + ": a field has an empty name", {.file = path.string()});
  if (f.shape.size() > max_shape_dims) {
    throw bad(fmt::format("has {} dimensions (at most {})", f.shape.size(), max_shape_dims));
  }
  const auto bytes = shape_bytes(f);
  if (!bytes) throw bad("has a shape " + shape_text(f) + " too large to address");
  if (f.variable && f.row_bytes != 0) {
    throw bad(fmt::format("is variable but has row_bytes {} (must be 0)", f.row_bytes));
  }
  if (!f.variable && f.row_bytes != *bytes) {
    throw bad(fmt::format("has row_bytes {}, but its shape {} makes {}", f.row_bytes, shape_text(f),
                          *bytes));
  }
  check_members(f, bad);
  if (!f.encoding.empty() &&
      (f.dtype != DType::bytes || (f.encoding != "ascii" && f.encoding != "utf-8"))) {
    throw bad(fmt::format("has encoding '{}' (only ascii or utf-8, on bytes)", f.encoding));
  }
  if (!f.enum_names.empty() && !dtype_is_integer(f.dtype)) {
    throw bad(fmt::format("has enum names but dtype {} (enums are integers)", dtype_name(f.dtype)));
  }
}

namespace {

Manifest parse_manifest(const YAML::Node& root, const std::filesystem::path& path) {
  if (!root.IsMap()) throw IndexError(path.string() + " is not a ddstage manifest");
  Manifest m;
  m.format_version = require<uint32_t>(root, "format_version", path);
  if (m.format_version > manifest_format_version) {
    throw IndexError(path.string() + " was written by a newer ddstage (index format " +
                     std::to_string(m.format_version) + "; this build reads up to " +
                     std::to_string(manifest_format_version) + ")");
  }
  m.info.name = require<std::string>(root, "name", path);
  m.info.tool_version = require<std::string>(root, "tool_version", path);
  m.info.created = root["created"] ? root["created"].as<std::string>() : "";
  m.samples = require<uint64_t>(root, "samples", path);
  m.info.total_bytes = require<uint64_t>(root, "total_bytes", path);
  std::set<std::string> names;
  for (const auto& f : root["fields"]) {
    m.fields.push_back(parse_field(f, path));
    check_field(m.fields.back(), path);
    if (!names.insert(m.fields.back().name).second) {
      throw IndexError(path.string() + ": field '" + m.fields.back().name + "' is listed twice");
    }
  }
  if (m.fields.empty()) throw IndexError(path.string() + ": no fields");
  auto source = root["source"];
  if (!source || !source.IsMap()) throw IndexError(path.string() + ": missing key 'source'");
  m.info.format = require<std::string>(source, "format", path);
  m.info.root = require<std::string>(source, "root", path);
  if (source["attributes"] && source["attributes"].IsMap()) {
    m.info.attributes = source["attributes"].as<std::map<std::string, std::string>>();
  }
  return m;
}

}  // namespace

void write_manifest(const std::filesystem::path& path, const Manifest& m,
                    const std::vector<FileInfo>& files) {
  YAML::Emitter out;
  out << YAML::Comment("ddstage dataset index; format described in ddstage-index(5)");
  out << YAML::BeginMap;
  out << YAML::Key << "format_version" << YAML::Value << m.format_version;
  out << YAML::Key << "name" << YAML::Value << m.info.name;
  out << YAML::Key << "tool_version" << YAML::Value << m.info.tool_version;
  out << YAML::Key << "created" << YAML::Value << m.info.created;
  out << YAML::Key << "samples" << YAML::Value << m.samples;
  out << YAML::Key << "total_bytes" << YAML::Value << m.info.total_bytes;
  out << YAML::Key << "checksum" << YAML::Value << "xxh3-64";
  out << YAML::Key << "fields" << YAML::Value << YAML::BeginSeq;
  for (const auto& f : m.fields) emit_field(out, f);
  out << YAML::EndSeq;
  out << YAML::Key << "source" << YAML::Value << YAML::BeginMap;
  out << YAML::Key << "format" << YAML::Value << m.info.format;
  out << YAML::Key << "root" << YAML::Value << m.info.root.string();
  out << YAML::Key << "attributes" << YAML::Value << m.info.attributes;
  out << YAML::Key << "file_count" << YAML::Value << count_packs(files, false);
  out << YAML::Key << "files" << YAML::Value;
  emit_files(out, files, false);
  out << YAML::EndMap;
  out << YAML::Key << "pack_count" << YAML::Value << count_packs(files, true);
  out << YAML::Key << "packs" << YAML::Value;
  emit_files(out, files, true);
  out << YAML::EndMap;

  std::ofstream file(path);
  file << out.c_str() << '\n';
  file.flush();
  if (!file) throw IoError("write " + path.string(), errno, {.file = path.string()});
}

Manifest read_manifest(const std::filesystem::path& path) {
  // A FIFO or device in manifest.yaml's place would block the open or never end: an index is
  // made of regular files, so anything else is refused before it is read.
  const auto fd = FileDescriptor::open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    throw IndexError(path.string() + " is not a regular file", {.file = path.string()});
  }
  const YAML::Node root = load_yaml(fd, path.string(), manifest_yaml_limits);
  // A key of the wrong YAML kind (a map where a string belongs) is damage too, not a crash.
  try {
    return parse_manifest(root, path);
  } catch (const YAML::Exception& e) {
    throw IndexError(path.string() + " is not a ddstage manifest: " + e.msg,
                     {.file = path.string()});
  }
}

std::optional<uint64_t> shape_bytes(const FieldInfo& field) {
  uint64_t bytes = dtype_size(field.dtype);
  for (uint64_t d : field.shape) {
    if (__builtin_mul_overflow(bytes, d, &bytes)) return std::nullopt;
  }
  return bytes;
}

uint64_t fields_checksum(std::span<const FieldInfo> fields) {
  std::string encoded;
  const auto put = [&encoded](uint64_t v) {
    encoded.append(reinterpret_cast<const char*>(&v), sizeof v);
  };
  const auto put_text = [&](const std::string& text) {
    put(text.size());
    encoded += text;
  };
  const auto put_dims = [&](const std::vector<uint64_t>& dims) {
    put(dims.size());
    for (uint64_t d : dims) put(d);
  };
  for (const auto& f : fields) {
    put_text(f.name);
    put(static_cast<uint64_t>(f.dtype));
    put(f.variable);
    put_dims(f.shape);
    put(f.row_bytes);
    // Appended only when present, so the checksums of format-2 indexes do not change.
    if (!f.members.empty()) {
      put(f.members.size());
      for (const auto& m : f.members) {
        put_text(m.name);
        put(static_cast<uint64_t>(m.dtype));
        put(m.offset);
        put_dims(m.shape);
      }
    }
    if (!f.encoding.empty()) put_text(f.encoding);
    if (!f.enum_names.empty()) {
      put(f.enum_names.size());
      for (const auto& e : f.enum_names) {
        put_text(e.name);
        put(static_cast<uint64_t>(e.value));
      }
    }
  }
  return XXH3_64bits(encoded.data(), encoded.size());
}

}  // namespace ddstage::detail
