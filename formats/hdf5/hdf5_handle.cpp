#include "hdf5_handle.hpp"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <mutex>

#include "ddstage/error.hpp"
#include "hdf5_links.hpp"
#include "hdf5_storage.hpp"

namespace ddstage::formats::detail {

H5Handle::H5Handle(H5Handle&& other) noexcept : m_id(other.m_id), m_close(other.m_close) {
  other.m_id = H5I_INVALID_HID;
}

H5Handle& H5Handle::operator=(H5Handle&& other) noexcept {
  if (this != &other) {
    reset();
    m_id = other.m_id;
    m_close = other.m_close;
    other.m_id = H5I_INVALID_HID;
  }
  return *this;
}

void H5Handle::reset() noexcept {
  if (m_id >= 0 && m_close != nullptr && m_close(m_id) < 0) {
    spdlog::warn("hdf5: closing identifier {} failed: {}", m_id, innermost_hdf5_error());
  }
  m_id = H5I_INVALID_HID;
}

void silence_hdf5_errors() {
  static std::once_flag once;
  std::call_once(once, [] { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); });
}

namespace {

herr_t keep_innermost(unsigned n, const H5E_error2_t* err, void* out) {
  // Walking upward, entry 0 is the most specific one: the cause, not the API wrapper.
  if (n == 0 && err->desc != nullptr) *static_cast<std::string*>(out) = err->desc;
  return 0;
}

bool has_hdf5_extension(const std::filesystem::path& path) {
  auto ext = path.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return std::tolower(c); });
  return ext == ".h5" || ext == ".hdf5" || ext == ".hdf";
}

htri_t has_hdf5_signature(const std::filesystem::path& path) {
#if H5_VERSION_GE(1, 12, 0)
  return H5Fis_accessible(path.c_str(), H5P_DEFAULT);
#else
  return H5Fis_hdf5(path.c_str());
#endif
}

}  // namespace

std::string innermost_hdf5_error() {
  std::string message;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, keep_innermost, &message);
  return message.empty() ? "no HDF5 error message" : message;
}

void throw_hdf5_error(std::string_view call, const std::string& file) {
  throw Error(ErrorKind::runtime, fmt::format("{} failed: {}", call, innermost_hdf5_error()),
              ErrorContext{.file = file});
}

bool looks_like_hdf5(const std::filesystem::path& path) {
  silence_hdf5_errors();
  if (has_hdf5_extension(path)) return true;
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) && has_hdf5_signature(path) > 0;
}

H5Handle open_file(const std::filesystem::path& path) {
  silence_hdf5_errors();
  prepare_filter_plugins();
  const std::string name = path.string();
  std::error_code ec;
  auto status = std::filesystem::status(path, ec);
  if (!std::filesystem::exists(status)) throw UsageError(fmt::format("no such file: {}", name));
  if (std::filesystem::is_directory(status)) {
    throw UsageError(fmt::format("{} is a directory, not an HDF5 file", name));
  }
  if (::access(path.c_str(), R_OK) != 0) {
    throw UsageError(fmt::format("cannot read {}: {}", name, std::strerror(errno)));
  }
  if (has_hdf5_signature(path) <= 0) {
    throw UsageError(fmt::format("{} is not an HDF5 file (no HDF5 signature)", name));
  }
  return h5_own(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose, "H5Fopen", name);
}

std::string absolute_h5_path(std::string_view path) {
  std::string out = path.starts_with('/') ? std::string(path) : "/" + std::string(path);
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

bool path_exists(hid_t loc, const std::string& path) {
  // H5Lexists fails, rather than answering false, when a parent is missing: test each prefix.
  for (std::size_t end = path.find('/', 1);; end = path.find('/', end + 1)) {
    auto prefix = path.substr(0, end);
    if (!prefix.empty() && prefix != "/" && H5Lexists(loc, prefix.c_str(), H5P_DEFAULT) <= 0) {
      return false;
    }
    // A dangling soft or external link exists as a link but names no object.
    if (end == std::string::npos) return H5Oexists_by_name(loc, path.c_str(), H5P_DEFAULT) > 0;
  }
}

H5Handle open_dataset(hid_t loc, const std::string& path, const std::string& file) {
  if (!path_exists(loc, path)) {
    if (auto why = broken_link(loc, "", path, file)) throw UsageError(*why);
    throw UsageError(fmt::format("no dataset {} in {}", path, file));
  }
  auto object = h5_own(H5Oopen(loc, path.c_str(), H5P_DEFAULT), H5Oclose, "H5Oopen " + path, file);
  if (H5Iget_type(object.get()) != H5I_DATASET) {
    throw UsageError(fmt::format("{} in {} is not a dataset (a group or named type)", path, file));
  }
  return object;
}

}  // namespace ddstage::formats::detail
