// What the fuzz targets share: a scratch directory for parsers that read files, and the rule
// for what a parser may do with bad bytes.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <typeinfo>

#include "ddstage/error.hpp"

namespace ddstage::fuzz {

/// A directory of this process's own, under $TMPDIR or else /dev/shm (memory: a file written
/// per input costs no disk), removed when the process exits normally.
inline const std::filesystem::path& scratch_dir() {
  struct Scratch {
    Scratch() {
      const char* tmp = std::getenv("TMPDIR");
      path = std::filesystem::path(tmp && *tmp ? tmp : "/dev/shm") /
             ("ddstage-fuzz-" + std::to_string(::getpid()));
      std::filesystem::remove_all(path);
      std::filesystem::create_directories(path);
      std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    }
    ~Scratch() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
    std::filesystem::path path;
  };
  static const Scratch scratch;
  return scratch.path;
}

/// Replaces path with exactly these bytes.
inline void write_file(const std::filesystem::path& path, std::span<const uint8_t> bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "fuzz harness: cannot write %s\n", path.c_str());
    std::abort();
  }
}

/// A broken promise of the code under test: says which, and aborts so libFuzzer keeps the input.
[[noreturn]] inline void violated(const std::string& what) {
  std::fprintf(stderr, "fuzz: contract violated: %s\n", what.c_str());
  std::abort();
}

/// Runs one parse of bad bytes. Its only acceptable failure is a ddstage::Error whose message is
/// one line (the CLI prints it as `ddstage: error: ...`); anything else escaping, a YAML or
/// standard-library exception, would reach the user as a raw "internal error".
template <typename Parse>
void expect_clean(Parse&& parse) {
  try {
    parse();
  } catch (const Error& e) {
    if (std::strchr(e.what(), '\n') != nullptr)
      violated("error message is not one line: " + std::string(e.what()));
  } catch (const std::exception& e) {
    violated(std::string("escaped ") + typeid(e).name() + ": " + e.what());
  }
}

}  // namespace ddstage::fuzz
