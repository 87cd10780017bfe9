#include "base/host_root.h"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <system_error>

namespace gpuckpt {

namespace fs = std::filesystem;

HostRoot::HostRoot(fs::path root) : root_(std::move(root)) {}

fs::path HostRoot::resolve(std::string_view relative) const {
  while (!relative.empty() && relative.front() == '/') relative.remove_prefix(1);
  fs::path rel = fs::path(relative).lexically_normal();
  // ".." segments that climb out of the root are dropped: host paths are never taken from strangers, but a
  // fixture or a config file must not be able to escape either.
  fs::path clean;
  for (const auto& part : rel) {
    if (part == "..") {
      if (!clean.empty()) clean = clean.parent_path();
    } else if (part != ".") {
      clean /= part;
    }
  }
  return root_ / clean;
}

bool HostRoot::exists(std::string_view relative) const {
  std::error_code ec;
  return fs::exists(resolve(relative), ec);
}

Result<std::string> HostRoot::read_file(std::string_view relative, std::size_t max_bytes) const {
  const fs::path path = resolve(relative);
  std::ifstream in(path, std::ios::binary);
  if (!in) return make_error("cannot read " + path.string(), ENOENT);
  // sysfs files are small and report no size: read in pieces up to max_bytes rather than allocating (and
  // zero-filling) the whole limit for every attribute.
  std::string data;
  char chunk[4096];
  while (data.size() < max_bytes && in) {
    const std::size_t want = std::min(sizeof chunk, max_bytes - data.size());
    in.read(chunk, static_cast<std::streamsize>(want));
    data.append(chunk, static_cast<std::size_t>(in.gcount()));
  }
  if (in.bad()) return make_error("I/O error reading " + path.string(), EIO);
  return data;
}

Result<std::string> HostRoot::read_line(std::string_view relative) const {
  GPUCKPT_TRY(const std::string data, read_file(relative, 64 * 1024));
  std::string line = data.substr(0, data.find('\n'));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

Result<std::uint64_t> HostRoot::read_uint(std::string_view relative) const {
  GPUCKPT_TRY(const std::string text, read_line(relative));
  try {
    std::size_t used = 0;
    const bool hex = text.rfind("0x", 0) == 0 || text.rfind("0X", 0) == 0;
    std::uint64_t v = std::stoull(text, &used, hex ? 16 : 10);
    if (used != text.size()) throw std::invalid_argument(text);
    return v;
  } catch (const std::exception&) {
    return make_error(resolve(relative).string() + ": expected a number, read '" + text + "'");
  }
}

Result<std::vector<std::string>> HostRoot::list_dir(std::string_view relative) const {
  const fs::path path = resolve(relative);
  std::error_code ec;
  fs::directory_iterator it(path, ec);
  if (ec) return make_error("cannot list " + path.string() + ": " + ec.message(), ec.value());
  std::vector<std::string> names;
  for (const auto& entry : it) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

Result<std::string> HostRoot::read_link(std::string_view relative) const {
  const fs::path path = resolve(relative);
  std::error_code ec;
  fs::path target = fs::read_symlink(path, ec);
  if (ec) return make_error("cannot read link " + path.string() + ": " + ec.message(), ec.value());
  return target.string();
}

}  // namespace gpuckpt
