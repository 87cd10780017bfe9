#include "gpumem/plugin_settings.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/log.h"

namespace gpuckpt {

namespace fs = std::filesystem;

namespace {

constexpr std::size_t kMaxLines = 256;
constexpr std::size_t kMaxValue = 64;

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

constexpr std::array<std::string_view, 9> kKnownSettings = {
    "GPUCKPT_CUDA_MEMORY_IMAGE",  "GPUCKPT_IMAGE_THREADS",      "GPUCKPT_IMAGE_COMPRESSION",
    "GPUCKPT_IMAGE_SPARSE",       "GPUCKPT_GPU_STORE",          "GPUCKPT_STAGING_HUGE_PAGES",
    "GPUCKPT_STAGING_MAP_CHUNKS", "GPUCKPT_STORE_RECOGNISE_UNCHANGED", "GPUCKPT_CPU_PAGES_STORE"};

std::string known_settings() {
  std::string out;
  for (std::string_view name : kKnownSettings) out += (out.empty() ? "" : ", ") + std::string(name);
  return out;
}

}  // namespace

bool is_plugin_setting(std::string_view name) {
  return std::find(kKnownSettings.begin(), kKnownSettings.end(), name) != kKnownSettings.end();
}

Result<std::map<std::string, std::string>> parse_plugin_settings(std::string_view text, std::string_view source) {
  if (text.size() > kMaxPluginSettingsBytes)
    return make_error(std::string(source) + ": larger than " + std::to_string(kMaxPluginSettingsBytes) + " bytes");
  std::map<std::string, std::string> values;
  std::size_t line_no = 0;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    const std::string_view raw = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (++line_no > kMaxLines) return make_error(std::string(source) + ": more than " + std::to_string(kMaxLines) + " lines");
    auto problem = [&](const std::string& what) {
      return make_error(std::string(source) + ": line " + std::to_string(line_no) + ": " + what);
    };
    for (char c : raw)
      if ((static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\r') || static_cast<unsigned char>(c) >= 0x7f)
        return problem("a control or non-ASCII character");
    const std::string_view line = trim(raw);
    if (line.empty() || line.front() == '#') continue;
    const auto eq = line.find('=');
    if (eq == std::string_view::npos) return problem("not NAME=VALUE");
    const std::string name(trim(line.substr(0, eq)));
    const std::string value(trim(line.substr(eq + 1)));
    if (!is_plugin_setting(name))
      return problem("unknown setting '" + name.substr(0, 64) + "' (known: " + known_settings() + ")");
    if (value.empty() || value.size() > kMaxValue || value.find_first_of(" \t") != std::string::npos)
      return problem(name + " needs one value of 1 to " + std::to_string(kMaxValue) + " characters without spaces");
    if (!values.emplace(name, value).second) return problem(name + " is set twice");
  }
  return values;
}

Result<std::map<std::string, std::string>> read_plugin_settings(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return std::map<std::string, std::string>();
    return make_error("cannot open " + path.string() + ": " + std::strerror(errno), errno);
  }
  struct stat st {};
  std::string text;
  Error failure;
  bool failed = false;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    failed = true;
    failure = make_error(path.string() + " is not a regular file");
  } else {
    char buffer[4096];
    for (;;) {
      const ssize_t n = ::read(fd, buffer, sizeof buffer);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        failed = true;
        failure = make_error("cannot read " + path.string() + ": " + std::strerror(errno), errno);
        break;
      }
      if (n == 0) break;
      text.append(buffer, static_cast<std::size_t>(n));
      if (text.size() > kMaxPluginSettingsBytes) break;   // parse refuses it, naming the limit
    }
  }
  ::close(fd);
  if (failed) return failure;
  return parse_plugin_settings(text, path.string());
}

PluginSettings PluginSettings::load(const fs::path& path) {
  auto values = read_plugin_settings(path);
  if (!values) {
    log::error(values.error().message + "; the file is ignored, the plugin's defaults apply");
    return PluginSettings();
  }
  if (!values->empty()) log::param("settings file", path.string() + " (" + std::to_string(values->size()) + " settings)");
  return PluginSettings(std::move(values.value()));
}

std::string PluginSettings::get(std::string_view name) const {
  const std::string key(name);
  if (const char* env = std::getenv(key.c_str()); env != nullptr && *env != '\0') return env;
  auto it = file_.find(key);
  return it == file_.end() ? std::string() : it->second;
}

fs::path object_dir_of(const void* address, const fs::path& maps) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream in(maps);
  std::string line;
  while (std::getline(in, line)) {
    // "start-end perms offset dev inode   path"
    std::istringstream fields(line);
    std::string range, perms, offset, dev, inode, path;
    if (!(fields >> range >> perms >> offset >> dev >> inode)) continue;
    std::getline(fields, path);
    const auto dash = range.find('-');
    if (dash == std::string::npos) continue;
    const auto start = std::strtoull(range.substr(0, dash).c_str(), nullptr, 16);
    const auto end = std::strtoull(range.substr(dash + 1).c_str(), nullptr, 16);
    if (at < start || at >= end) continue;
    const auto first = path.find_first_not_of(' ');
    if (first == std::string::npos || path[first] != '/') return {};
    return fs::path(path.substr(first)).parent_path();
  }
  return {};
}

const PluginSettings& plugin_settings() {
  static const PluginSettings settings = [] {
    const char* named = std::getenv("GPUCKPT_PLUGIN_SETTINGS");
    if (named != nullptr && *named != '\0') return PluginSettings::load(named);
    const fs::path dir = object_dir_of(reinterpret_cast<const void*>(&plugin_settings));
    if (dir.empty()) {
      log::warn(std::string("cannot tell where this plugin was loaded from; ") + kPluginSettingsFile + " is not read");
      return PluginSettings();
    }
    return PluginSettings::load(dir / kPluginSettingsFile);
  }();
  return settings;
}

}  // namespace gpuckpt
