// The GPU device nodes of a restored container's /dev, for every process in it. CRIU restores a container's /dev
// tmpfs from the checkpoint's image (tmpfs-dev-<id>.tar.gz.img), which holds the source node's GPU nodes: restored
// onto other GPUs (a pod given GPU 1 where it ran on GPU 0), the runtime's spec and device cgroup follow the restore
// plan, but every process would see /dev/nvidia0, which it may not open, and no /dev/nvidia1. The CUDA backend
// makes the nodes the driver's restore opens (cuda/device_nodes.h), for CUDA processes only. This makes the
// restored /dev hold what the plan says, once every task is restored and before any runs (the first
// RESUME_DEVICES_LATE), whatever the processes are.
//
// Why the restored /dev and not CRIU's image of it: the plugin's init(RESTORE) runs before CRIU's setup-namespaces
// notification, at which runc runs the createRuntime hook that places the plan (criu/cr-restore.c: cr_plugin_init,
// then restore_root_task's run_scripts(ACT_SETUP_NS), then the root task restores the mounts), so the plan is not
// there yet; and the plugin loads into any distribution's CRIU linking nothing but glibc (cmake/HostBinary.cmake),
// which rules out libarchive (Debian's libarchive.a needs nettle, lzma, bz2 and libxml2).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "restore/restore_plan.h"
#include "base/result.h"

namespace gpuckpt::plugin {

// A GPU node the plan places: where the checkpoint's container had it and where the restored container gets it
// (names under /dev: "nvidia0", "dri/renderD128"), with the target's numbers.
struct PlannedNode {
  std::string source;
  std::string target;
  std::uint32_t major = 0;
  std::uint32_t minor = 0;
};

// What the restored /dev holds at one name.
struct FoundNode {
  bool char_device = false;   // false: something else (a file, a link, a directory)
  std::uint32_t major = 0;
  std::uint32_t minor = 0;
  std::uint32_t mode = 0;     // permission bits
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
};

struct NodeToMake {
  std::string name;
  std::uint32_t major = 0;
  std::uint32_t minor = 0;
  std::uint32_t mode = 0666;
  std::uint32_t uid = 0;
  std::uint32_t gid = 0;
};

struct DevChanges {
  std::vector<std::string> remove;   // names under /dev no node of the plan takes
  std::vector<NodeToMake> make;      // made, or put in place of a node of the same name with other numbers
  bool empty() const { return remove.empty() && make.empty(); }
};

// A per-GPU NVIDIA node's name, nvidia<N> (not nvidiactl, nvidia-uvm, nvidia-uvm-tools, nvidia-modeset).
bool is_nvidia_gpu_node(const std::string& name);

// Pure. `found`: what /dev holds at every name of `planned` and at every nvidia<N> (absent names are not in it).
// The answer gives /dev every planned target at its name with its numbers, with the mode and owner of the node
// the checkpoint had at the source name (else of the node at the target name, else 0666 root); and no node at a
// source name no planned node takes, nor, when the plan places NVIDIA nodes, any nvidia<N> it does not place (a GPU
// the restored container was not given). Every other name is left alone. Nothing to change: empty (a plan that
// moves nothing, or a /dev that is right already, e.g. an archive whose image the agent rewrote). A planned name
// holding something other than a character device, or two planned nodes at one name, is an error naming it.
Result<DevChanges> plan_dev_changes(const std::map<std::string, FoundNode>& found,
                                    const std::vector<PlannedNode>& planned);

// The nodes `plan` places: numbers from the plan (target_numbers), else `lookup` of the target's host path.
Result<std::vector<PlannedNode>> planned_nodes(const RestorePlan& plan, const DeviceNumberLookup& lookup);

// `dev_fd` (a /dev directory) is a tmpfs and not the file system of `host_dev_fd` (the host's own /dev): the
// restored container's own /dev, which this may change. Anything else is an error saying what it is.
Result<void> check_own_dev_tmpfs(int dev_fd, int host_dev_fd);

// Looks at `dev_fd`'s names (never through a symlink; at most `max_entries` entries of it listed), plans
// (plan_dev_changes) and applies: new nodes made under temporary names (mode and owner set), then the names to
// remove unlinked and the new nodes renamed into place. Returns what it changed; an error names the node.
Result<DevChanges> reconcile_dev(int dev_fd, const std::vector<PlannedNode>& planned, std::size_t max_entries);

// The plan the OCI hook placed in CRIU's images directory (kPlanFileInImages; a regular file of at most 1 MiB, not
// followed through a symlink); std::nullopt when there is none (restored where it was checkpointed, or not by gpuckpt).
Result<std::optional<RestorePlan>> read_placed_plan(int image_dir_fd);

// The whole step for a restored process: `root` is its root ("/proc/PID/root"); its /dev must be its own tmpfs
// (check_own_dev_tmpfs against `host_dev`, "/dev").
Result<DevChanges> reconcile_restored_dev(const std::string& root, const std::string& host_dev,
                                          const std::vector<PlannedNode>& planned);

}  // namespace gpuckpt::plugin
