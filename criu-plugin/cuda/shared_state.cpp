#include "criu-plugin/cuda/shared_state.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

namespace gpuckpt::cuda {
namespace {

namespace fs = std::filesystem;

constexpr std::string_view kNcclSocketPrefix = "@tmp/nccl-socket-";
constexpr std::string_view kNcclSegmentPrefix = "/dev/shm/nccl-";

std::string link_target(const fs::path& link) {
  std::error_code ec;
  auto target = fs::read_symlink(link, ec);
  return ec ? std::string() : target.string();
}

// "socket:[30821]" -> 30821; 0 for anything else.
unsigned long socket_inode(const std::string& target) {
  constexpr std::string_view prefix = "socket:[";
  if (target.rfind(prefix, 0) != 0 || target.back() != ']') return 0;
  unsigned long inode = 0;
  auto parsed = std::from_chars(target.data() + prefix.size(), target.data() + target.size() - 1, inode);
  return parsed.ec == std::errc() && parsed.ptr == target.data() + target.size() - 1 ? inode : 0;
}

// The unix sockets of one network namespace with a name: inode -> path ("@..." for abstract names). Read from
// /proc/PID/net/unix, which shows the namespace of PID. NCCL pads its abstract names with NULs, which the kernel
// prints as '@': they are cut off.
std::map<unsigned long, std::string> unix_socket_names(const fs::path& net_unix) {
  std::map<unsigned long, std::string> names;
  std::ifstream in(net_unix);
  std::string line;
  std::getline(in, line);   // header
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string num, refcount, protocol, flags, type, st, path;
    unsigned long inode = 0;
    if (!(fields >> num >> refcount >> protocol >> flags >> type >> st >> inode >> path)) continue;
    if (path.size() > 1 && path[0] == '@') path.erase(path.find_last_not_of('@') + 1);
    names[inode] = path;
  }
  return names;
}

class ProcReader {
 public:
  explicit ProcReader(fs::path proc) : proc_(std::move(proc)) {}

  std::string net_namespace(int pid) const { return link_target(proc_ / std::to_string(pid) / "ns" / "net"); }

  // The NCCL sockets `pid` holds open, by the names its network namespace gives them.
  std::vector<std::string> nccl_sockets(int pid) {
    std::vector<std::string> found;
    std::set<unsigned long> inodes;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(proc_ / std::to_string(pid) / "fd", ec))
      if (unsigned long inode = socket_inode(link_target(entry.path())); inode != 0) inodes.insert(inode);
    if (inodes.empty()) return found;
    const auto& names = names_in(pid);
    for (unsigned long inode : inodes) {
      auto it = names.find(inode);
      if (it != names.end() && it->second.rfind(kNcclSocketPrefix, 0) == 0) found.push_back(it->second);
    }
    std::sort(found.begin(), found.end());
    return found;
  }

  // NCCL's shared memory segments `pid` maps or holds open.
  std::vector<std::string> nccl_segments(int pid) const {
    std::set<std::string> found;
    std::ifstream maps(proc_ / std::to_string(pid) / "maps");
    std::string line;
    while (std::getline(maps, line)) {
      auto at = line.find(kNcclSegmentPrefix);
      if (at != std::string::npos) found.insert(line.substr(at));
    }
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(proc_ / std::to_string(pid) / "fd", ec)) {
      std::string target = link_target(entry.path());
      if (target.rfind(kNcclSegmentPrefix, 0) == 0) found.insert(target);
    }
    return {found.begin(), found.end()};
  }

  std::vector<int> all_pids() const {
    std::vector<int> pids;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(proc_, ec)) {
      const std::string name = entry.path().filename().string();
      int pid = 0;
      auto parsed = std::from_chars(name.data(), name.data() + name.size(), pid);
      if (parsed.ec == std::errc() && parsed.ptr == name.data() + name.size() && pid > 0) pids.push_back(pid);
    }
    std::sort(pids.begin(), pids.end());
    return pids;
  }

 private:
  // One table per network namespace: processes of one pod share it.
  const std::map<unsigned long, std::string>& names_in(int pid) {
    const std::string ns = net_namespace(pid);
    auto it = tables_.find(ns);
    if (it == tables_.end() || ns.empty())
      it = tables_.insert_or_assign(ns, unix_socket_names(proc_ / std::to_string(pid) / "net" / "unix")).first;
    return it->second;
  }

  fs::path proc_;
  std::map<std::string, std::map<unsigned long, std::string>> tables_;
};

std::string join(const std::vector<std::string>& items, const std::string& separator) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : separator) + item;
  return out;
}

std::string join_pids(const std::vector<int>& pids) {
  std::vector<std::string> items;
  for (int pid : pids) items.push_back(std::to_string(pid));
  if (items.size() < 2) return join(items, "");
  std::string last = items.back();
  items.pop_back();
  return join(items, ", ") + " and " + last;
}

}  // namespace

bool driver_restores_shared_state(const std::string& version) {
  int major = 0;
  auto parsed = std::from_chars(version.data(), version.data() + version.size(), major);
  if (parsed.ec != std::errc() || parsed.ptr == version.data()) return false;
  return major >= kSharedStateDriverMajor;
}

SharedState find_shared_state(const std::vector<int>& pids, const std::string& proc) {
  SharedState state;
  ProcReader reader{fs::path(proc)};
  std::set<std::string> namespaces;
  for (int pid : pids) {
    SharedStateEvidence evidence{reader.nccl_sockets(pid), reader.nccl_segments(pid)};
    if (!evidence.any()) continue;
    state.by_pid[pid] = std::move(evidence);
    namespaces.insert(reader.net_namespace(pid));
  }
  if (state.by_pid.empty()) return state;
  const std::set<int> given(pids.begin(), pids.end());
  for (int pid : reader.all_pids()) {
    if (given.count(pid) != 0 || namespaces.count(reader.net_namespace(pid)) == 0) continue;
    if (!reader.nccl_sockets(pid).empty()) state.outside_peers.push_back(pid);
  }
  return state;
}

bool in_checkpoint_job(int pid, const std::string& proc) {
  std::ifstream environ(fs::path(proc) / std::to_string(pid) / "environ", std::ios::binary);
  std::string variable;
  while (std::getline(environ, variable, '\0'))
    if (variable.rfind("CUDA_CHECKPOINT_JOB_FILE=", 0) == 0) return true;
  return false;
}

std::string describe(const SharedState& state) {
  std::vector<int> pids;
  std::vector<std::string> details;
  for (const auto& [pid, evidence] : state.by_pid) {
    pids.push_back(pid);
    std::vector<std::string> what;
    if (!evidence.nccl_sockets.empty()) what.push_back("NCCL socket " + join(evidence.nccl_sockets, ", "));
    if (!evidence.nccl_segments.empty()) what.push_back("NCCL shared memory " + join(evidence.nccl_segments, ", "));
    details.push_back("pid " + std::to_string(pid) + ": " + join(what, "; "));
  }
  std::vector<int> all = pids;
  all.insert(all.end(), state.outside_peers.begin(), state.outside_peers.end());
  std::string text = all.size() > 1 ? "NCCL/CUDA IPC between processes " + join_pids(all)
                                    : "NCCL communicator of process " + join_pids(all) + " (no other process in its network "
                                      "namespace has one: its other ranks are in the same process or on other nodes)";
  if (!state.outside_peers.empty())
    text += " (" + join_pids(state.outside_peers) + (state.outside_peers.size() > 1 ? " are" : " is") +
            " not part of this dump)";
  return text + " [" + join(details, "; ") + "]";
}

}  // namespace gpuckpt::cuda
