#include "criu-plugin/cuda/frozen_cgroup.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace gpuckpt::cuda {
namespace {

namespace fs = std::filesystem;

std::string first_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

// "written" or why not: the file is the kernel's control file, one write of the new state.
std::string write_state(const fs::path& file, const char* state) {
  const int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return std::strerror(errno);
  const auto length = static_cast<ssize_t>(std::strlen(state));
  const bool written = ::write(fd, state, static_cast<std::size_t>(length)) == length;
  const std::string why = written ? std::string() : std::string(std::strerror(errno));
  ::close(fd);
  return why;
}

// A cgroup path as /proc/PID/cgroup gives it, usable under the cgroupfs root: absolute, no "..", which the
// kernel writes when the cgroup lies outside this (the guardian's) cgroup namespace.
bool usable(const std::string& path) {
  if (path.empty() || path.front() != '/' || path.size() > 4096) return false;
  for (const auto& part : fs::path(path)) if (part == "..") return false;
  return true;
}

void thaw_v2(const fs::path& root, const std::string& path, std::vector<std::string>& lines) {
  for (fs::path dir = fs::path(path).relative_path(); !dir.empty(); dir = dir.parent_path()) {
    const fs::path control = root / dir / "cgroup.freeze";
    if (first_line(control) != "1") continue;
    std::string why = write_state(control, "0");
    lines.push_back(why.empty() ? "thawed " + (root / dir).string() : "cannot thaw " + (root / dir).string() + ": " + why);
  }
}

void thaw_v1(const fs::path& root, const std::string& path, std::vector<std::string>& lines) {
  const fs::path dir = root / "freezer" / fs::path(path).relative_path();
  const std::string state = first_line(dir / "freezer.state");
  if (state != "FROZEN" && state != "FREEZING") return;
  std::string why = write_state(dir / "freezer.state", "THAWED");
  lines.push_back(why.empty() ? "thawed " + dir.string() : "cannot thaw " + dir.string() + ": " + why);
}

}  // namespace

std::vector<std::string> thaw_frozen_cgroups(int pid, const std::string& proc, const std::string& cgroup_root) {
  std::vector<std::string> lines;
  std::ifstream in(fs::path(proc) / std::to_string(pid) / "cgroup");
  std::string line;
  for (int count = 0; count < 64 && std::getline(in, line); ++count) {   // "ID:controllers:path", one per hierarchy
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string id = line.substr(0, first), controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    const bool v2 = id == "0" && controllers.empty();
    std::istringstream names(controllers);
    bool freezer = false;
    for (std::string name; std::getline(names, name, ',');) freezer = freezer || name == "freezer";
    if (!v2 && !freezer) continue;
    if (!usable(path)) {
      lines.push_back("cannot thaw the cgroup of pid " + std::to_string(pid) + ": " + path.substr(0, 256) +
                      " lies outside this cgroup namespace");
      continue;
    }
    if (v2) thaw_v2(cgroup_root, path, lines);
    else thaw_v1(cgroup_root, path, lines);
  }
  return lines;
}

}  // namespace gpuckpt::cuda
