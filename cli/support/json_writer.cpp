#include "support/json_writer.hpp"

#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace ddstage::cli {

void JsonWriter::before_value() {
  if (m_after_key) {
    m_after_key = false;
    return;
  }
  if (!m_stack.empty()) {
    if (m_stack.back() == '{') throw std::logic_error("JsonWriter: value in an object needs a key");
    if (!m_first.back()) m_out += ',';
    m_first.back() = false;
  }
}

JsonWriter& JsonWriter::begin_object() {
  before_value();
  m_out += '{';
  m_stack.push_back('{');
  m_first.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_object() {
  if (m_stack.empty() || m_stack.back() != '{' || m_after_key)
    throw std::logic_error("JsonWriter: bad end_object");
  m_stack.pop_back();
  m_first.pop_back();
  m_out += '}';
  return *this;
}

JsonWriter& JsonWriter::begin_array() {
  before_value();
  m_out += '[';
  m_stack.push_back('[');
  m_first.push_back(true);
  return *this;
}

JsonWriter& JsonWriter::end_array() {
  if (m_stack.empty() || m_stack.back() != '[') throw std::logic_error("JsonWriter: bad end_array");
  m_stack.pop_back();
  m_first.pop_back();
  m_out += ']';
  return *this;
}

JsonWriter& JsonWriter::key(std::string_view k) {
  if (m_stack.empty() || m_stack.back() != '{' || m_after_key)
    throw std::logic_error("JsonWriter: key outside object");
  if (!m_first.back()) m_out += ',';
  m_first.back() = false;
  write_string(k);
  m_out += ':';
  m_after_key = true;
  return *this;
}

JsonWriter& JsonWriter::value(std::string_view v) {
  before_value();
  write_string(v);
  return *this;
}

void JsonWriter::write_string(std::string_view v) {
  m_out += '"';
  for (char c : v) {
    switch (c) {
      case '"':
        m_out += "\\\"";
        break;
      case '\\':
        m_out += "\\\\";
        break;
      case '\n':
        m_out += "\\n";
        break;
      case '\t':
        m_out += "\\t";
        break;
      case '\r':
        m_out += "\\r";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          m_out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
        } else {
          m_out += c;
        }
    }
  }
  m_out += '"';
}

JsonWriter& JsonWriter::value(double v) {
  before_value();
  m_out += std::isfinite(v) ? fmt::format("{:.6g}", v) : "null";
  return *this;
}

JsonWriter& JsonWriter::value(uint64_t v) {
  before_value();
  m_out += std::to_string(v);
  return *this;
}

JsonWriter& JsonWriter::value(int64_t v) {
  before_value();
  m_out += std::to_string(v);
  return *this;
}

JsonWriter& JsonWriter::value(bool v) {
  before_value();
  m_out += v ? "true" : "false";
  return *this;
}

JsonWriter& JsonWriter::null() {
  before_value();
  m_out += "null";
  return *this;
}

const std::string& JsonWriter::str() const {
  if (!m_stack.empty()) throw std::logic_error("JsonWriter: document not closed");
  return m_out;
}

}  // namespace ddstage::cli
