// Typed data between ranks: each struct names its fields once (a static `fields(self, f)`), and
// these two walk them to and from bytes. Every rank runs the same binary, so the bytes are the
// fields' own representation, lengths first for strings and lists.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "ddstage/error.hpp"

namespace ddstage::detail {

class WireWriter {
 public:
  template <class... T>
  void operator()(const T&... values) {
    (put(values), ...);
  }
  std::string take() { return std::move(m_bytes); }

 private:
  template <class T>
  void put(const T& v) {
    if constexpr (std::is_arithmetic_v<T> || std::is_enum_v<T>) {
      m_bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
    } else {
      T::fields(v, *this);
    }
  }
  void put(const std::string& s) {
    put(uint64_t{s.size()});
    m_bytes += s;
  }
  template <class T>
  void put(const std::optional<T>& v) {
    put(v.has_value());
    if (v) put(*v);
  }
  template <class T>
  void put(const std::vector<T>& items) {
    put(uint64_t{items.size()});
    for (const auto& item : items) put(item);
  }

  std::string m_bytes;
};

class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : m_bytes(bytes) {}
  template <class... T>
  void operator()(T&... values) {
    (get(values), ...);
  }
  /// Throws when bytes are left: the writer wrote fields this reader does not know.
  void finish() const {
    if (!m_bytes.empty())
      throw Error(ErrorKind::runtime, "message from another rank has " +
                                          std::to_string(m_bytes.size()) + " unread bytes");
  }

 private:
  template <class T>
  void get(T& v) {
    if constexpr (std::is_enum_v<T>) {
      // A scoped enum's underlying type fixes its values: every one read is a valid enumerator
      // value (an unscoped one without a fixed type would make some undefined).
      static_assert(!std::is_convertible_v<T, std::underlying_type_t<T>>, "scoped enums only");
      std::underlying_type_t<T> raw{};
      get(raw);
      v = static_cast<T>(raw);
    } else if constexpr (std::is_arithmetic_v<T>) {
      std::memcpy(&v, take(sizeof v).data(), sizeof v);
    } else {
      T::fields(v, *this);
    }
  }
  void get(bool& v) {
    // Only 0 and 1 are bools: any other byte copied in would be undefined behaviour.
    uint8_t raw = 0;
    get(raw);
    if (raw > 1) throw Error(ErrorKind::runtime, "malformed message from another rank");
    v = raw == 1;
  }
  void get(std::string& s) {
    uint64_t n = 0;
    get(n);
    s = take(n);
  }
  template <class T>
  void get(std::optional<T>& v) {
    bool has = false;
    get(has);
    v.reset();
    if (has) get(v.emplace());
  }
  template <class T>
  void get(std::vector<T>& items) {
    uint64_t n = 0;
    get(n);
    // Every element takes at least one byte: a count beyond the bytes left is a short message,
    // not a reason to allocate n elements first.
    if (n > m_bytes.size()) throw truncated();
    items.assign(n, T{});
    for (auto& item : items) get(item);
  }
  std::string_view take(uint64_t n) {
    // Only another rank of this job writes these bytes: short ones are a bug, not an attack.
    if (n > m_bytes.size()) throw truncated();
    const auto out = m_bytes.substr(0, n);
    m_bytes.remove_prefix(n);
    return out;
  }
  static Error truncated() {
    return Error(ErrorKind::runtime, "truncated message from another rank");
  }

  std::string_view m_bytes;
};

template <class T>
std::string to_wire(const T& value) {
  WireWriter w;
  w(value);
  return w.take();
}

template <class T>
T from_wire(std::string_view bytes) {
  T value{};
  WireReader r(bytes);
  r(value);
  r.finish();
  return value;
}

}  // namespace ddstage::detail
