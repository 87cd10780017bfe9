#include "podresources/pod_resources.h"

#include <sys/stat.h>
#include <sys/un.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <iterator>

#include "k8s.io/kubelet/pkg/apis/podresources/v1/api.grpc.pb.h"
#include "rpc/grpc_unix.h"

namespace gpuckpt {

namespace {

using Allocation = std::optional<std::vector<DeviceAllocation>>;
using Deadline = std::chrono::system_clock::time_point;

std::string pod_text(const ContainerIdentity& identity) { return identity.pod_namespace + "/" + identity.pod_name; }

const char* file_type_name(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device node";
  return "not a socket";
}

// The path must name the socket itself: gRPC would follow a link (or connect through anything the path resolves
// to), so a link in the kubelet's directory is refused before gRPC sees the path.
Result<void> check_socket(const std::string& socket) {
  const std::string setting = "set the PodResources socket to the kubelet's <root-dir>/pod-resources/kubelet.sock";
  if (socket.empty() || socket.front() != '/')
    return make_error("the kubelet's PodResources socket \"" + socket + "\" is not an absolute path; " + setting, EINVAL);
  if (socket.size() >= sizeof(sockaddr_un::sun_path))
    return make_error("the kubelet's PodResources socket " + socket + " is longer than a unix socket path may be (" +
                          std::to_string(sizeof(sockaddr_un::sun_path) - 1) + " bytes); " + setting,
                      ENAMETOOLONG);
  struct stat st {};
  if (::lstat(socket.c_str(), &st) != 0) {
    const int error = errno;
    if (error == ENOENT)
      return make_error("no kubelet PodResources socket at " + socket +
                            ": the kubelet creates it when it starts. Is the kubelet running, and is the node's "
                            "kubelet pod-resources directory mounted there (hostPath)? If the kubelet's --root-dir "
                            "is not /var/lib/kubelet, " + setting,
                        ENOENT);
    return make_error("cannot examine the kubelet's PodResources socket " + socket + ": " + std::strerror(error),
                      error);
  }
  if (S_ISLNK(st.st_mode))
    return make_error("the kubelet's PodResources socket " + socket +
                          " is a symbolic link, which gpuckpt does not follow (the kubelet creates the socket itself)" +
                          "; if the link names the kubelet's socket, set the PodResources socket to that path",
                      ELOOP);
  if (!S_ISSOCK(st.st_mode))
    return make_error("the kubelet's PodResources socket " + socket + " is " + file_type_name(st.st_mode) +
                          ", not a unix socket; " + setting,
                      ENOTSOCK);
  return {};
}

Error call_error(const grpc::Status& status, const std::string& method, const PodResourcesOptions& options) {
  const std::string what = "kubelet PodResources " + method + " on " + options.socket;
  if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED)
    return make_error(what + " failed: " + status.error_message() + " (RESOURCE_EXHAUSTED): gpuckpt reads at most " +
                          std::to_string(kPodResourcesMaxAnswerBytes >> 20) +
                          " MiB from the kubelet; is it a kubelet that answers on this socket?",
                      EMSGSIZE);
  return grpc_status_error(
      status, what,
      {"nothing answers on " + options.socket +
           ": is the kubelet running? (a stopped kubelet leaves its socket behind until it starts again)",
       "no answer within " + std::to_string(options.timeout.count()) +
           " ms; the kubelet is busy or hung: raise the PodResources timeout"});
}

Error malformed(const PodResourcesOptions& options, const std::string& method, const std::string& what) {
  return make_error("the kubelet's PodResources " + method + " answer on " + options.socket + " is malformed: " + what +
                        "; is it a kubelet that answers on this socket?",
                    EBADMSG);
}

Error too_large(const PodResourcesOptions& options, const std::string& method, const std::string& what, int limit) {
  return make_error("the kubelet's PodResources " + method + " answer on " + options.socket + " lists " + what +
                        "; gpuckpt reads at most " + std::to_string(limit),
                    EMSGSIZE);
}

// The devices DRA drivers prepared for the container's ResourceClaims, one DeviceAllocation per device (its
// claim, driver, pool/device and CDI names), after the device plugins' ones. A claim resource without a device
// name is no device (DRA's other kinds of resources) and is skipped.
Result<void> add_dynamic_resources(const ::v1::ContainerResources& container, const std::string& where,
                                   const PodResourcesOptions& options, const std::string& method,
                                   std::vector<DeviceAllocation>& allocation) {
  std::size_t count = 0;
  for (const auto& claim : container.dynamic_resources()) {
    count += static_cast<std::size_t>(std::max(claim.claim_resources_size(), 1));
    for (const auto& resource : claim.claim_resources()) count += static_cast<std::size_t>(resource.cdi_devices_size());
  }
  if (count > static_cast<std::size_t>(kPodResourcesMaxDevicesPerContainer))
    return too_large(options, method, std::to_string(count) + " DRA devices and CDI names for " + where,
                     kPodResourcesMaxDevicesPerContainer);
  for (const auto& claim : container.dynamic_resources()) {
    if (claim.claim_name().empty() || claim.claim_namespace().empty())
      return malformed(options, method, where + " has a DRA claim without a name or namespace");
    const std::string claim_text = claim.claim_namespace() + "/" + claim.claim_name();
    for (const auto& resource : claim.claim_resources()) {
      if (resource.device_name().empty() && resource.cdi_devices_size() == 0) continue;
      if (resource.driver_name().empty())
        return malformed(options, method, where + ": claim " + claim_text + " has a device without a driver name");
      DeviceAllocation device{resource.driver_name(), {resource.pool_name() + "/" + resource.device_name()}, claim_text, {}};
      for (const auto& cdi : resource.cdi_devices()) {
        if (cdi.name().empty())
          return malformed(options, method, where + ": claim " + claim_text + " has an empty CDI device name");
        device.cdi_devices.push_back(cdi.name());
      }
      allocation.push_back(std::move(device));
    }
  }
  return {};
}

// The container's devices in `pod`, merged per resource name in the kubelet's order; nullopt if the pod does not
// list the container.
Result<Allocation> container_devices(const ::v1::PodResources& pod, const ContainerIdentity& identity,
                                     const PodResourcesOptions& options, const std::string& method) {
  if (pod.containers_size() > kPodResourcesMaxContainersPerPod)
    return too_large(options, method, std::to_string(pod.containers_size()) + " containers in pod " + pod_text(identity),
                     kPodResourcesMaxContainersPerPod);
  const ::v1::ContainerResources* found = nullptr;
  for (const auto& container : pod.containers()) {
    if (container.name() != identity.container_name) continue;
    if (found)
      return malformed(options, method,
                       "pod " + pod_text(identity) + " lists container " + identity.container_name + " twice");
    found = &container;
  }
  if (!found) return Allocation{};

  const std::string where = "container " + identity.container_name + " of pod " + pod_text(identity);
  // The kubelet sends one entry per device: neither entries nor ids may pass the bound.
  std::size_t device_count = 0;
  for (const auto& devices : found->devices()) device_count += static_cast<std::size_t>(devices.device_ids_size());
  device_count = std::max(device_count, static_cast<std::size_t>(found->devices_size()));
  if (device_count > static_cast<std::size_t>(kPodResourcesMaxDevicesPerContainer))
    return too_large(options, method, std::to_string(device_count) + " devices for " + where,
                     kPodResourcesMaxDevicesPerContainer);

  std::vector<DeviceAllocation> allocation;
  for (const auto& devices : found->devices()) {
    if (devices.resource_name().empty()) return malformed(options, method, where + " has a device without a resource name");
    auto resource = std::find_if(allocation.begin(), allocation.end(),
                                 [&](const DeviceAllocation& a) { return a.resource_name == devices.resource_name(); });
    if (resource == allocation.end()) {
      allocation.push_back({devices.resource_name(), {}});
      resource = std::prev(allocation.end());
    }
    for (const auto& id : devices.device_ids()) {
      if (id.empty()) return malformed(options, method, where + " has an empty " + devices.resource_name() + " device id");
      if (std::find(resource->device_ids.begin(), resource->device_ids.end(), id) == resource->device_ids.end())
        resource->device_ids.push_back(id);
    }
  }
  // A resource listed only with no ids carries nothing.
  std::erase_if(allocation, [](const DeviceAllocation& a) { return a.device_ids.empty(); });
  GPUCKPT_TRY_VOID(add_dynamic_resources(*found, where, options, method, allocation));
  return Allocation{std::move(allocation)};
}

Result<Allocation> from_list(::v1::PodResourcesLister::Stub& stub, const PodResourcesOptions& options,
                             const ContainerIdentity& identity, Deadline deadline) {
  grpc::ClientContext context;
  context.set_deadline(deadline);
  ::v1::ListPodResourcesResponse response;
  const auto status = stub.List(&context, ::v1::ListPodResourcesRequest(), &response);
  if (!status.ok()) return call_error(status, "List", options);
  if (response.pod_resources_size() > kPodResourcesMaxPods)
    return too_large(options, "List", std::to_string(response.pod_resources_size()) + " pods", kPodResourcesMaxPods);

  const ::v1::PodResources* found = nullptr;
  for (const auto& pod : response.pod_resources()) {
    if (pod.namespace_() != identity.pod_namespace || pod.name() != identity.pod_name) continue;
    // The kubelet lists active pods, so two pods under one name would be an old one not yet gone: which of them
    // the new container belongs to cannot be told from this API.
    if (found)
      return make_error("the kubelet's PodResources List on " + options.socket + " lists pod " + pod_text(identity) +
                            " twice (a pod re-created under the same name while the old one terminates?); which "
                            "allocation is this container's cannot be told: retry once the old pod is gone",
                        EAGAIN);
    found = &pod;
  }
  if (!found) return Allocation{};
  return container_devices(*found, identity, options, "List");
}

}  // namespace

Result<Allocation> container_allocation(const PodResourcesOptions& options, const ContainerIdentity& identity) {
  if (identity.pod_namespace.empty() || identity.pod_name.empty() || identity.container_name.empty())
    return make_error("cannot ask the kubelet for the devices of container \"" + identity.container_name +
                          "\" of pod \"" + pod_text(identity) +
                          "\": the pod namespace, pod name and container name are all needed",
                      EINVAL);
  if (auto socket = check_socket(options.socket); !socket) return socket.error();

  const Deadline deadline = std::chrono::system_clock::now() + options.timeout;
  const auto stub = ::v1::PodResourcesLister::NewStub(
      unix_socket_channel(options.socket, kPodResourcesMaxAnswerBytes));

  grpc::ClientContext context;
  context.set_deadline(deadline);
  ::v1::GetPodResourcesRequest request;
  request.set_pod_namespace(identity.pod_namespace);
  request.set_pod_name(identity.pod_name);
  ::v1::GetPodResourcesResponse response;
  const auto status = stub->Get(&context, request, &response);
  if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED || status.error_code() == grpc::StatusCode::UNKNOWN)
    return from_list(*stub, options, identity, deadline);
  if (!status.ok()) return call_error(status, "Get", options);

  if (!response.has_pod_resources()) return malformed(options, "Get", "no pod in the answer for " + pod_text(identity));
  const auto& pod = response.pod_resources();
  if (pod.namespace_() != identity.pod_namespace || pod.name() != identity.pod_name)
    return malformed(options, "Get", "asked for pod " + pod_text(identity) + ", answered for " + pod.namespace_() + "/" +
                                         pod.name());
  return container_devices(pod, identity, options, "Get");
}

}  // namespace gpuckpt
