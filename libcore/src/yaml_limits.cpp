#include "yaml_limits.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <sstream>

#include <yaml-cpp/eventhandler.h>

namespace ddstage::detail {
namespace {

[[noreturn]] void fail(const YamlLimits& limits, const std::string& message) {
  switch (limits.source) {
    case YamlSource::user:
      throw UsageError(message);
    case YamlSource::file:
      throw IndexError(message);
    case YamlSource::peer:
      break;
  }
  throw Error(ErrorKind::runtime, message);
}

std::string at_line(const YAML::Mark& mark) {
  return mark.is_null() ? "" : " (line " + std::to_string(mark.line + 1) + ")";
}

std::string byte_limit(std::size_t bytes) {
  if (bytes % (std::size_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes) + " bytes";
}

/// Counts what a document would build and stops the parse at the first limit it passes, before
/// yaml-cpp recurses further or builds a single node.
class LimitScan : public YAML::EventHandler {
 public:
  LimitScan(const std::string& name, const YamlLimits& limits) : m_name(name), m_limits(limits) {}

  void OnDocumentStart(const YAML::Mark&) override {}
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { count(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override {
    fail(m_limits, m_name + ": YAML aliases are not allowed" + at_line(mark));
  }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    count(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    enter(mark);
  }
  void OnSequenceEnd() override { --m_depth; }
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    enter(mark);
  }
  void OnMapEnd() override { --m_depth; }

 private:
  void count(const YAML::Mark& mark) {
    if (++m_nodes > m_limits.max_nodes) {
      fail(m_limits, m_name + ": more than " + std::to_string(m_limits.max_nodes) + " YAML values" +
                         at_line(mark));
    }
  }
  void enter(const YAML::Mark& mark) {
    count(mark);
    if (++m_depth > m_limits.max_depth) {
      fail(m_limits, m_name + ": YAML nested deeper than " + std::to_string(m_limits.max_depth) +
                         " levels" + at_line(mark));
    }
  }

  const std::string& m_name;
  const YamlLimits& m_limits;
  std::size_t m_nodes = 0;
  int m_depth = 0;
};

}  // namespace

YAML::Node load_yaml(std::string_view text, const std::string& name, const YamlLimits& limits) {
  if (text.size() > limits.max_bytes) {
    fail(limits, name + ": larger than the " + byte_limit(limits.max_bytes) + " allowed");
  }
  try {
    std::istringstream in{std::string(text)};
    YAML::Parser parser(in);
    LimitScan scan(name, limits);
    parser.HandleNextDocument(scan);
    // Parsed again into nodes: yaml-cpp 0.7 installs no public node builder to feed events to.
    return YAML::Load(in.str());
  } catch (const YAML::Exception& e) {
    fail(limits, name + " is not valid YAML: " + e.msg + at_line(e.mark));
  }
}

YAML::Node load_yaml(const FileDescriptor& fd, const std::string& name, const YamlLimits& limits) {
  std::string text;
  std::size_t done = 0;
  for (;;) {
    // One byte past the limit tells a file at the limit from one beyond it.
    text.resize(std::min(limits.max_bytes + 1, std::max<std::size_t>(2 * done, 64 << 10)));
    const ssize_t n = ::read(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EISDIR) fail(limits, name + " is a directory, not a YAML file");
    if (n < 0) throw IoError("read " + fd.path().string(), errno, {.file = fd.path().string()});
    if (n == 0) break;
    done += static_cast<std::size_t>(n);
    if (done > limits.max_bytes) break;
  }
  text.resize(done);
  return load_yaml(text, name, limits);
}

YAML::Node load_yaml_file(const std::filesystem::path& path, const std::string& name,
                          const YamlLimits& limits) {
  return load_yaml(FileDescriptor::open(path, O_RDONLY | O_CLOEXEC), name, limits);
}

}  // namespace ddstage::detail
