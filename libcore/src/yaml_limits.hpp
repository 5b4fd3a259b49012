// Parsing YAML that comes from outside the process with bounds: yaml-cpp 0.7 has none of its
// own beyond a 2000-level recursion guard, so a self-referencing alias recurses until the
// stack overflows and a large file becomes an unbounded tree of nodes.
#pragma once

#include <cstddef>
#include <filesystem>
#include <string>
#include <string_view>

#include <yaml-cpp/yaml.h>

#include "ddstage/error.hpp"
#include "ddstage/tool/file_descriptor.hpp"

namespace ddstage::detail {

/// Where a kind of YAML text comes from, which says what bad text is: the user's own (config
/// files: a UsageError), a file ddstage wrote (a damaged manifest or descriptor: an
/// IndexError), or another process's message (a control frame: a run-time Error, not "index").
enum class YamlSource { user, file, peer };

/// What one kind of YAML text may contain, and where it comes from.
struct YamlLimits {
  std::size_t max_bytes;
  int max_depth;          ///< nested sequences and maps
  std::size_t max_nodes;  ///< scalars, sequences and maps together
  YamlSource source;
};

/// Settings files hold a few dozen keys, two levels deep.
inline constexpr YamlLimits config_yaml_limits{std::size_t{1} << 20, 16, 10'000, YamlSource::user};
/// manifest.yaml lists at most 1,000 source files (index.bin holds the rest).
inline constexpr YamlLimits manifest_yaml_limits{std::size_t{16} << 20, 32, 250'000,
                                                 YamlSource::file};
/// store.yaml has a handful of entries per rank and per (dataset, rank): 10,000 ranks with
/// several datasets fit.
inline constexpr YamlLimits descriptor_yaml_limits{std::size_t{16} << 20, 32, 2'000'000,
                                                   YamlSource::file};

/// Control requests and replies are a few keys (a load's options, a status's per-rank table).
inline constexpr YamlLimits control_yaml_limits{std::size_t{16} << 20, 16, 1'000'000,
                                                YamlSource::peer};

/// The first YAML document of text, parsed only after an event scan found it within limits.
/// Aliases are refused outright (ddstage never writes them, and they are how a small text
/// expands or refers to itself). Errors are one line beginning with `name` (e.g. the file's
/// path) and naming the limit or the YAML error; of the kind the limits say.
YAML::Node load_yaml(std::string_view text, const std::string& name, const YamlLimits& limits);

/// The same for an open file: reads at most limits.max_bytes + 1 bytes, so a device, a FIFO or
/// a file that grows is refused at the limit rather than read to its end.
YAML::Node load_yaml(const FileDescriptor& fd, const std::string& name, const YamlLimits& limits);

/// Opens path read-only and loads it as above; IoError when it cannot be opened.
YAML::Node load_yaml_file(const std::filesystem::path& path, const std::string& name,
                          const YamlLimits& limits);

}  // namespace ddstage::detail
