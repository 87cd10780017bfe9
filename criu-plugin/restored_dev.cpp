#include "criu-plugin/restored_dev.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <utility>

#include "base/json_reader.h"

namespace gpuckpt::plugin {

namespace {

constexpr std::size_t kMaxDevEntries = 65536;   // a container's /dev holds tens; more is not one CRIU restored

class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string errno_text(int e) { return std::strerror(e); }

std::string dev_name(const std::string& name) { return "/dev/" + name; }

// "dri/renderD128" -> ("dri", "renderD128"); "nvidia0" -> ("", "nvidia0").
std::pair<std::string, std::string> split_name(const std::string& name) {
  const auto slash = name.rfind('/');
  if (slash == std::string::npos) return {std::string(), name};
  return {name.substr(0, slash), name.substr(slash + 1)};
}

// The directory of `name` under /dev: /dev itself, or its subdirectory, opened without following a symlink (made
// when `create`; absent otherwise: ENOENT).
Result<Fd> open_parent(int dev_fd, const std::string& name, bool create) {
  const auto [dir, base] = split_name(name);
  if (dir.empty()) {
    const int fd = ::fcntl(dev_fd, F_DUPFD_CLOEXEC, 0);
    if (fd < 0) return make_error("cannot duplicate the restored /dev's descriptor: " + errno_text(errno), errno);
    return Fd(fd);
  }
  if (dir.find('/') != std::string::npos)
    return make_error(dev_name(name) + " is deeper than one directory under /dev; not a GPU node gpuckpt places");
  if (create && ::mkdirat(dev_fd, dir.c_str(), 0755) != 0 && errno != EEXIST)
    return make_error("cannot make " + dev_name(dir) + " in the restored /dev: " + errno_text(errno), errno);
  const int fd = ::openat(dev_fd, dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int e = errno;
    if (e == ENOENT) return make_error(dev_name(dir) + " is absent", ENOENT);
    return make_error(dev_name(dir) + " in the restored /dev is not a directory gpuckpt may use (" + errno_text(e) +
                          "); its GPU nodes are left as they are",
                      e);
  }
  return Fd(fd);
}

// What is at `name` (absent: std::nullopt).
Result<std::optional<FoundNode>> look_at(int dev_fd, const std::string& name) {
  auto parent = open_parent(dev_fd, name, false);
  if (!parent) {
    if (parent.error().errno_value == ENOENT) return std::optional<FoundNode>{};
    return parent.error();
  }
  struct stat st {};
  if (::fstatat(parent->get(), split_name(name).second.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (errno == ENOENT) return std::optional<FoundNode>{};
    return make_error("cannot stat " + dev_name(name) + " in the restored /dev: " + errno_text(errno), errno);
  }
  FoundNode node;
  node.char_device = S_ISCHR(st.st_mode);
  node.major = major(st.st_rdev);
  node.minor = minor(st.st_rdev);
  node.mode = st.st_mode & 07777;
  node.uid = st.st_uid;
  node.gid = st.st_gid;
  return std::optional<FoundNode>(node);
}

// The nvidia<N> names directly under /dev.
Result<std::vector<std::string>> nvidia_names(int dev_fd, std::size_t max_entries) {
  const int fd = ::openat(dev_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return make_error("cannot list the restored /dev: " + errno_text(errno), errno);
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    const int e = errno;
    ::close(fd);
    return make_error("cannot list the restored /dev: " + errno_text(e), e);
  }
  std::vector<std::string> names;
  std::size_t entries = 0;
  for (struct dirent* entry; (entry = ::readdir(dir)) != nullptr;) {
    if (++entries > max_entries) {
      ::closedir(dir);
      return make_error("the restored /dev holds more than " + std::to_string(max_entries) +
                            " entries: not a container's /dev; its GPU nodes are left as they are",
                        EFBIG);
    }
    if (is_nvidia_gpu_node(entry->d_name)) names.emplace_back(entry->d_name);
  }
  ::closedir(dir);
  return names;
}

std::string numbers_text(std::uint32_t major_number, std::uint32_t minor_number) {
  return std::to_string(major_number) + ":" + std::to_string(minor_number);
}

}  // namespace

bool is_nvidia_gpu_node(const std::string& name) {
  constexpr std::string_view prefix = "nvidia";
  if (name.size() <= prefix.size() || name.size() > prefix.size() + 3 || name.compare(0, prefix.size(), prefix) != 0)
    return false;
  for (std::size_t i = prefix.size(); i < name.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return false;
  return true;
}

Result<DevChanges> plan_dev_changes(const std::map<std::string, FoundNode>& found,
                                    const std::vector<PlannedNode>& planned) {
  std::map<std::string, const PlannedNode*> by_target;
  std::set<std::string> sources;
  bool places_nvidia = false;
  for (const auto& node : planned) {
    if (!by_target.emplace(node.target, &node).second)
      return make_error("two nodes of the restore plan go to " + dev_name(node.target) + "; refusing the plan");
    sources.insert(node.source);
    places_nvidia = places_nvidia || is_nvidia_gpu_node(node.target);
  }
  const auto concerned = [&](const std::string& name) {
    return by_target.count(name) || sources.count(name) || (places_nvidia && is_nvidia_gpu_node(name));
  };
  for (const auto& [name, node] : found)
    if (concerned(name) && !node.char_device)
      return make_error(dev_name(name) + " in the restored /dev is not a character device; its GPU nodes are left "
                                         "as they are",
                        EEXIST);
  DevChanges changes;
  for (const auto& [name, node] : found)
    if (concerned(name) && !by_target.count(name)) changes.remove.push_back(name);
  for (const auto& [target, node] : by_target) {
    const auto at = found.find(target);
    if (at != found.end() && at->second.major == node->major && at->second.minor == node->minor) continue;
    NodeToMake make{target, node->major, node->minor};
    const auto source = found.find(node->source);
    const FoundNode* like = source != found.end() ? &source->second : at != found.end() ? &at->second : nullptr;
    if (like != nullptr) {
      make.mode = like->mode;
      make.uid = like->uid;
      make.gid = like->gid;
    }
    changes.make.push_back(std::move(make));
  }
  return changes;
}

Result<std::vector<PlannedNode>> planned_nodes(const RestorePlan& plan, const DeviceNumberLookup& lookup) {
  std::vector<PlannedNode> nodes;
  for (const auto& d : plan.devices) {
    const std::string& restored = d.path_after_restore();
    if (d.container_path.rfind("/dev/", 0) != 0 || restored.rfind("/dev/", 0) != 0)
      return make_error("restore plan " + plan.id + ": device " + d.container_path + " -> " + restored +
                        " is not under /dev");
    PlannedNode node{d.container_path.substr(5), restored.substr(5)};
    if (d.target_numbers) {
      node.major = d.target_numbers->first;
      node.minor = d.target_numbers->second;
    } else {
      auto numbers = lookup(d.host_path);
      if (!numbers)
        return make_error("restore plan " + plan.id + " gives no numbers for " + d.host_path + " and " +
                              numbers.error().message,
                          numbers.error().errno_value);
      node.major = numbers->first;
      node.minor = numbers->second;
    }
    nodes.push_back(std::move(node));
  }
  return nodes;
}

Result<void> check_own_dev_tmpfs(int dev_fd, int host_dev_fd) {
  struct statfs fs {};
  if (::fstatfs(dev_fd, &fs) != 0) return make_error("cannot statfs the restored /dev: " + errno_text(errno), errno);
  if (static_cast<unsigned long>(fs.f_type) != TMPFS_MAGIC) {
    char type[32];
    std::snprintf(type, sizeof type, "0x%lx", static_cast<unsigned long>(fs.f_type));
    return make_error(std::string("the restored /dev is not a tmpfs (file system type ") + type +
                          "), so not one CRIU restored from the checkpoint's image; left as it is",
                      ENOTSUP);
  }
  struct stat dev {}, host {};
  if (::fstat(dev_fd, &dev) != 0 || ::fstat(host_dev_fd, &host) != 0)
    return make_error("cannot stat the restored /dev: " + errno_text(errno), errno);
  if (dev.st_dev == host.st_dev)
    return make_error("the restored /dev is the host's /dev (a bind mount of it): left as it is", ENOTSUP);
  return {};
}

Result<DevChanges> reconcile_dev(int dev_fd, const std::vector<PlannedNode>& planned, std::size_t max_entries) {
  std::set<std::string> names;
  for (const auto& node : planned) {
    names.insert(node.source);
    names.insert(node.target);
  }
  GPUCKPT_TRY(const auto listed, nvidia_names(dev_fd, max_entries));
  names.insert(listed.begin(), listed.end());
  std::map<std::string, FoundNode> found;
  for (const auto& name : names) {
    GPUCKPT_TRY(const std::optional<FoundNode> node, look_at(dev_fd, name));
    if (node) found[name] = *node;
  }
  auto changes = plan_dev_changes(found, planned);
  if (!changes || changes->empty()) return changes;

  // New nodes under temporary names first: a failure there leaves /dev as it was.
  struct Made {
    Fd dir;
    std::string temp;
    std::string base;
  };
  std::vector<Made> made;
  const auto undo = [&] {
    for (const auto& m : made) ::unlinkat(m.dir.get(), m.temp.c_str(), 0);
  };
  for (const auto& node : changes->make) {
    auto dir = open_parent(dev_fd, node.name, true);
    if (!dir) {
      undo();
      return dir.error();
    }
    const std::string base = split_name(node.name).second;
    const std::string temp = ".gpuckpt-" + base + "." + std::to_string(::getpid());
    const dev_t number = makedev(node.major, node.minor);
    if (::mknodat(dir->get(), temp.c_str(), S_IFCHR | 0600, number) != 0) {
      const int e = errno;
      undo();
      return make_error("cannot make " + dev_name(node.name) + " (" + numbers_text(node.major, node.minor) +
                            ") in the restored /dev: " + errno_text(e),
                        e);
    }
    made.push_back({std::move(dir.value()), temp, base});
    if (::fchownat(made.back().dir.get(), temp.c_str(), node.uid, node.gid, AT_SYMLINK_NOFOLLOW) != 0 ||
        ::fchmodat(made.back().dir.get(), temp.c_str(), node.mode & 07777, 0) != 0) {
      const int e = errno;
      undo();
      return make_error("cannot give " + dev_name(node.name) + " its owner and mode: " + errno_text(e), e);
    }
  }
  for (const auto& name : changes->remove) {
    auto dir = open_parent(dev_fd, name, false);
    if (!dir) {
      undo();
      return dir.error();
    }
    if (::unlinkat(dir->get(), split_name(name).second.c_str(), 0) != 0 && errno != ENOENT) {
      const int e = errno;
      undo();
      return make_error("cannot remove " + dev_name(name) + " from the restored /dev: " + errno_text(e), e);
    }
  }
  for (std::size_t i = 0; i < made.size(); ++i) {
    if (::renameat(made[i].dir.get(), made[i].temp.c_str(), made[i].dir.get(), made[i].base.c_str()) != 0) {
      const int e = errno;
      undo();
      return make_error("cannot put " + dev_name(changes->make[i].name) + " in place in the restored /dev: " +
                            errno_text(e) + "; the nodes removed before stay removed",
                        e);
    }
  }
  return changes;
}

Result<std::optional<RestorePlan>> read_placed_plan(int image_dir_fd) {
  constexpr std::size_t kMaxPlanBytes = 1 << 20;
  if (image_dir_fd < 0) return std::optional<RestorePlan>{};
  Fd fd(::openat(image_dir_fd, kPlanFileInImages, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  if (fd.get() < 0) {
    if (errno == ENOENT) return std::optional<RestorePlan>{};
    return make_error(std::string("cannot open ") + kPlanFileInImages + " in CRIU's images directory: " +
                          errno_text(errno),
                      errno);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode) || static_cast<std::uint64_t>(st.st_size) > kMaxPlanBytes)
    return make_error(std::string(kPlanFileInImages) + " in CRIU's images directory is not a regular file of at most " +
                      std::to_string(kMaxPlanBytes) + " bytes; the restored /dev is left as it is");
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t have = 0;
  while (have < text.size()) {
    const ssize_t n = ::read(fd.get(), text.data() + have, text.size() - have);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(std::string("cannot read ") + kPlanFileInImages + ": " + errno_text(errno), errno);
    if (n == 0) return make_error(std::string(kPlanFileInImages) + " got shorter while it was read", EIO);
    have += static_cast<std::size_t>(n);
  }
  GPUCKPT_TRY(const auto json, parse_json(text, kPlanFileInImages));
  GPUCKPT_TRY(auto plan, restore_plan_from_json(json, kPlanFileInImages));
  return std::optional<RestorePlan>(std::move(plan));
}

Result<DevChanges> reconcile_restored_dev(const std::string& root, const std::string& host_dev,
                                          const std::vector<PlannedNode>& planned) {
  if (planned.empty()) return DevChanges{};
  Fd root_fd(::open(root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (root_fd.get() < 0) return make_error("cannot open " + root + ": " + errno_text(errno), errno);
  // O_NOFOLLOW: the container's /dev must be its own directory, not a link to somewhere of the host's.
  Fd dev_fd(::openat(root_fd.get(), "dev", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (dev_fd.get() < 0)
    return make_error(root + "/dev is not a directory gpuckpt may use (" + errno_text(errno) + ")", errno);
  Fd host_fd(::open(host_dev.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (host_fd.get() < 0) return make_error("cannot open " + host_dev + ": " + errno_text(errno), errno);
  GPUCKPT_TRY_VOID(check_own_dev_tmpfs(dev_fd.get(), host_fd.get()), root + "/dev");
  GPUCKPT_TRY(auto changed, reconcile_dev(dev_fd.get(), planned, kMaxDevEntries), root + "/dev");
  return changed;
}

}  // namespace gpuckpt::plugin
