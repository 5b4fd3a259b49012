// Cold-cache baselines for benches: which files an index makes a job read, dropping their pages
// from the page cache, and reading them the way `cat` does.
#pragma once

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <vector>

#include "ddstage/index.hpp"

namespace ddstage::cli {

/// The files of index of the given kinds: flatten reads source and copied files, a load
/// reads source and pack files.
std::vector<std::filesystem::path> index_files(const Index& index,
                                               std::initializer_list<FileKind> kinds);

/// Drops files' pages from the page cache (no privileges needed), writing dirty pages back
/// first: only clean pages can be dropped, and freshly generated test data is often dirty.
void drop_cached_pages(const std::vector<std::filesystem::path>& files);

/// What `cat FILES > /dev/null` does: sequential 1 MiB reads of every file, once. Returns the
/// bytes read.
uint64_t read_sequentially(const std::vector<std::filesystem::path>& files);

}  // namespace ddstage::cli
