#include "zip_inflate.hpp"

#include <zlib.h>

#include <fmt/format.h>
#include <algorithm>
#include <limits>

#include "ddstage/error.hpp"

namespace ddstage::formats {
namespace {

// Compressed input needs no large buffer: zlib's output, the rows, is what the budget is for.
constexpr uint64_t max_chunk = 1u << 20;
// Deflate's best ratio (zlib's documentation): no member inflates to more per compressed byte.
constexpr uint64_t max_ratio = 1032;

uint32_t update_crc(uint32_t crc, std::span<const std::byte> bytes) {
  return static_cast<uint32_t>(
      crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()), static_cast<uInt>(bytes.size())));
}

void check_crc(uint32_t crc, const ZipMember& m, const std::string& name, const char* what) {
  if (crc != m.crc32) {
    throw Error(ErrorKind::runtime,
                fmt::format("{}: the {} data is corrupt: CRC-32 {:08x} does not match the "
                            "directory's {:08x}",
                            name, what, crc, m.crc32),
                {.file = name});
  }
}

}  // namespace

void check_stored_crc(const FileDescriptor& fd, const ZipMember& member, const std::string& name,
                      uint64_t chunk_bytes) {
  std::vector<std::byte> buffer(std::clamp<uint64_t>(chunk_bytes, 4096, max_chunk));
  uint32_t crc = update_crc(0, {});
  for (uint64_t done = 0; done < member.compressed_size;) {
    const auto chunk =
        std::span(buffer).first(std::min<uint64_t>(member.compressed_size - done, buffer.size()));
    fd.pread_exact(chunk, member.data_offset + done);
    crc = update_crc(crc, chunk);
    done += chunk.size();
  }
  check_crc(crc, member, name, "stored");
}

struct ZipInflater::Stream {
  z_stream z{};
};

ZipInflater::ZipInflater(const FileDescriptor& fd, const ZipMember& member, std::string name,
                         uint64_t chunk_bytes)
    : m_fd(fd),
      m_member(member),
      m_name(std::move(name)),
      m_input(std::clamp<uint64_t>(chunk_bytes, 4096, max_chunk)),
      m_crc(update_crc(0, {})),
      m_stream(std::make_unique<Stream>()) {
  // A larger size can only be a lie, and callers size buffers after it (one row may be larger
  // than the memory budget): refused before anything is allocated.
  if (m_member.size / max_ratio > m_member.compressed_size) {
    corrupt(fmt::format("{} compressed bytes cannot inflate to the {} its directory says",
                        m_member.compressed_size, m_member.size));
  }
  // Negative window bits: a raw deflate stream, as zip stores it (no zlib header).
  if (inflateInit2(&m_stream->z, -MAX_WBITS) != Z_OK) {
    throw Error(ErrorKind::runtime, m_name + ": cannot start zlib's inflate", {.file = m_name});
  }
}

ZipInflater::~ZipInflater() {
  inflateEnd(&m_stream->z);
}

void ZipInflater::corrupt(const std::string& reason) const {
  throw Error(ErrorKind::runtime,
              fmt::format("{}: the deflated data is corrupt: {}", m_name, reason),
              {.file = m_name});
}

void ZipInflater::refill() {
  const uint64_t left = m_member.compressed_size - m_consumed;
  if (left == 0) corrupt(fmt::format("the compressed bytes end after {} bytes", m_produced));
  const auto chunk = std::span(m_input).first(std::min<uint64_t>(left, m_input.size()));
  m_fd.pread_exact(chunk, m_member.data_offset + m_consumed);
  m_consumed += chunk.size();
  m_stream->z.next_in = reinterpret_cast<Bytef*>(chunk.data());
  m_stream->z.avail_in = static_cast<uInt>(chunk.size());
}

void ZipInflater::read(std::span<std::byte> out) {
  auto& z = m_stream->z;
  while (!out.empty()) {
    if (m_ended) corrupt(fmt::format("it ends after {} bytes", m_produced));
    if (z.avail_in == 0) refill();
    const auto piece = out.first(std::min<uint64_t>(out.size(), std::numeric_limits<uInt>::max()));
    z.next_out = reinterpret_cast<Bytef*>(piece.data());
    z.avail_out = static_cast<uInt>(piece.size());
    const int rc = inflate(&z, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END && rc != Z_BUF_ERROR)
      corrupt(z.msg ? z.msg : fmt::format("zlib error {}", rc));
    const uint64_t produced = piece.size() - z.avail_out;
    m_crc = update_crc(m_crc, piece.first(produced));
    m_produced += produced;
    out = out.subspan(produced);
    m_ended = rc == Z_STREAM_END;
  }
}

void ZipInflater::finish() {
  if (!m_ended) {
    // The stream may still hold its end marker: ask for one more byte, which must not come.
    std::byte extra{};
    auto& z = m_stream->z;
    z.next_out = reinterpret_cast<Bytef*>(&extra);
    z.avail_out = 1;
    while (!m_ended) {
      if (z.avail_in == 0) refill();
      const int rc = inflate(&z, Z_NO_FLUSH);
      if (z.avail_out == 0)
        corrupt(fmt::format("it holds more than the {} bytes its directory says", m_member.size));
      if (rc != Z_OK && rc != Z_STREAM_END)
        corrupt(z.msg ? z.msg : fmt::format("zlib error {}", rc));
      m_ended = rc == Z_STREAM_END;
    }
  }
  if (m_produced != m_member.size) {
    corrupt(fmt::format("it holds {} bytes but its directory says {}", m_produced, m_member.size));
  }
  check_crc(m_crc, m_member, m_name, "deflated");
}

}  // namespace ddstage::formats
