// A flattened dataset read straight from its origin files, without a store.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "ddstage/client.hpp"
#include "ddstage/index.hpp"
#include "ddstage/settings.hpp"

namespace ddstage {

/// DATASET.ddx and the files it indexes, read through the same Reader as a store's dataset
/// (Dataset): each batch is one sorted run of preads, adjacent rows coalesced. What a notebook
/// or a first run uses before there is a store, and what moving to one changes only where the
/// dataset is opened: `Client(dir).open(name)` instead of `OriginDataset(path)`. Every read goes
/// to the file system the sources are on, so a training job on a parallel file system is what a
/// store exists to spare it.
class OriginDataset {
 public:
  /// Opens and validates the index (IndexError, or UsageError when path is not one).
  /// settings: origin.allow_stale (read sources whose size or time changed since flattening,
  /// which is otherwise an error naming the file) and gpu.path (staged or auto: rows go to
  /// device memory through a pinned buffer).
  explicit OriginDataset(const std::filesystem::path& path, Settings settings = {});

  const Index& index() const noexcept { return *m_index; }
  /// The dataset's name, as `ddstage load` would give it: the index's, by default its
  /// directory's name less .ddx.
  const std::string& name() const noexcept { return m_index->manifest().name; }
  /// A new reader for the calling thread; it opens the source files as batches need them.
  Reader reader() const;

 private:
  std::shared_ptr<const Index> m_index;
  Settings m_settings;
};

}  // namespace ddstage
