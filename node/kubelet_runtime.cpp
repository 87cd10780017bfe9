#include "node/kubelet_runtime.h"

#include <fstream>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "node/kube_client.h"

namespace gpuckpt::node {

namespace fs = std::filesystem;

namespace {

class KubeletRuntime final : public ContainerRuntime {
 public:
  explicit KubeletRuntime(KubeletRuntimeOptions options) : options_(std::move(options)) {}

  std::string name() const override { return "kubelet"; }

  Result<RuntimeContainer> find(const ContainerRef& ref) override {
    if (ref.namespace_name.empty() || ref.pod.empty())
      return make_error("the kubelet runtime needs 'namespace' and 'pod' as well as 'container'");
    for (const auto* part : {&ref.namespace_name, &ref.pod, &ref.container})
      if (!is_valid_container_name(*part)) return make_error("'" + *part + "' is not a valid Kubernetes name");
    GPUCKPT_TRY(auto pods, get_pods());
    for (const auto& pod : pods.value("items", nlohmann::json::array())) {
      const auto meta = pod.value("metadata", nlohmann::json::object());
      if (meta.value("namespace", "") != ref.namespace_name || meta.value("name", "") != ref.pod) continue;
      for (const auto& status : pod.value("status", nlohmann::json::object()).value("containerStatuses", nlohmann::json::array())) {
        if (status.value("name", "") != ref.container) continue;
        return from_status(status, ref.namespace_name + "/" + ref.pod + "/" + ref.container, meta.value("uid", ""));
      }
    }
    return make_error("kubelet knows no container " + ref.namespace_name + "/" + ref.pod + "/" + ref.container, ENOENT);
  }

  Result<std::vector<RuntimeContainer>> list() override {
    GPUCKPT_TRY(auto pods, get_pods());
    std::vector<RuntimeContainer> out;
    for (const auto& pod : pods.value("items", nlohmann::json::array())) {
      const auto meta = pod.value("metadata", nlohmann::json::object());
      const std::string prefix = meta.value("namespace", "") + "/" + meta.value("name", "") + "/";
      for (const auto& status : pod.value("status", nlohmann::json::object()).value("containerStatuses", nlohmann::json::array()))
        out.push_back(from_status(status, prefix + status.value("name", ""), meta.value("uid", "")));
    }
    return out;
  }

  Result<void> checkpoint(const RuntimeContainer& container, const fs::path& archive, JobDeadline deadline) override {
    // Containers this runtime finds are named namespace/pod/container.
    const auto first = container.name.find('/');
    const auto second = container.name.find('/', first + 1);
    if (first == std::string::npos || second == std::string::npos)
      return make_error("kubelet checkpoint needs namespace/pod/container, got " + container.name);
    const auto timeout = std::chrono::ceil<std::chrono::seconds>(time_left(deadline, options_.timeout));
    if (timeout.count() == 0)
      return make_error("kubelet checkpoint of " + container.name + " not asked: the job has no time left", ETIMEDOUT);
    const KubeClient client = make_client(timeout);
    const std::string path = "/checkpoint/" + container.name + "?timeout=" + std::to_string(timeout.count());
    log::info("POST " + client.url_of(path));
    GPUCKPT_TRY(auto result, client.post(path), "kubelet checkpoint");
    if (result.status != 200)
      return make_error("kubelet checkpoint returned " + std::to_string(result.status) + ": " +
                        log::escaped(result.body, 300) + " (is the ContainerCheckpoint feature on, and may the "
                        "service account create nodes/checkpoint?)", EIO);
    const auto body = nlohmann::json::parse(result.body, nullptr, false);
    if (body.is_discarded() || !body.is_object() || !body.contains("items") || !body["items"].is_array() ||
        body["items"].empty() || !body["items"][0].is_string())
      return make_error("kubelet checkpoint answered without an archive path: " + log::escaped(result.body, 300), EIO);
    // kubelet reports its host path; the agent sees kubelet's directory at checkpoint_dir.
    const fs::path written = options_.checkpoint_dir / fs::path(body["items"][0].get<std::string>()).filename();
    // Copied through `archive` (the agent's pipe: opened for writing, never replaced).
    std::ifstream in(written, std::ios::binary);
    std::ofstream out(archive, std::ios::binary);
    if (!in || !out || !(out << in.rdbuf()) || !out.flush())
      return make_error("cannot copy kubelet's archive " + written.string() + " to " + archive.string(), EIO);
    return {};
  }

  Result<RuntimeContainer> restore(const fs::path& archive, const std::string&, JobDeadline) override {
    return make_error("kubelet has no restore call: restore " + archive.string() +
                      " by creating a pod whose container image is the archive (CRI-O), see docs/node-flow.md",
                      ENOTSUP);
  }

 private:
  KubeClient make_client(std::chrono::seconds read_timeout) const {
    KubeEndpoint endpoint;
    endpoint.url = options_.kubelet.url;
    endpoint.token_file = options_.kubelet.token_file;
    endpoint.ca_file = options_.kubelet.ca_file;
    endpoint.verify_tls = options_.verify_tls;
    endpoint.name = "the kubelet";
    return KubeClient(endpoint, std::chrono::seconds(10), read_timeout);
  }

  Result<nlohmann::json> get_pods() const {
    auto result = make_client(options_.timeout).get("/pods", kMaxKubeListBytes);
    if (!result) return make_error("kubelet GET /pods: " + result.error().message + " (runtime.kubelet.token_file, "
                                   "runtime.kubelet.url)", result.error().errno_value);
    if (result->status != 200)
      return make_error("kubelet GET /pods returned " + std::to_string(result->status), EIO);
    auto json = nlohmann::json::parse(result->body, nullptr, false);
    if (json.is_discarded() || !json.is_object()) return make_error("kubelet GET /pods: not JSON", EIO);
    return json;
  }

  static RuntimeContainer from_status(const nlohmann::json& status, std::string name, std::string pod_uid) {
    RuntimeContainer rc;
    rc.pod_uid = std::move(pod_uid);
    std::string id = status.value("containerID", "");
    if (auto pos = id.find("://"); pos != std::string::npos) id = id.substr(pos + 3);
    rc.id = id;
    rc.name = std::move(name);
    const auto state = status.value("state", nlohmann::json::object());
    rc.state = state.contains("running") ? "running" : state.contains("terminated") ? "exited" : "waiting";
    return rc;
  }

  KubeletRuntimeOptions options_;
};

}  // namespace

std::unique_ptr<ContainerRuntime> make_kubelet_runtime(KubeletRuntimeOptions options) {
  return std::make_unique<KubeletRuntime>(std::move(options));
}

}  // namespace gpuckpt::node
