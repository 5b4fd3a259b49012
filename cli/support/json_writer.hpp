// Minimal streaming JSON output for --json (none of the project's dependencies writes JSON).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ddstage::cli {

/// Builds a JSON document with correct escaping and commas. Misnesting is a logic_error.
class JsonWriter {
 public:
  JsonWriter& begin_object();
  JsonWriter& end_object();
  JsonWriter& begin_array();
  JsonWriter& end_array();
  /// The next value belongs to this key (inside an object).
  JsonWriter& key(std::string_view k);
  JsonWriter& value(std::string_view v);
  JsonWriter& value(const char* v) { return value(std::string_view(v)); }
  JsonWriter& value(double v);
  JsonWriter& value(uint64_t v);
  JsonWriter& value(int64_t v);
  JsonWriter& value(int v) { return value(static_cast<int64_t>(v)); }
  JsonWriter& value(unsigned v) { return value(static_cast<uint64_t>(v)); }
  JsonWriter& value(bool v);
  JsonWriter& null();
  template <typename T>
  JsonWriter& field(std::string_view k, const T& v) {
    key(k);
    return value(v);
  }

  /// The document; complete once every object and array is closed.
  const std::string& str() const;

 private:
  void before_value();
  void write_string(std::string_view v);
  std::string m_out;
  std::vector<char> m_stack;  // '{' or '['
  std::vector<bool> m_first;
  bool m_after_key = false;
};

}  // namespace ddstage::cli
