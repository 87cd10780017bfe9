// Where CRIU reads a restore's images, as the OCI hook sees it at createRuntime: the one place in gpuckpt that
// knows each runtime's layout. The hook puts the restore plan there for the CRIU plugin.
//
// runc and crun run createRuntime hooks as their own children, in a restore at CRIU's setup-namespaces
// notification, and every engine tells them the images directory on their command line (`restore --image-path
// DIR`, or `--image-path=DIR`):
//   podman      <bundle>/checkpoint
//   containerd  <root>/io.containerd.grpc.v1.cri/containers/<id>/ctrd-restore/checkpoint (CRI restore, 2.x)
//   CRI-O       <container dir>/checkpoint, through conmon's --restore (not under the bundle, which is on tmpfs)
// So the hook reads its parent's command line (/proc/<ppid>/cmdline, under the host root) and needs no layout at
// all. Where that cannot be read (no runtime pid, another runtime), podman's <bundle>/checkpoint is the fallback.
// Whatever names it, the directory must be a real directory (not a symlink) owned by the hook's own user (root
// on a node) and hold CRIU's inventory.img: anything else is refused, not written into.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/host_root.h"
#include "base/result.h"

namespace gpuckpt {

struct CriuImagesDir {
  std::filesystem::path path;   // the real path to write to (under the host root)
  std::string found_by;         // how, for the log: "runc restore --image-path", "<bundle>/checkpoint (podman)"
};

// What a runc/crun command line asks for: its verb ("restore", "create", ...; empty when none was found) and,
// for a restore, the --image-path it names (empty when none).
struct RuntimeCommand {
  std::string program;
  std::string verb;
  std::string image_path;
};
RuntimeCommand parse_runtime_command(const std::vector<std::string>& argv);

// The images directory of the restore that runs this hook: std::nullopt when the runtime `runtime_pid` is not
// restoring (its verb is create or run), or, where its command line says nothing (runtime_pid 0, unreadable, not
// a runtime's), when <bundle>/checkpoint does not exist. An error names the directory and why it is refused.
Result<std::optional<CriuImagesDir>> find_criu_images_dir(const HostRoot& host, int runtime_pid,
                                                          const std::filesystem::path& bundle);

}  // namespace gpuckpt
