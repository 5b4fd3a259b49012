// RAII for HDF5 identifiers and the translation of HDF5 failures into ddstage errors.
#pragma once

#include <hdf5.h>

#include <concepts>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace ddstage::formats::detail {

/// Move-only owner of an HDF5 identifier together with the function that closes it
/// (H5Fclose, H5Gclose, H5Dclose, H5Sclose, H5Tclose, H5Pclose, H5Oclose).
class H5Handle {
 public:
  using Closer = herr_t (*)(hid_t);

  H5Handle() = default;
  H5Handle(hid_t id, Closer close) noexcept : m_id(id), m_close(close) {}
  H5Handle(H5Handle&& other) noexcept;
  H5Handle& operator=(H5Handle&& other) noexcept;
  H5Handle(const H5Handle&) = delete;
  H5Handle& operator=(const H5Handle&) = delete;
  ~H5Handle() { reset(); }

  hid_t get() const noexcept { return m_id; }
  explicit operator bool() const noexcept { return m_id >= 0; }

 private:
  void reset() noexcept;
  hid_t m_id = H5I_INVALID_HID;
  Closer m_close = nullptr;
};

/// Stops HDF5 from printing its error stack to stderr (once per process): ddstage reports
/// failures itself, as one line.
void silence_hdf5_errors();

/// The description of the innermost (most specific) entry of HDF5's current error stack.
std::string innermost_hdf5_error();

/// Throws a runtime ddstage::Error "CALL failed: <innermost HDF5 message>" naming `file`.
[[noreturn]] void throw_hdf5_error(std::string_view call, const std::string& file);

/// Returns `rc` when it is non-negative (a valid hid_t, herr_t or htri_t), else throws.
template <std::signed_integral T>
T h5_check(T rc, std::string_view call, const std::string& file) {
  if (rc < 0) throw_hdf5_error(call, file);
  return rc;
}

/// Owns `id` (closed with `close`), or throws naming `call` when it is invalid.
inline H5Handle h5_own(hid_t id, H5Handle::Closer close, std::string_view call,
                       const std::string& file) {
  return H5Handle(h5_check(id, call, file), close);
}

/// The text an HDF5 getter of the form get(char* buffer, size_t size) -> length returns (asked
/// once for the length, once for the text); nullopt when it fails.
template <class Get>
std::optional<std::string> h5_string(Get get) {
  const ssize_t size = get(nullptr, 0);
  if (size < 0) return std::nullopt;
  std::string text(static_cast<std::size_t>(size) + 1, '\0');
  if (get(text.data(), text.size()) < 0) return std::nullopt;
  text.resize(static_cast<std::size_t>(size));
  return text;
}

/// Whether `path` looks like HDF5: its signature, or an .h5/.hdf5/.hdf name.
bool looks_like_hdf5(const std::filesystem::path& path);

/// Opens an HDF5 file read-only. UsageError when it is missing, a directory, unreadable or
/// not HDF5; runtime Error when HDF5 fails on a real HDF5 file.
H5Handle open_file(const std::filesystem::path& path);

/// "/a/b" for "a/b" or "/a/b": HDF5 paths are given relative to the root.
std::string absolute_h5_path(std::string_view path);

/// Opens the dataset at `path` (relative to `loc`). UsageError when nothing is there or it
/// is not a dataset.
H5Handle open_dataset(hid_t loc, const std::string& path, const std::string& file);

/// Whether a link exists at every component of `path`; never throws for missing parents.
bool path_exists(hid_t loc, const std::string& path);

}  // namespace ddstage::formats::detail
