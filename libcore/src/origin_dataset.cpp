#include "ddstage/origin_dataset.hpp"

#include "read/origin_batch_reader.hpp"

namespace ddstage {

OriginDataset::OriginDataset(const std::filesystem::path& path, Settings settings)
    : m_index(std::make_shared<const Index>(Index::open(path))), m_settings(std::move(settings)) {}

Reader OriginDataset::reader() const {
  return Reader(std::make_unique<detail::OriginBatchReader>(m_index, m_settings));
}

}  // namespace ddstage
