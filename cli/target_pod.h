// The pod `kubectl gpuckpt migrate` creates on a CRI node: a copy of the source pod that kubelet runs on the chosen
// node, with the migrated container's image replaced by its checkpoint image (CRI-O and containerd >= 2.1 restore a
// container whose image is a checkpoint image). A pure function of the source pod's JSON (kubectl get pod -o json).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace gpuckpt::cli {

struct TargetPodOptions {
  std::string node;        // spec.nodeName: the node the checkpoint image was loaded on
  std::string container;   // the container restored from the checkpoint
  std::string image;       // its checkpoint image, as loaded into the node's store
  std::string name;        // the new pod's name; empty: "<source name>-migrated"
  std::string pull = "Never";   // the container's imagePullPolicy: Never (in the node's store) or IfNotPresent
  // The .spec.selector of the controller that owns the source pod (a LabelSelector with matchLabels and
  // matchExpressions, or a ReplicationController's plain map); null: the pod has no owner. A controller adopts
  // every pod without an owner that its selector matches, and then deletes one of the two: the labels it selects
  // by are not copied.
  nlohmann::json owner_selector = nullptr;
  bool no_labels = false;   // copy no label at all (an owner whose selector could not be read)
};

// Kept: namespace, labels (not those controllers set to claim their pods, nor those the owner's selector names: the
// copy stands alone), annotations,
// the whole spec with its resource limits (the device plugin allocates the GPUs again; gpuckpt-nri follows that
// allocation). Changed: name, spec.nodeName, the container's image and pull policy.
// Dropped: what the API server, admission or controllers own (uid, resourceVersion, ownerReferences, managedFields,
// status, priority, ephemeral containers, ...) and node selection (nodeSelector, node affinity: the node is chosen).
// Added: annotations gpuckpt.io/migrated-from (NAMESPACE/NAME) and gpuckpt.io/checkpoint-image.
Result<nlohmann::json> target_pod(const nlohmann::json& source, const TargetPodOptions& options);

// A Kubernetes object name (DNS-1123 subdomain): lower-case letters, digits, '-', '.', alphanumeric at both ends,
// at most 253 bytes.
bool is_object_name(const std::string& name);

}  // namespace gpuckpt::cli
