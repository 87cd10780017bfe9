// Which runtime is restoring a container being created, and from what: the one place that reads the marks each
// runtime leaves on a restored container (gpuckpt-nri's CreateContainer). Pure, over the container's
// annotations as NRI shows them.
//   containerd 2.x (CRI restore in CreateContainer): the container's CRI annotations get "restored" = "true",
//     "checkpointedAt" and "checkpointImage" = the image the request named (an image reference, or the path
//     of a checkpoint archive); the original container's annotations come from the archive's status.dump, and
//     its io.kubernetes.cri.image-name is the checkpoint's base image.
//   CRI-O: no mark of its own; the restored container's annotations are the original container's, parsed from
//     spec.dump's io.kubernetes.cri-o.Annotations JSON, and io.kubernetes.cri-o.ImageName is the base image. The
//     agent writes io.gpuckpt.checkpoint-id into that JSON when it annotates an archive, so a CRI-O container
//     that carries it (and CRI-O's own io.kubernetes.cri-o.* annotations) is a restore of that checkpoint.
// An image name alone never makes a container a restore: an ordinary container of any image is not recognised.
#pragma once

#include <map>
#include <optional>
#include <string>

namespace gpuckpt {

enum class RestoringRuntime { Containerd, CriO };
std::string_view runtime_name(RestoringRuntime runtime);

struct RecognisedRestore {
  RestoringRuntime runtime = RestoringRuntime::Containerd;
  // What the runtime restores from, as the request named it (containerd only; CRI-O does not say): an image
  // reference, or an absolute path of a checkpoint archive (source_is_archive).
  std::string source;
  bool source_is_archive = false;
  // The checkpoint id the restored container carries (io.gpuckpt.checkpoint-id): always for CRI-O; for
  // containerd where the archive's status.dump carried it (the agent's annotation of kubelet archives).
  std::string checkpoint_id;
};

// std::nullopt: not a restore (an ordinary container, whatever its image).
std::optional<RecognisedRestore> recognise_restore(const std::map<std::string, std::string>& annotations);

// containerd (2.1.9 measured; the same code through 2.3) writes the request's user_specified_image into
// "checkpointImage", not its image: a restore requested without one (the kubelet always sends the pod's image
// there; crictl and other CRI clients may not) is marked "restored" with an empty "checkpointImage", and nothing
// NRI sees says what it restores. recognise_restore does not recognise it; this says that it is one, so
// gpuckpt-nri can say why it leaves it as containerd made it.
bool is_containerd_restore_without_source(const std::map<std::string, std::string>& annotations);

// The name of the pod's container a recognised restore is created as, for the kubelet's PodResources. containerd
// (2.1.9 measured; the same code through 2.3) names every container it restores "containerd": NRI's container
// name and io.kubernetes.cri.container-name are the CRI plugin's own name. The kubelet's label
// io.kubernetes.container.name, which containerd takes from the create request, names the pod's container: it
// stands in for a containerd restore reported as "containerd", and only there. Otherwise `reported_name` (NRI's).
std::string restored_container_name(const RecognisedRestore& restore, const std::string& reported_name,
                                    const std::map<std::string, std::string>& labels);

}  // namespace gpuckpt
