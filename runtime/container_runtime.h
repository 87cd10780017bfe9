// The container runtime behind checkpoint and restore, as an interface: podman locally (tests, demo, single
// nodes), a child process per call with a time limit and bounded output; the agent's CRI, containerd and
// kubelet adapters (agent/) implement the same interface (docs/node-flow.md).
#pragma once

#include <chrono>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "criu/criu_stats.h"
#include "base/result.h"

namespace gpuckpt {

struct CommandResult {
  int exit_code = -1;          // -1: killed (timeout) or failed to start
  bool timed_out = false;
  std::string out;
  std::string err;
};

// argv[0] is looked up in PATH. Output beyond max_output bytes per stream is dropped.
Result<CommandResult> run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                                  std::size_t max_output = 1 << 20);

// When the agent's job that makes a runtime call must be over (its limits.job_timeout_seconds): every call of
// ContainerRuntime below ends by then, its own time limit cut short (a child process is killed with its process
// group, a gRPC call cancelled), and one that has no time left is not made (ETIMEDOUT). kNoDeadline: no job's.
using JobDeadline = std::chrono::steady_clock::time_point;
inline constexpr JobDeadline kNoDeadline = JobDeadline::max();
// The time a call may take: `limit`, or less where `deadline` comes first; zero once it has passed.
std::chrono::milliseconds time_left(JobDeadline deadline, std::chrono::milliseconds limit);

// Kubernetes-style address of a container; `pod`/`namespace` may be empty for a plain podman container.
struct ContainerRef {
  std::string namespace_name;
  std::string pod;
  std::string container;
};

struct RuntimeContainer {
  std::string id;
  std::string name;
  std::string state;    // "running", "exited", ...
  int pid = 0;
  // The Kubernetes pod's uid where the runtime knows it (CRI labels, kubelet), else empty. "= {}": a braced list of
  // the first four members stays complete for -Wmissing-field-initializers.
  std::string pod_uid = {};
  // What a restore that made it reported of its time (podman --print-stats); none where the runtime says nothing.
  std::optional<PodmanRestoreStats> restore_stats = {};
};

class ContainerRuntime {
 public:
  virtual ~ContainerRuntime() = default;
  virtual std::string name() const = 0;
  virtual Result<RuntimeContainer> find(const ContainerRef& ref) = 0;
  virtual Result<std::vector<RuntimeContainer>> list() = 0;
  // Checkpoints a running container into an archive written to `archive`, opened for writing by its path and
  // never replaced: the agent passes a named pipe it reads from (archive_pipe.h) and stores what arrives.
  // Uncompressed is best: the agent compresses as it stores.
  virtual Result<void> checkpoint(const RuntimeContainer& container, const std::filesystem::path& archive,
                                  JobDeadline deadline) = 0;
  // The agent could not keep the archive of a checkpoint the runtime finished (a full disk): puts the container
  // back as it was before `checkpoint`, where the checkpoint stopped it. Returns what happened, for the job's
  // error; empty for runtimes whose checkpoint leaves the container running.
  virtual std::string put_back(const RuntimeContainer& container) {
    (void)container;
    return "";
  }
  // Restores the archive read from `archive` as a new container, named `name` when not empty. The agent passes a
  // named pipe that yields the whole (uncompressed) archive each time it is opened.
  virtual Result<RuntimeContainer> restore(const std::filesystem::path& archive, const std::string& name,
                                           JobDeadline deadline) = 0;
  // Loads a checkpoint image (OCI image layout whose reference is `tag`) into the runtime's own image store so the
  // runtime can create a container from it; returns the name it has there (checkpoint_image_name(tag)), or an
  // empty string for runtimes whose store gpuckpt does not fill.
  virtual Result<std::string> load_image(const std::filesystem::path& layout, const std::string& tag,
                                         JobDeadline deadline) {
    (void)layout;
    (void)tag;
    (void)deadline;
    return std::string();
  }
};

struct PodmanOptions {
  std::string podman = "podman";
  std::string hooks_dir;        // passed as --hooks-dir when set (the OCI hook records restored containers)
  std::chrono::seconds timeout{600};
};

std::unique_ptr<ContainerRuntime> make_podman_runtime(PodmanOptions options);

// Container names as podman/Kubernetes allow them: [a-zA-Z0-9][a-zA-Z0-9_.-]*, at most 253 bytes. Anything else
// (slashes, "..", spaces) is refused before it reaches a runtime or a path.
bool is_valid_container_name(std::string_view name);

}  // namespace gpuckpt
