// ddstage-gen: deterministic test data (HDF5 files, .npy arrays, file trees) for the tests, the
// README demo and the benchmarks. The same command line and --seed give the same bytes.
#include <hdf5.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

/// splitmix64: tiny, fast and the same everywhere.
class Rng {
 public:
  Rng(uint64_t seed, uint64_t stream)
      : m_state(seed * 0x9E3779B97F4A7C15ull ^ (stream + 1) * 0xD1B54A32D192ED03ull) {}
  uint64_t next() {
    uint64_t z = (m_state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /// Uniform in [lo, hi].
  uint64_t between(uint64_t lo, uint64_t hi) { return lo + (hi > lo ? next() % (hi - lo + 1) : 0); }
  /// Uniform in [-1, 1).
  double symmetric() { return static_cast<double>(next() >> 11) * 0x1p-52 - 1.0; }

 private:
  uint64_t m_state;
};

[[noreturn]] void fail(const std::string& what) {
  throw std::runtime_error(what);
}

/// Move-only owner of an HDF5 identifier.
class H5Id {
 public:
  H5Id(hid_t id, herr_t (*close)(hid_t), const char* call) : m_id(id), m_close(close) {
    if (id < 0) fail(std::string(call) + " failed");
  }
  H5Id(H5Id&& o) noexcept : m_id(o.m_id), m_close(o.m_close) { o.m_id = H5I_INVALID_HID; }
  H5Id& operator=(H5Id&&) = delete;
  H5Id(const H5Id&) = delete;
  ~H5Id() {
    if (m_id >= 0) m_close(m_id);
  }
  hid_t get() const { return m_id; }

 private:
  hid_t m_id;
  herr_t (*m_close)(hid_t);
};

void check(herr_t rc, const char* call) {
  if (rc < 0) fail(std::string(call) + " failed");
}

/// One element type: its HDF5 file type, its numpy descr and how to fill it.
struct ElementType {
  std::string name;
  std::size_t size;
  const char* npy_descr;
  enum class Kind { integer, floating, boolean } kind;
};

const std::vector<ElementType>& element_types() {
  using K = ElementType::Kind;
  static const std::vector<ElementType> types = {
      {"bool", 1, "|b1", K::boolean},     {"int8", 1, "|i1", K::integer},
      {"uint8", 1, "|u1", K::integer},    {"int16", 2, "<i2", K::integer},
      {"uint16", 2, "<u2", K::integer},   {"int32", 4, "<i4", K::integer},
      {"uint32", 4, "<u4", K::integer},   {"int64", 8, "<i8", K::integer},
      {"uint64", 8, "<u8", K::integer},   {"float16", 2, "<f2", K::floating},
      {"float32", 4, "<f4", K::floating}, {"float64", 8, "<f8", K::floating}};
  return types;
}

const ElementType& element_type(const std::string& name) {
  for (const auto& t : element_types()) {
    if (t.name == name) return t;
  }
  fail("unknown --dtype '" + name + "'");
}

uint16_t to_half(float f) {
  // Values are in [-1, 1): no overflow, and subnormals can flush to zero.
  uint32_t bits = 0;
  std::memcpy(&bits, &f, sizeof bits);
  const uint32_t sign = (bits >> 16) & 0x8000u;
  const int exponent = static_cast<int>((bits >> 23) & 0xff) - 127 + 15;
  if (exponent <= 0) return static_cast<uint16_t>(sign);
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exponent) << 10) |
                               ((bits >> 13) & 0x3ff));
}

void fill_random_bytes(std::byte* out, std::size_t n, Rng& rng) {
  for (std::size_t i = 0; i < n; i += 8) {
    uint64_t v = rng.next();
    std::memcpy(out + i, &v, std::min<std::size_t>(8, n - i));
  }
}

void fill(std::byte* out, std::size_t count, const ElementType& t, Rng& rng) {
  if (t.kind == ElementType::Kind::integer) return fill_random_bytes(out, count * t.size, rng);
  for (std::size_t i = 0; i < count; ++i, out += t.size) {
    if (t.kind == ElementType::Kind::boolean) {
      *out = static_cast<std::byte>(rng.next() & 1);
    } else if (t.size == 2) {
      uint16_t h = to_half(static_cast<float>(rng.symmetric()));
      std::memcpy(out, &h, 2);
    } else if (t.size == 4) {
      float v = static_cast<float>(rng.symmetric());
      std::memcpy(out, &v, 4);
    } else {
      double v = rng.symmetric();
      std::memcpy(out, &v, 8);
    }
  }
}

/// The HDF5 file type of an element type; booleans are h5py's (an int8 enum FALSE/TRUE).
H5Id h5_type(const ElementType& t) {
  static const std::vector<std::pair<std::string, hid_t>> native = {
      {"int8", H5T_STD_I8LE},     {"uint8", H5T_STD_U8LE},   {"int16", H5T_STD_I16LE},
      {"uint16", H5T_STD_U16LE},  {"int32", H5T_STD_I32LE},  {"uint32", H5T_STD_U32LE},
      {"int64", H5T_STD_I64LE},   {"uint64", H5T_STD_U64LE}, {"float32", H5T_IEEE_F32LE},
      {"float64", H5T_IEEE_F64LE}};
  for (const auto& [name, id] : native) {
    if (name == t.name) return H5Id(H5Tcopy(id), H5Tclose, "H5Tcopy");
  }
  if (t.name == "float16") {
    H5Id half(H5Tcopy(H5T_IEEE_F32LE), H5Tclose, "H5Tcopy");
    check(H5Tset_fields(half.get(), 15, 10, 5, 0, 10), "H5Tset_fields");
    check(H5Tset_size(half.get(), 2), "H5Tset_size");
    check(H5Tset_precision(half.get(), 16), "H5Tset_precision");
    check(H5Tset_ebias(half.get(), 15), "H5Tset_ebias");
    return half;
  }
  H5Id boolean(H5Tenum_create(H5T_NATIVE_INT8), H5Tclose, "H5Tenum_create");
  int8_t no = 0, yes = 1;
  check(H5Tenum_insert(boolean.get(), "FALSE", &no), "H5Tenum_insert");
  check(H5Tenum_insert(boolean.get(), "TRUE", &yes), "H5Tenum_insert");
  return boolean;
}

/// How datasets are stored.
struct Layout {
  bool chunked = false;
  bool deflate = false;
};

H5Id create_file(const std::string& path) {
  H5Id fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose, "H5Pcreate");
  // The newest object formats: compact/dense link storage keeps 100k-group files fast to build.
  check(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_LATEST, H5F_LIBVER_LATEST),
        "H5Pset_libver_bounds");
  // Bigger metadata blocks and sieve buffer: fewer, larger writes for many small datasets.
  check(H5Pset_meta_block_size(fapl.get(), 1 << 20), "H5Pset_meta_block_size");
  check(H5Pset_sieve_buf_size(fapl.get(), 4 << 20), "H5Pset_sieve_buf_size");
  // No modification times (root group included): the same seed gives the same file bytes.
  H5Id fcpl(H5Pcreate(H5P_FILE_CREATE), H5Pclose, "H5Pcreate");
  check(H5Pset_obj_track_times(fcpl.get(), 0), "H5Pset_obj_track_times");
  const std::string call = "H5Fcreate " + path;
  return H5Id(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), H5Fclose,
              call.c_str());
}

H5Id creation_plist(const std::vector<hsize_t>& dims, std::size_t row_bytes, const Layout& layout) {
  H5Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose, "H5Pcreate");
  check(H5Pset_obj_track_times(dcpl.get(), 0), "H5Pset_obj_track_times");
  // Every element is written right after creation: writing fill values first is wasted work.
  check(H5Pset_fill_time(dcpl.get(), H5D_FILL_TIME_NEVER), "H5Pset_fill_time");
  if ((layout.chunked || layout.deflate) && !dims.empty()) {
    std::vector<hsize_t> chunk(dims);
    // ~64 KiB chunks along the first dimension, like h5py's defaults aim for.
    chunk[0] = std::clamp<hsize_t>((64 << 10) / std::max<std::size_t>(row_bytes, 1), 1,
                                   std::max<hsize_t>(dims[0], 1));
    for (auto& c : chunk) c = std::max<hsize_t>(c, 1);
    check(H5Pset_chunk(dcpl.get(), static_cast<int>(chunk.size()), chunk.data()), "H5Pset_chunk");
    if (layout.deflate) check(H5Pset_deflate(dcpl.get(), 1), "H5Pset_deflate");
  }
  return dcpl;
}

H5Id create_dataset(hid_t loc, const char* name, hid_t type, const std::vector<hsize_t>& dims,
                    hid_t dcpl) {
  H5Id space(dims.empty() ? H5Screate(H5S_SCALAR)
                          : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
             H5Sclose, "H5Screate");
  return H5Id(H5Dcreate2(loc, name, type, space.get(), H5P_DEFAULT, dcpl, H5P_DEFAULT), H5Dclose,
              "H5Dcreate2");
}

/// Writes a dataset of dims (first dimension = rows) block by block, `make(first, count, dest)`
/// producing rows [first, first + count).
using RowMaker = std::function<void(uint64_t first, uint64_t count, std::byte* dest)>;

void write_dataset(hid_t loc, const char* name, const ElementType& t,
                   const std::vector<hsize_t>& dims, const Layout& layout, const RowMaker& make) {
  std::size_t row_elements = 1;
  for (std::size_t d = 1; d < dims.size(); ++d) row_elements *= dims[d];
  const std::size_t row_bytes = row_elements * t.size;
  auto type = h5_type(t);
  auto dcpl = creation_plist(dims, row_bytes, layout);
  auto dset = create_dataset(loc, name, type.get(), dims, dcpl.get());
  const uint64_t rows = dims.empty() ? 1 : dims[0];
  const uint64_t block = std::max<uint64_t>((16u << 20) / std::max<std::size_t>(row_bytes, 1), 1);
  std::vector<std::byte> buffer;
  for (uint64_t first = 0; first < rows; first += block) {
    const uint64_t count = std::min(block, rows - first);
    buffer.resize(count * row_bytes);
    make(first, count, buffer.data());
    if (dims.empty()) {
      check(H5Dwrite(dset.get(), type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, buffer.data()),
            "H5Dwrite");
      continue;
    }
    std::vector<hsize_t> start(dims.size(), 0), size(dims);
    start[0] = first;
    size[0] = count;
    H5Id file_space(H5Dget_space(dset.get()), H5Sclose, "H5Dget_space");
    check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, size.data(),
                              nullptr),
          "H5Sselect_hyperslab");
    H5Id mem_space(H5Screate_simple(static_cast<int>(size.size()), size.data(), nullptr), H5Sclose,
                   "H5Screate_simple");
    check(H5Dwrite(dset.get(), type.get(), mem_space.get(), file_space.get(), H5P_DEFAULT,
                   buffer.data()),
          "H5Dwrite");
  }
}

RowMaker random_rows(const ElementType& t, std::size_t row_elements, Rng& rng) {
  return [&t, row_elements, &rng](uint64_t, uint64_t count, std::byte* dest) {
    fill(dest, count * row_elements, t, rng);
  };
}

std::vector<hsize_t> parse_shape(const std::string& text) {
  std::vector<hsize_t> shape;
  std::size_t begin = 0;
  while (begin < text.size()) {
    auto end = std::min(text.find(',', begin), text.size());
    const std::string part = text.substr(begin, end - begin);
    if (part.empty() || part.find_first_not_of("0123456789") != std::string::npos) {
      fail("bad --shape '" + text + "' (expected e.g. 28,28)");
    }
    shape.push_back(std::stoull(part));
    begin = end + 1;
  }
  return shape;
}

struct Common {
  std::string out;
  uint64_t seed = 1;
  uint64_t samples = 1000;
  Layout layout;
  std::string shape = "28,28";
  std::string dtype = "float32";
  uint64_t min_bytes = 256;
  uint64_t max_bytes = 4096;
  uint64_t min_nodes = 4;
  uint64_t max_nodes = 32;
};

uint64_t product(const std::vector<hsize_t>& dims) {
  uint64_t n = 1;
  for (auto d : dims) n *= d;
  return n;
}

void gen_hdf5_rows(const Common& o) {
  const auto& t = element_type(o.dtype);
  auto shape = parse_shape(o.shape);
  std::vector<hsize_t> dims{o.samples};
  dims.insert(dims.end(), shape.begin(), shape.end());
  auto file = create_file(o.out);
  Rng features(o.seed, 1), labels(o.seed, 2);
  write_dataset(file.get(), "features", t, dims, o.layout,
                random_rows(t, product(shape), features));
  write_dataset(file.get(), "labels", element_type("int64"), {o.samples}, o.layout,
                [&labels](uint64_t, uint64_t count, std::byte* dest) {
                  for (uint64_t i = 0; i < count; ++i) {
                    int64_t label = static_cast<int64_t>(labels.between(0, 9));
                    std::memcpy(dest + i * 8, &label, 8);
                  }
                });
}

void gen_hdf5_groups(const Common& o) {
  if (o.min_bytes > o.max_bytes) fail("--min-bytes is larger than --max-bytes");
  auto file = create_file(o.out);
  H5Id gcpl(H5Pcreate(H5P_GROUP_CREATE), H5Pclose, "H5Pcreate");
  check(H5Pset_obj_track_times(gcpl.get(), 0), "H5Pset_obj_track_times");
  H5Id samples(H5Gcreate2(file.get(), "samples", H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose,
               "H5Gcreate2");
  const auto& u8 = element_type("uint8");
  const auto& i64 = element_type("int64");
  auto u8_type = h5_type(u8);
  auto i64_type = h5_type(i64);
  // One creation plist per shape kind, reused: per-dataset plists would dominate the run time.
  // A scalar cannot be chunked: y is [1] when chunked, a scalar otherwise.
  const bool chunked = o.layout.chunked || o.layout.deflate;
  const std::vector<hsize_t> y_dims = chunked ? std::vector<hsize_t>{1} : std::vector<hsize_t>{};
  auto y_dcpl = creation_plist(y_dims, 8, o.layout);
  auto contiguous_dcpl = creation_plist({}, 1, o.layout);
  Rng sizes(o.seed, 3), bytes(o.seed, 4), labels(o.seed, 5);
  std::vector<std::byte> x;
  char name[32];
  for (uint64_t i = 0; i < o.samples; ++i) {
    std::snprintf(name, sizeof name, "%07llu", static_cast<unsigned long long>(i));
    H5Id group(H5Gcreate2(samples.get(), name, H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose,
               "H5Gcreate2");
    std::vector<hsize_t> x_dims{sizes.between(o.min_bytes, o.max_bytes)};
    x.resize(x_dims[0]);
    fill(x.data(), x.size(), u8, bytes);
    auto xd =
        create_dataset(group.get(), "x", u8_type.get(), x_dims,
                       chunked ? creation_plist(x_dims, 1, o.layout).get() : contiguous_dcpl.get());
    if (!x.empty())
      check(H5Dwrite(xd.get(), u8_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, x.data()), "H5Dwrite");
    int64_t label = static_cast<int64_t>(labels.between(0, 9));
    auto yd = create_dataset(group.get(), "y", i64_type.get(), y_dims, y_dcpl.get());
    check(H5Dwrite(yd.get(), i64_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, &label), "H5Dwrite");
  }
}

/// CSR offsets (N+1 values) of per-graph counts.
std::vector<int64_t> offsets_of(const std::vector<uint64_t>& counts) {
  std::vector<int64_t> ptr{0};
  for (auto c : counts) ptr.push_back(ptr.back() + static_cast<int64_t>(c));
  return ptr;
}

void write_offsets(hid_t file, const char* name, const std::vector<int64_t>& ptr,
                   const Layout& layout) {
  write_dataset(file, name, element_type("int64"), {ptr.size()}, layout,
                [&ptr](uint64_t first, uint64_t count, std::byte* dest) {
                  std::memcpy(dest, ptr.data() + first, count * sizeof(int64_t));
                });
}

void gen_hdf5_ragged(const Common& o) {
  if (o.min_nodes > o.max_nodes || o.min_nodes == 0) fail("need 0 < --min-nodes <= --max-nodes");
  Rng shape(o.seed, 6), values(o.seed, 7), edges(o.seed, 8), targets(o.seed, 9);
  std::vector<uint64_t> nodes(o.samples), edge_counts(o.samples);
  for (uint64_t g = 0; g < o.samples; ++g) {
    nodes[g] = shape.between(o.min_nodes, o.max_nodes);
    edge_counts[g] = shape.between(nodes[g], 3 * nodes[g]);
  }
  const auto x_ptr = offsets_of(nodes);
  const auto edge_ptr = offsets_of(edge_counts);
  auto file = create_file(o.out);
  const auto& f32 = element_type("float32");
  write_dataset(file.get(), "x", f32, {static_cast<hsize_t>(x_ptr.back()), 4}, o.layout,
                random_rows(f32, 4, values));
  write_offsets(file.get(), "x_ptr", x_ptr, o.layout);
  // Edges join nodes of their own graph (local node ids), as PyG-style batching expects.
  uint64_t graph = 0;
  write_dataset(file.get(), "edge_index", element_type("int64"),
                {static_cast<hsize_t>(edge_ptr.back()), 2}, o.layout,
                [&](uint64_t first, uint64_t count, std::byte* dest) {
                  for (uint64_t e = first; e < first + count; ++e, dest += 16) {
                    while (static_cast<int64_t>(e) >= edge_ptr[graph + 1]) ++graph;
                    int64_t ends[2] = {static_cast<int64_t>(edges.between(0, nodes[graph] - 1)),
                                       static_cast<int64_t>(edges.between(0, nodes[graph] - 1))};
                    std::memcpy(dest, ends, sizeof ends);
                  }
                });
  write_offsets(file.get(), "edge_ptr", edge_ptr, o.layout);
  write_dataset(file.get(), "y", f32, {o.samples}, o.layout, random_rows(f32, 1, targets));
}

std::string npy_header(const ElementType& t, const std::vector<hsize_t>& dims) {
  // Python tuple syntax: "(3,)" for one dimension, "(3, 4)" for more.
  std::string shape = "(";
  for (std::size_t i = 0; i < dims.size(); ++i) shape += (i ? ", " : "") + std::to_string(dims[i]);
  shape += dims.size() == 1 ? ",)" : ")";
  std::string dict = "{'descr': '" + std::string(t.npy_descr) +
                     "', 'fortran_order': False, 'shape': " + shape + ", }";
  // Magic (6) + version (2) + length (2) + dict + padding + '\n' is a multiple of 64.
  const std::size_t total = (10 + dict.size() + 1 + 63) / 64 * 64;
  dict.append(total - 10 - dict.size() - 1, ' ');
  dict += '\n';
  std::string header("\x93NUMPY\x01\x00", 8);
  header += static_cast<char>(dict.size() & 0xff);
  header += static_cast<char>(dict.size() >> 8);
  return header + dict;
}

void gen_npy(const Common& o) {
  const auto& t = element_type(o.dtype);
  auto shape = parse_shape(o.shape);
  std::vector<hsize_t> dims{o.samples};
  dims.insert(dims.end(), shape.begin(), shape.end());
  std::ofstream out(o.out, std::ios::binary | std::ios::trunc);
  if (!out) fail("cannot create " + o.out);
  const auto header = npy_header(t, dims);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  Rng rng(o.seed, 10);
  const uint64_t row_elements = product(shape);
  std::vector<std::byte> block;
  for (uint64_t first = 0; first < o.samples; first += 4096) {
    const uint64_t count = std::min<uint64_t>(4096, o.samples - first);
    block.resize(count * row_elements * t.size);
    fill(block.data(), count * row_elements, t, rng);
    out.write(reinterpret_cast<const char*>(block.data()),
              static_cast<std::streamsize>(block.size()));
  }
  if (!out.flush()) fail("cannot write " + o.out);
}

void gen_files(const Common& o) {
  if (o.min_bytes > o.max_bytes) fail("--min-bytes is larger than --max-bytes");
  const auto& u8 = element_type("uint8");
  Rng sizes(o.seed, 11), bytes(o.seed, 12);
  std::vector<std::byte> data;
  char dir[32], name[32];
  for (uint64_t i = 0; i < o.samples; ++i) {
    std::snprintf(dir, sizeof dir, "%03llu", static_cast<unsigned long long>(i / 1000));
    std::snprintf(name, sizeof name, "%07llu.bin", static_cast<unsigned long long>(i));
    const auto parent = std::filesystem::path(o.out) / dir;
    if (i % 1000 == 0) std::filesystem::create_directories(parent);
    data.resize(sizes.between(o.min_bytes, o.max_bytes));
    fill(data.data(), data.size(), u8, bytes);
    std::ofstream out(parent / name, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data.data()),
              static_cast<std::streamsize>(data.size()));
    if (!out.flush()) fail("cannot write " + (parent / name).string());
  }
}

std::string dtype_names() {
  std::string names;
  for (const auto& t : element_types()) names += (names.empty() ? "" : ", ") + t.name;
  return names;
}

CLI::App* add_generator(CLI::App& app, const char* name, const char* help, Common& o,
                        const char* count_flag, std::function<void(const Common&)> run,
                        std::function<void(const Common&)>& chosen) {
  auto* sub = app.add_subcommand(name, help);
  sub->add_option("out", o.out, "Output path")->required();
  sub->add_option(count_flag, o.samples, "How many samples")->capture_default_str();
  sub->add_option("--seed", o.seed, "Seed: the same seed gives the same bytes")
      ->capture_default_str();
  sub->callback([run, &chosen] { chosen = run; });
  return sub;
}

void add_layout(CLI::App* sub, Common& o) {
  sub->add_flag("--chunked", o.layout.chunked,
                "Chunked storage (~64 KiB chunks): not indexable in place");
  sub->add_flag("--deflate", o.layout.deflate, "Chunked and deflate-compressed");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("ddstage-gen: deterministic test data for ddstage (HDF5, npy, file trees)");
  app.require_subcommand(1);
  app.fallthrough();  // -v works after the subcommand too
  bool verbose = false;
  app.add_flag("-v,--verbose", verbose, "Say what was written");
  Common o;
  std::function<void(const Common&)> chosen;

  auto* rows = add_generator(app, "hdf5-rows", "/features (N x shape) and /labels (int64, N)", o,
                             "--samples", gen_hdf5_rows, chosen);
  rows->add_option("--shape", o.shape, "Row shape, comma-separated (empty: scalars)")
      ->capture_default_str();
  rows->add_option("--dtype", o.dtype, "Element type: " + dtype_names())->capture_default_str();
  add_layout(rows, o);

  auto* groups =
      add_generator(app, "hdf5-groups", "/samples/NNNNNNN groups with x (uint8[len]) and y (int64)",
                    o, "--samples", gen_hdf5_groups, chosen);
  groups->add_option("--min-bytes", o.min_bytes, "Smallest x")->capture_default_str();
  groups->add_option("--max-bytes", o.max_bytes, "Largest x")->capture_default_str();
  add_layout(groups, o);

  auto* ragged = add_generator(app, "hdf5-ragged",
                               "Graphs in CSR form: /x, /x_ptr, /edge_index, /edge_ptr, /y", o,
                               "--graphs", gen_hdf5_ragged, chosen);
  ragged->add_option("--min-nodes", o.min_nodes, "Fewest nodes per graph")->capture_default_str();
  ragged->add_option("--max-nodes", o.max_nodes, "Most nodes per graph")->capture_default_str();
  add_layout(ragged, o);

  auto* npy =
      add_generator(app, "npy", "A .npy (v1.0) array of N rows", o, "--samples", gen_npy, chosen);
  npy->add_option("--shape", o.shape, "Row shape, comma-separated (empty: scalars)")
      ->capture_default_str();
  npy->add_option("--dtype", o.dtype, "Element type: " + dtype_names())->capture_default_str();

  auto* files = add_generator(app, "files", "DIR/NNN/NNNNNNN.bin, one file per sample", o,
                              "--samples", gen_files, chosen);
  files->add_option("--min-bytes", o.min_bytes, "Smallest file")->capture_default_str();
  files->add_option("--max-bytes", o.max_bytes, "Largest file")->capture_default_str();

  CLI11_PARSE(app, argc, argv);
  try {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    chosen(o);
    if (verbose)
      std::cerr << "ddstage-gen: wrote " << o.out << " (" << o.samples << " samples, seed "
                << o.seed << ")\n";
  } catch (const std::exception& e) {
    std::cerr << "ddstage-gen: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
