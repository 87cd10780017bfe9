#include "criu-plugin/cuda/process_info.h"

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <signal.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace gpuckpt::cuda {

NvidiaFiles nvidia_files(int pid, const std::string& proc) {
  NvidiaFiles files;
  std::set<int> minors;
  std::error_code ec;
  const std::filesystem::path dir = std::filesystem::path(proc) / std::to_string(pid) / "fd";
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    struct stat st {};
    if (::stat(entry.path().c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) continue;
    if (major(st.st_rdev) == kNvidiaMajor) {
      files.any = true;
      unsigned minor_number = minor(st.st_rdev);
      if (minor_number < 254) minors.insert(static_cast<int>(minor_number));
    } else {
      // nvidia-uvm has a dynamic major; it still marks a CUDA process.
      std::error_code link_ec;
      auto target = std::filesystem::read_symlink(entry.path(), link_ec).string();
      if (!link_ec && target.rfind("/dev/nvidia", 0) == 0) files.any = true;
    }
  }
  files.gpu_minors.assign(minors.begin(), minors.end());
  return files;
}

std::vector<int> descendants(int pid, const std::string& proc) {
  std::vector<int> out;
  std::vector<int> todo{pid};
  std::set<int> seen{pid};
  while (!todo.empty()) {
    int current = todo.back();
    todo.pop_back();
    std::error_code ec;
    const auto tasks = std::filesystem::path(proc) / std::to_string(current) / "task";
    for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
      std::ifstream children(task.path() / "children");
      int child = 0;
      while (children >> child) {
        if (seen.insert(child).second) {
          out.push_back(child);
          todo.push_back(child);
        }
      }
    }
  }
  return out;
}

bool process_alive(int pid) {
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size()) return false;
  char state = line[close + 2];
  return state != 'Z' && state != 'X';
}

int thread_id_here(int pid, int tid, const std::string& proc) {
  std::error_code ec;
  int same_number = -1;
  const auto tasks = std::filesystem::path(proc) / std::to_string(pid) / "task";
  for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
    const std::string name = task.path().filename().string();
    int here = 0;
    auto parsed = std::from_chars(name.data(), name.data() + name.size(), here);
    if (parsed.ec != std::errc() || parsed.ptr != name.data() + name.size()) continue;
    std::ifstream status(task.path() / "status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("NSpid:", 0) != 0) continue;
      std::istringstream ids(line.substr(6));
      int id = 0, innermost = -1;
      while (ids >> id) innermost = id;
      if (innermost == tid) return here;
      break;
    }
    if (here == tid) same_number = here;
  }
  return same_number;
}

}  // namespace gpuckpt::cuda
