// The device nodes a CDI device stands for, read from the node's CDI spec files (Container Device Interface,
// github.com/cncf-tags/container-device-interface SPEC.md). A DRA driver answers the kubelet with fully qualified
// CDI device names ("vendor/class=name"), the kubelet hands them to the runtime and reports them in PodResources;
// the runtime injects the containerEdits of the spec that defines the name. So the GPUs a container got through a
// ResourceClaim are the GPU nodes among its CDI devices' deviceNodes, whatever the driver calls its devices.
//
// How specs are found, as CDI's own registry does: every *.json, *.yaml and *.yml file directly in each directory
// (not below), directories in rising priority (a name defined in a later directory wins: /etc/cdi, then
// /var/run/cdi); one name defined twice in one directory is a conflict the runtime refuses too, and so is it here.
// Only a device's own containerEdits count: spec-wide edits (/dev/nvidiactl, /dev/nvidia-uvm, ...) name no GPU.
//
// Bounds: at most kCdiMaxSpecFiles files per directory, kCdiMaxSpecBytes per file; a symbolic link is not followed
// (the runtime's registry is root's, a link there someone else's), other non-regular files are skipped.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "gpu/device_nodes.h"

namespace gpuckpt {

inline constexpr int kCdiMaxSpecFiles = 1024;
inline constexpr std::size_t kCdiMaxSpecBytes = 4u << 20;
inline constexpr std::size_t kCdiMaxDeviceNodes = 256;   // per device

// True for a well-formed fully qualified name: vendor "/" class "=" name (SPEC.md: vendor a domain-like
// [A-Za-z0-9][A-Za-z0-9_.-]*, class [A-Za-z0-9][A-Za-z0-9_-]*, name [A-Za-z0-9][A-Za-z0-9_.:-]*).
bool is_qualified_cdi_name(std::string_view name);

struct CdiSpecDirs {
  std::vector<std::filesystem::path> dirs;   // rising priority; absent directories are skipped
};

// The device nodes of CDI device `qualified_name`: the container path each deviceNode gives (path), with major
// and minor from the spec where it states them, else from `lookup` of its hostPath (or path) when that succeeds,
// else 0:0 (matched to a GPU by path alone). Error: a malformed name; no spec defines it (names the directories and
// says the driver may not have prepared the claim yet); a conflict; a spec file that cannot be read or parsed, over
// the bounds, or whose device gives a relative or non-/dev path. Each message names the file or directory.
Result<std::vector<ContainerGpuDevice>> cdi_device_nodes(const CdiSpecDirs& dirs, std::string_view qualified_name,
                                                         const DeviceNumberLookup& lookup);

}  // namespace gpuckpt
