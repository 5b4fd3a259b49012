// Reading required keys of ddstage's YAML files (manifest.yaml, store.yaml) with errors that
// name the file and the key.
#pragma once

#include <filesystem>
#include <string>

#include <yaml-cpp/yaml.h>

#include "ddstage/error.hpp"

namespace ddstage::detail {

/// The value at key, converted; IndexError naming the file and the key's full path (`where` is
/// its prefix, e.g. "ranks[2].") when it is missing or of the wrong type.
template <typename T>
T require(const YAML::Node& node, const std::string& key, const std::filesystem::path& file,
          const std::string& where = "") {
  auto v = node[key];
  if (!v) throw IndexError(file.string() + ": missing key '" + where + key + "'");
  try {
    return v.as<T>();
  } catch (const YAML::Exception&) {
    throw IndexError(file.string() + ": key '" + where + key + "' has a bad value");
  }
}

/// Like require, for keys a file may lack (added after format 1 without changing its meaning):
/// `fallback` when missing, IndexError when present with a bad value.
template <typename T>
T optional_key(const YAML::Node& node, const std::string& key, const std::filesystem::path& file,
               const std::string& where, T fallback) {
  if (!node[key]) return fallback;
  return require<T>(node, key, file, where);
}

}  // namespace ddstage::detail
