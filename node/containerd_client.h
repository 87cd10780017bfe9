// containerd's own gRPC API (containers, tasks, snapshots, version): the calls that checkpoint a task to a
// directory of CRIU images and restore one from it, which CRI cannot do before containerd 2.0/2.1. Every call
// carries the namespace (CRI's containers live in "k8s.io") and a deadline.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/container_runtime.h"
#include "base/result.h"

namespace grpc {
class Status;
}

namespace gpuckpt::node {

struct ContainerdOptions {
  std::string address = "/run/containerd/containerd.sock";
  std::string namespace_name = "k8s.io";
  std::chrono::seconds call_timeout{30};
  std::chrono::seconds checkpoint_timeout{600};   // task checkpoint and restore (CRIU with GPU memory)
};

struct ContainerdMount {
  std::string type;
  std::string source;
  std::vector<std::string> options;
};

struct ContainerdContainer {
  std::string id;
  std::map<std::string, std::string> labels;
  std::string image;
  std::string runtime = "io.containerd.runc.v2";
  nlohmann::json spec;          // the OCI runtime spec
  std::string snapshotter;
  std::string snapshot_key;
  std::string sandbox;
  std::string created;          // RFC 3339, UTC
};

struct ContainerdTask {
  std::uint32_t pid = 0;
  std::string status;   // "created", "running", "stopped", "paused", "unknown"
};

class ContainerdClient {
 public:
  explicit ContainerdClient(ContainerdOptions options);
  ~ContainerdClient();
  ContainerdClient(const ContainerdClient&) = delete;
  ContainerdClient& operator=(const ContainerdClient&) = delete;
  const ContainerdOptions& options() const { return options_; }

  Result<std::string> version();
  Result<ContainerdContainer> container(const std::string& id);
  Result<std::vector<ContainerdContainer>> containers();
  // ENOENT when the container has no task.
  Result<ContainerdTask> task(const std::string& id);
  // runc checkpoint through the shim: CRIU images written to `image_dir` (not into the content store);
  // `leave_running` keeps the task running, as kubelet's checkpoint does. Ends by `deadline` (the agent job's) if
  // that comes before checkpoint_timeout, as do restore_task and start_task.
  Result<void> checkpoint_task(const std::string& id, const std::string& image_dir, const std::string& work_dir,
                               bool leave_running, JobDeadline deadline);
  Result<std::string> snapshot_parent(const std::string& snapshotter, const std::string& key);
  Result<std::vector<ContainerdMount>> snapshot_mounts(const std::string& snapshotter, const std::string& key);
  Result<std::vector<ContainerdMount>> prepare_snapshot(const std::string& snapshotter, const std::string& key,
                                                        const std::string& parent);
  Result<void> remove_snapshot(const std::string& snapshotter, const std::string& key);
  Result<void> create_container(const ContainerdContainer& container);
  Result<void> delete_container(const std::string& id);
  // A task restored from CRIU images in `image_dir` (runc restore); stdout/stderr go to `log_path`.
  Result<std::uint32_t> restore_task(const std::string& id, const std::vector<ContainerdMount>& rootfs,
                                     const std::string& image_dir, const std::string& work_dir,
                                     const std::string& log_path, JobDeadline deadline);
  Result<void> start_task(const std::string& id, JobDeadline deadline);
  Result<void> kill_task(const std::string& id, int signal);
  Result<void> delete_task(const std::string& id);

 private:
  struct Stubs;
  Error failure(const grpc::Status& status, const std::string& what, std::chrono::milliseconds timeout) const;
  ContainerdOptions options_;
  std::unique_ptr<Stubs> stubs_;
};

}  // namespace gpuckpt::node
