#include "criu-plugin/cuda/staging_memory.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <charconv>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

namespace gpuckpt::cuda {
namespace {

std::uint64_t hex(std::string_view s) {
  std::uint64_t value = 0;
  std::from_chars(s.data(), s.data() + s.size(), value, 16);
  return value;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

std::vector<Vma> parse_maps(std::string_view text) {
  // "start-end perms offset dev inode   path"
  std::vector<Vma> out;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    std::vector<std::string_view> fields;
    std::size_t pos = 0;
    while (fields.size() < 5 && pos < line.size()) {
      while (pos < line.size() && line[pos] == ' ') ++pos;
      const auto end = line.find(' ', pos);
      fields.push_back(line.substr(pos, end == std::string_view::npos ? std::string_view::npos : end - pos));
      pos = end == std::string_view::npos ? line.size() : end;
    }
    if (fields.size() < 5) continue;
    const auto dash = fields[0].find('-');
    if (dash == std::string_view::npos) continue;
    Vma v;
    v.start = hex(fields[0].substr(0, dash));
    v.end = hex(fields[0].substr(dash + 1));
    v.perms = std::string(fields[1]);
    std::from_chars(fields[4].data(), fields[4].data() + fields[4].size(), v.inode);
    while (pos < line.size() && line[pos] == ' ') ++pos;
    v.path = std::string(line.substr(pos));
    if (v.end > v.start) out.push_back(std::move(v));
  }
  return out;
}

Result<std::vector<Vma>> read_maps(int pid, const std::string& proc) {
  const std::string path = proc + "/" + std::to_string(pid) + "/maps";
  std::ifstream in(path);
  if (!in) return make_error("cannot read " + path, ESRCH);
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_maps(ss.str());
}

bool is_private_anonymous_rw(const Vma& v) {
  return v.perms.size() == 4 && v.perms[0] == 'r' && v.perms[1] == 'w' && v.perms[3] == 'p' && v.inode == 0 &&
         v.path.empty();
}

std::vector<gpu_image::Region> find_staging_regions(const std::vector<Vma>& before, const std::vector<Vma>& after,
                                                    std::uint64_t min_bytes) {
  std::set<std::pair<std::uint64_t, std::uint64_t>> old;
  for (const Vma& v : before) old.insert({v.start, v.end});
  std::vector<gpu_image::Region> regions;
  for (const Vma& v : after)
    if (is_private_anonymous_rw(v) && v.size() >= min_bytes && old.count({v.start, v.end}) == 0)
      regions.push_back({v.start, v.size()});
  return regions;
}

std::vector<gpu_image::Region> find_named_region(const std::vector<Vma>& maps, std::uint64_t start) {
  for (const Vma& v : maps)
    if (v.start == start && is_private_anonymous_rw(v)) return {{v.start, v.size()}};
  return {};
}

Result<void> regions_are_mapped(const std::vector<gpu_image::Region>& regions, const std::vector<Vma>& maps) {
  auto private_writable = [](const Vma& v) {
    return v.perms.size() == 4 && v.perms[0] == 'r' && v.perms[1] == 'w' && v.perms[3] == 'p';
  };
  for (const auto& r : regions) {
    // One VMA, or several back to back (chunks mapped from the store split it: chunk_mapping.h).
    std::uint64_t covered = r.start;
    for (const Vma& v : maps) {
      if (v.end <= covered || v.start > covered) continue;
      if (!private_writable(v)) break;
      covered = v.end;
      if (covered >= r.start + r.length) break;
    }
    const bool inside = covered >= r.start + r.length;
    if (!inside)
      return make_error("the process has no private writable mapping at " + hex_address(r.start) + "-" +
                        hex_address(r.start + r.length) + " where its GPU memory was; its memory layout is not the "
                        "one that was checkpointed", EFAULT);
  }
  return {};
}

PathDecision decide_memory_path(const PathFacts& f) {
  if (!f.enabled) return {false, "GPUCKPT_CUDA_MEMORY_IMAGE=0: CRIU dumps the GPU memory with the process's pages"};
  if (!f.image_dir_known)
    return {false, "CRIU did not say where its images go: CRIU dumps the GPU memory with the process's pages"};
  if (f.image_dir_is_stream)
    return {false, "the images go to CRIU's image streamer (--stream), not to files: CRIU dumps the GPU memory with "
                   "the process's pages"};
  if (!f.can_drop_in_task)
    return {false, "this CRIU does not export compel's syscall injection, so the copied pages could not be dropped "
                   "from CRIU's dump: CRIU dumps the GPU memory with the process's pages"};
  if (f.staging_regions == 0)
    return {false, "no new private anonymous memory of at least " + std::to_string(kMinStagingBytes >> 20) +
                   " MiB appeared with the driver's checkpoint: CRIU dumps whatever the driver staged"};
  return {true, "gpuckpt writes the staged GPU memory itself"};
}

int namespace_pid(int pid, const std::string& proc) {
  const std::string status = read_text(proc + "/" + std::to_string(pid) + "/status");
  const auto at = status.find("\nNSpid:");
  if (at == std::string::npos) return pid;
  std::istringstream fields(status.substr(at + 7, status.find('\n', at + 1) - at - 7));
  int last = pid, value = 0;
  while (fields >> value) last = value;
  return last;
}

std::string hex_address(std::uint64_t a) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(a));
  return buf;
}

bool image_dir_is_stream(int dir_fd) {
  struct stat st {};
  for (const char* name : {"streamer-capture.sock", "streamer-serve.sock"})
    if (::fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(st.st_mode)) return true;
  return false;
}

Result<bool> switch_from_env(const char* name, const PluginSettings& node) { return switch_from_env_or(name, true, node); }

Result<bool> switch_from_env_or(const char* name, bool when_unset, const PluginSettings& node) {
  const std::string s = node.get(name);
  if (s.empty()) return when_unset;
  if (s == "1") return true;
  if (s == "0") return false;
  return make_error(std::string(name) + "='" + s + "' is not 0 or 1");
}

}  // namespace gpuckpt::cuda
