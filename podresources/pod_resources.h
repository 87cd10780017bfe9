// Which devices the kubelet allocated to one container, asked of the kubelet itself through its PodResources API
// (gRPC v1, service v1.PodResourcesLister, vendored in proto/third_party/k8s.io/kubelet). This is how Kubernetes
// records an allocation; a runtime may drop the request's devices (CRI-O's restore does), the kubelet does not.
//
// What is matched: pod namespace + pod name + container name. The v1 API carries no pod UID (neither Get's request
// nor its answers), so ContainerIdentity::pod_uid is not used; a pod deleted and re-created under the same name is
// told apart only by the kubelet itself, which lists active pods. Restartable init containers (sidecars) are listed
// like the other containers. Dynamic Resource Allocation claims (ContainerResources.dynamic_resources, reported by
// kubelets from 1.27 with KubeletPodResourcesDynamicResources, on by default from 1.34) are read too: each device a
// DRA driver prepared for one of the container's claims, with its CDI device names (podresources/cdi_devices.h says
// which nodes those stand for).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "gpu/device_allocation.h"
#include "base/result.h"

namespace gpuckpt {

struct PodResourcesOptions {
  // The kubelet's socket (<kubelet --root-dir>/pod-resources/kubelet.sock). It must be the socket itself: a symbolic
  // link there is refused, not followed (the kubelet creates the socket, never a link; a link is someone else's).
  std::string socket = "/var/lib/kubelet/pod-resources/kubelet.sock";
  // For the whole question: Get and, where Get is not served, List share this deadline.
  std::chrono::milliseconds timeout{2000};
};

// Bounds on what is read from the socket; an answer beyond any of them is refused as an error, never truncated.
inline constexpr int kPodResourcesMaxAnswerBytes = 4 << 20;
inline constexpr int kPodResourcesMaxPods = 5000;              // kubelet's --max-pods is 110 by default
inline constexpr int kPodResourcesMaxContainersPerPod = 500;
inline constexpr int kPodResourcesMaxDevicesPerContainer = 1024;   // device ids, over all its resources

// The container's allocation: one DeviceAllocation per device-plugin resource name in the kubelet's order (the
// kubelet lists a resource once per device; they are merged, repeated ids dropped), then one per DRA device. An
// empty vector: the container has no devices.
//
// Asks v1 Get for the pod. Where Get is not served — UNIMPLEMENTED (kubelets before 1.27) or UNKNOWN (the kubelet
// answers a plain error: "Get method disabled" with the KubeletPodResourcesGet feature gate off, the default on
// 1.27-1.33, and "pod ... not found") — v1 List settles it, within the same deadline.
//
// std::nullopt: the kubelet does not list that pod, or that container in it. Error: `identity` lacks a name; the
// socket is absent, not a socket, or nobody answers on it; no answer before the deadline; the answer is malformed
// (a pod or container listed twice, an empty resource name or device id, Get answering for another pod) or larger
// than the bounds above. Each message names the socket and what to do.
Result<std::optional<std::vector<DeviceAllocation>>> container_allocation(const PodResourcesOptions& options,
                                                                           const ContainerIdentity& identity);

}  // namespace gpuckpt
