// HDF5 datatypes as ddstage field types, and the native memory type samples are decoded to.
#pragma once

#include <string>
#include <vector>

#include "ddstage/dtype.hpp"
#include "ddstage/index.hpp"
#include "hdf5_handle.hpp"

namespace ddstage::formats::detail {

/// What one element of a dataset becomes in the index: numpy's view of it, as h5py gives it.
struct ElementType {
  DType dtype = DType::bytes;
  /// Axes appended to the dataset's row shape: an array type's dimensions, then a record's size
  /// or a fixed string's length (the index keeps those as the last axis of a one-byte dtype).
  std::vector<uint64_t> shape;
  std::vector<FieldMember> members;  ///< structured only
  std::string encoding;              ///< text only: "ascii" or "utf-8"
  std::vector<EnumName> enum_names;  ///< enums only
  /// A variable-length string or sequence: each element holds its own number of items, so a
  /// dataset of them becomes a variable field (rows mode, 1-D datasets only).
  bool variable = false;
  /// Bytes of one element in memory (for a variable element, of the hvl_t or char* HDF5 reads
  /// into).
  uint64_t bytes = 0;
  /// Whether the stored bytes are already the memory type's: only then can data stay in place.
  bool in_place = false;
};

bool same_element(const ElementType& a, const ElementType& b);

/// The element type of a dataset's file type, h5py's dtype for it. Integers, floats (IEEE or
/// not: h5py's smallest float16/32/64 that holds the stored one, converted by HDF5), enums (as
/// their base integer; exactly FALSE=0, TRUE=1 as bool), fixed and variable-length strings,
/// compounds (complex {r, i} pairs, else records of such members), arrays and variable-length
/// sequences of these. Anything else (floats only long double holds, references, opaque,
/// bitfields, time, nested records, members overlapping once converted) is a UsageError
/// "dataset PATH in FILE has unsupported type X: REASON".
ElementType element_type(hid_t type, const std::string& path, const std::string& file);

/// A short human name of an HDF5 type ("float32 big-endian", "string of 4 bytes", "compound").
std::string describe_type(hid_t type);

/// The native type HDF5 decodes `file_type` into: little-endian, IEEE, full precision, records
/// at the file's offsets, strings NUL-padded; what h5py reads the same data as. Call only on
/// a type element_type() accepted.
H5Handle memory_type(hid_t file_type, const std::string& file);

/// A --field path split into the dataset and a compound member: "/ds.label" is member "label"
/// of /ds when no object is named "/ds.label" but /ds exists; member is empty otherwise.
struct MemberPath {
  std::string dataset;
  std::string member;
};
MemberPath split_member(hid_t file, const std::string& path);

/// A compound member on its own: its element type, its byte offset in the stored record, and
/// a memory record holding only it (HDF5 converts compound members by name, so H5Dread into
/// this type reads just the member). UsageError when `type` has no such member.
struct MemberType {
  ElementType element;
  uint64_t offset = 0;
  H5Handle memory;
};
MemberType member_type(hid_t type, const std::string& member, const std::string& path,
                       const std::string& file);

/// Whether a memory type is a variable-length string or sequence (read into a VlenBuffer).
bool variable_length(hid_t mem_type);

/// `count` variable-length elements of `mem_type` (which must outlive it) to H5Dread into;
/// frees what H5Dread allocated for them when it goes out of scope.
class VlenBuffer {
 public:
  VlenBuffer(hid_t mem_type, uint64_t count, const std::string& file);
  VlenBuffer(const VlenBuffer&) = delete;
  VlenBuffer& operator=(const VlenBuffer&) = delete;
  ~VlenBuffer();

  hid_t space() const { return m_space.get(); }
  void* data() { return m_buffer.data(); }
  /// Items of element i, as bytes: a string without its NUL, or a sequence's items.
  std::span<const std::byte> element(uint64_t i) const;

 private:
  hid_t m_mem_type;
  bool m_string;
  uint64_t m_item_bytes;
  H5Handle m_space;
  std::vector<std::byte> m_buffer;
};

}  // namespace ddstage::formats::detail
