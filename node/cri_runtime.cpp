#include "node/cri_runtime.h"

#include "node/containerd_image_import.h"
#include "node/grpc_unix.h"
#include "archive/checkpoint_image.h"

namespace gpuckpt::node {

namespace fs = std::filesystem;

namespace {

class CriRuntime final : public ContainerRuntime {
 public:
  explicit CriRuntime(CriOptions options) : cri_(std::move(options)) {}

  std::string name() const override { return "cri"; }

  Result<RuntimeContainer> find(const ContainerRef& ref) override {
    if (!is_valid_container_name(ref.container))
      return make_error("container name '" + ref.container + "' is not valid (letters, digits, '_', '.', '-')");
    std::map<std::string, std::string> labels;
    if (!ref.pod.empty()) labels["io.kubernetes.pod.name"] = ref.pod;
    if (!ref.namespace_name.empty()) labels["io.kubernetes.pod.namespace"] = ref.namespace_name;
    GPUCKPT_TRY(auto listed, cri_.list_containers(labels));
    std::vector<CriContainer> named, running;
    for (auto& c : listed)
      if (c.name == ref.container) (c.state == "running" ? running : named).push_back(c);
    const auto& pick = running.empty() ? named : running;
    if (pick.empty())
      return make_error("no container '" + ref.container + "'" + (ref.pod.empty() ? "" : " in pod " + ref.pod) +
                        (ref.namespace_name.empty() ? "" : " (namespace " + ref.namespace_name + ")") +
                        " in the CRI runtime at " + cri_.options().endpoint, ENOENT);
    if (pick.size() > 1)
      return make_error(std::to_string(pick.size()) + " containers are named '" + ref.container +
                        "'; give 'pod' and 'namespace' to choose one", EBUSY);
    return to_runtime(pick.front());
  }

  Result<std::vector<RuntimeContainer>> list() override {
    GPUCKPT_TRY(auto listed, cri_.list_containers());
    std::vector<RuntimeContainer> out;
    for (const auto& c : listed)
      if (c.state == "running") {
        GPUCKPT_TRY(auto rc, to_runtime(c));
        out.push_back(std::move(rc));
      }
    return out;
  }

  Result<void> checkpoint(const RuntimeContainer& container, const fs::path& archive, JobDeadline deadline) override {
    const auto timeout = time_left(deadline, cri_.options().checkpoint_timeout);
    if (timeout.count() == 0)
      return make_error("CRI CheckpointContainer " + container.id + " not called: the job has no time left", ETIMEDOUT);
    return cri_.checkpoint_container(container.id, archive.string(), timeout);
  }

  // containerd serves its own API on the socket it serves CRI on: the image goes into its k8s.io namespace, the one
  // CRI's containers come from. CRI-O keeps images in containers/storage, which offers no API to load into.
  Result<std::string> load_image(const fs::path& layout, const std::string& tag, JobDeadline deadline) override {
    GPUCKPT_TRY(auto version, cri_.version());
    if (version.runtime_name != "containerd")
      return make_error("the CRI runtime at " + cri_.options().endpoint + " is " + version.describe() +
                        ", whose image store (containers/storage) the agent cannot load into: copy the layout in on "
                        "the node (skopeo copy oci:" + layout.string() + ":" + tag +
                        " containers-storage:" + checkpoint_image_name(tag) + ")", ENOTSUP);
    ContainerdOptions containerd;
    containerd.address = unix_socket_path(cri_.options().endpoint);
    containerd.namespace_name = "k8s.io";
    containerd.call_timeout = cri_.options().call_timeout;
    containerd.checkpoint_timeout = cri_.options().checkpoint_timeout;
    const std::string name = checkpoint_image_name(tag);
    GPUCKPT_TRY_VOID(import_checkpoint_image(containerd, layout, name, deadline));
    return name;
  }

  Result<RuntimeContainer> restore(const fs::path& archive, const std::string&, JobDeadline) override {
    return make_error("the CRI runtime cannot restore " + archive.string() +
                      " by itself: CRI restores a checkpoint when kubelet creates a pod whose container image is a "
                      "checkpoint image (docs/kubernetes.md); use runtime.kind containerd or podman for local restores",
                      ENOTSUP);
  }

 private:
  Result<RuntimeContainer> to_runtime(const CriContainer& c) {
    RuntimeContainer rc{c.id, c.name, c.state, 0};
    if (auto uid = c.labels.find("io.kubernetes.pod.uid"); uid != c.labels.end()) rc.pod_uid = uid->second;
    if (c.state == "running") {
      GPUCKPT_TRY(rc.pid, cri_.container_pid(c.id));
    }
    return rc;
  }

  CriClient cri_;
};

}  // namespace

std::unique_ptr<ContainerRuntime> make_cri_runtime(CriOptions options) {
  return std::make_unique<CriRuntime>(std::move(options));
}

}  // namespace gpuckpt::node
