#include "node/cri_client.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "node/grpc_unix.h"
#include "base/json_reader.h"
#include "base/log.h"

namespace gpuckpt::node {

namespace v1 = runtime::v1;
using Stub = v1::RuntimeService::Stub;
using std::chrono::milliseconds;

namespace {

std::string state_name(v1::ContainerState state) {
  switch (state) {
    case v1::CONTAINER_CREATED: return "created";
    case v1::CONTAINER_RUNNING: return "running";
    case v1::CONTAINER_EXITED: return "exited";
    default: return "unknown";
  }
}

}  // namespace

CriClient::CriClient(CriOptions options)
    : options_(std::move(options)), stub_(v1::RuntimeService::NewStub(unix_socket_channel(options_.endpoint))) {}

Error CriClient::failure(const grpc::Status& status, const std::string& what, milliseconds timeout) const {
  return grpc_error(status, "CRI " + what, options_.endpoint, timeout,
                    timeout == milliseconds(options_.checkpoint_timeout) ? "checkpoints.runtime_timeout_seconds"
                                                                          : "runtime.cri.call_timeout_seconds");
}

Result<CriVersion> CriClient::version() {
  v1::VersionRequest request;
  request.set_version("v1");
  v1::VersionResponse response;
  const auto status = call_unary(*stub_, &Stub::Version, request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "Version", options_.call_timeout);
  return CriVersion{response.runtime_name(), response.runtime_version(), response.runtime_api_version()};
}

Result<std::vector<CriContainer>> CriClient::list_containers(const std::map<std::string, std::string>& labels) {
  v1::ListContainersRequest request;
  for (const auto& [key, value] : labels) (*request.mutable_filter()->mutable_label_selector())[key] = value;
  v1::ListContainersResponse response;
  const auto status = call_unary(*stub_, &Stub::ListContainers, request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "ListContainers", options_.call_timeout);
  std::vector<CriContainer> out;
  for (const auto& c : response.containers()) {
    CriContainer container;
    container.id = c.id();
    container.pod_sandbox_id = c.pod_sandbox_id();
    container.name = c.metadata().name();
    container.state = state_name(c.state());
    container.labels.insert(c.labels().begin(), c.labels().end());
    out.push_back(std::move(container));
  }
  return out;
}

Result<int> CriClient::container_pid(const std::string& id) {
  v1::ContainerStatusRequest request;
  request.set_container_id(id);
  request.set_verbose(true);
  v1::ContainerStatusResponse response;
  const auto status = call_unary(*stub_, &Stub::ContainerStatus, request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "ContainerStatus " + id, options_.call_timeout);
  // containerd and CRI-O both put {"pid": N, ...} under "info" in verbose mode.
  const auto it = response.info().find("info");
  if (it == response.info().end()) return 0;
  const auto parsed = parse_json(it->second, "CRI verbose status of " + id);
  if (!parsed) return 0;
  const auto& info = parsed.value();
  if (!info.is_object() || !info.contains("pid") || !info["pid"].is_number_integer()) return 0;
  return info["pid"].get<int>();
}

Result<void> CriClient::checkpoint_container(const std::string& id, const std::string& location,
                                             milliseconds timeout) {
  grpc::ClientContext context;
  // The runtime gets the same limit in the request (whole seconds, at least 1), and the transport a little more,
  // so the runtime's own timeout message (which says which phase it was in) arrives before ours.
  const auto runtime_seconds = std::max<long long>(1, std::chrono::ceil<std::chrono::seconds>(timeout).count());
  set_deadline(context, timeout + std::chrono::seconds(2));
  v1::CheckpointContainerRequest request;
  request.set_container_id(id);
  request.set_location(location);
  request.set_timeout(runtime_seconds);
  v1::CheckpointContainerResponse response;
  log::info("CRI CheckpointContainer " + id + " -> " + location + " (timeout " + std::to_string(runtime_seconds) +
            " s)");
  const auto status = stub_->CheckpointContainer(&context, request, &response);
  if (status.ok()) return {};
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
    auto runtime = version();
    const std::string who = runtime ? runtime->describe() : "the runtime";
    const std::string& v = runtime ? runtime->runtime_version : std::string();
    const bool old_containerd = runtime && runtime->runtime_name == "containerd" &&
                                (v.rfind("1.", 0) == 0 || v.rfind("v1.", 0) == 0);
    return make_error("the CRI runtime at " + unix_socket_path(options_.endpoint) + " (" + who +
                          ") does not implement CheckpointContainer (" + status.error_message() + "). " +
                          (old_containerd ? "containerd implements it from 2.0: upgrade containerd, or set "
                                            "runtime.kind: containerd so the agent checkpoints through containerd's "
                                            "own task API (docs/kubernetes.md)."
                                          : "Use a runtime that implements it (containerd >= 2.0, CRI-O >= 1.25 "
                                            "with enable_criu_support), or runtime.kind: containerd on containerd "
                                            "1.7 (docs/kubernetes.md)."),
                      ENOTSUP);
  }
  return failure(status, "CheckpointContainer " + id, milliseconds(options_.checkpoint_timeout));
}

Result<std::string> CriClient::run_pod_sandbox(const v1::PodSandboxConfig& config) {
  v1::RunPodSandboxRequest request;
  *request.mutable_config() = config;
  v1::RunPodSandboxResponse response;
  const auto status = call_unary(*stub_, &Stub::RunPodSandbox, request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "RunPodSandbox " + config.metadata().name(), options_.call_timeout);
  return response.pod_sandbox_id();
}

Result<std::string> CriClient::create_container(const std::string& pod_id, const v1::ContainerConfig& config,
                                                 const v1::PodSandboxConfig& pod_config) {
  v1::CreateContainerRequest request;
  request.set_pod_sandbox_id(pod_id);
  *request.mutable_config() = config;
  *request.mutable_sandbox_config() = pod_config;
  v1::CreateContainerResponse response;
  const auto status = call_unary(*stub_, &Stub::CreateContainer, request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "CreateContainer " + config.metadata().name(), options_.call_timeout);
  return response.container_id();
}

Result<void> CriClient::start_container(const std::string& id) {
  v1::StartContainerRequest request;
  request.set_container_id(id);
  v1::StartContainerResponse response;
  const auto status = call_unary(*stub_, &Stub::StartContainer, request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "StartContainer " + id, options_.call_timeout);
  return {};
}

Result<void> CriClient::stop_container(const std::string& id, std::chrono::seconds grace) {
  v1::StopContainerRequest request;
  request.set_container_id(id);
  request.set_timeout(grace.count());
  v1::StopContainerResponse response;
  const auto status = call_unary(*stub_, &Stub::StopContainer, request, response, options_.call_timeout + grace);
  if (!status.ok()) return failure(status, "StopContainer " + id, options_.call_timeout);
  return {};
}

Result<void> CriClient::remove_container(const std::string& id) {
  v1::RemoveContainerRequest request;
  request.set_container_id(id);
  v1::RemoveContainerResponse response;
  const auto status = call_unary(*stub_, &Stub::RemoveContainer, request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "RemoveContainer " + id, options_.call_timeout);
  return {};
}

Result<void> CriClient::stop_pod_sandbox(const std::string& id) {
  v1::StopPodSandboxRequest request;
  request.set_pod_sandbox_id(id);
  v1::StopPodSandboxResponse response;
  const auto status = call_unary(*stub_, &Stub::StopPodSandbox, request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "StopPodSandbox " + id, options_.call_timeout);
  return {};
}

Result<void> CriClient::remove_pod_sandbox(const std::string& id) {
  v1::RemovePodSandboxRequest request;
  request.set_pod_sandbox_id(id);
  v1::RemovePodSandboxResponse response;
  const auto status = call_unary(*stub_, &Stub::RemovePodSandbox, request, response, options_.call_timeout);
  if (!status.ok()) return failure(status, "RemovePodSandbox " + id, options_.call_timeout);
  return {};
}

}  // namespace gpuckpt::node
