// A CRI v1 client (gRPC over the runtime's unix socket; CRI-O, containerd): what the agent needs to find and
// checkpoint containers, plus the pod calls a CRI restore (and the tests) use. Every call has a deadline: short
// ones for queries, a long configurable one for CheckpointContainer (GPU memory is part of the checkpoint).
#pragma once

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "k8s.io/cri-api/pkg/apis/runtime/v1/api.grpc.pb.h"

namespace gpuckpt::node {

struct CriOptions {
  std::string endpoint = "unix:///run/containerd/containerd.sock";
  std::chrono::seconds call_timeout{30};          // Version, List, Status, pod calls
  std::chrono::seconds checkpoint_timeout{600};   // CheckpointContainer
};

struct CriVersion {
  std::string runtime_name;      // "containerd", "cri-o"
  std::string runtime_version;   // "1.7.24", "v2.1.0", "1.31.0"
  std::string api_version;       // "v1"
  std::string describe() const { return runtime_name + " " + runtime_version; }
};

struct CriContainer {
  std::string id;
  std::string pod_sandbox_id;
  std::string name;                          // metadata.name
  std::string state;                         // "running", "exited", "created", "unknown"
  std::map<std::string, std::string> labels; // io.kubernetes.pod.name, io.kubernetes.pod.namespace, ...
};

class CriClient {
 public:
  explicit CriClient(CriOptions options);
  const CriOptions& options() const { return options_; }

  Result<CriVersion> version();
  // Containers whose labels include every `labels` entry (all states).
  Result<std::vector<CriContainer>> list_containers(const std::map<std::string, std::string>& labels = {});
  // The container's init pid, from the runtime's verbose status (0 when the runtime does not say).
  Result<int> container_pid(const std::string& id);
  // Writes the checkpoint archive to `location` (a path on the node). A runtime without the call (containerd
  // before 2.0 answers UNIMPLEMENTED) gets an error naming its version and what to do instead. `timeout`: at most
  // checkpoint_timeout (less where the agent's job has less left).
  Result<void> checkpoint_container(const std::string& id, const std::string& location,
                                    std::chrono::milliseconds timeout);

  Result<std::string> run_pod_sandbox(const runtime::v1::PodSandboxConfig& config);
  Result<std::string> create_container(const std::string& pod_id, const runtime::v1::ContainerConfig& config,
                                       const runtime::v1::PodSandboxConfig& pod_config);
  Result<void> start_container(const std::string& id);
  Result<void> stop_container(const std::string& id, std::chrono::seconds grace);
  Result<void> remove_container(const std::string& id);
  Result<void> stop_pod_sandbox(const std::string& id);
  Result<void> remove_pod_sandbox(const std::string& id);

 private:
  Error failure(const grpc::Status& status, const std::string& what, std::chrono::milliseconds timeout) const;

  CriOptions options_;
  std::unique_ptr<runtime::v1::RuntimeService::Stub> stub_;
};

}  // namespace gpuckpt::node
