// Recognising a restore from the annotations a runtime gives the restored container, in the exact shapes
// containerd 2.1.9 (internal/cri/server/container_checkpoint_linux.go, NRI's view = spec annotations + CRI
// annotations) and CRI-O (server/container_restore.go: the original container's annotations from spec.dump's
// io.kubernetes.cri-o.Annotations, ImageName = the rootfs image) produce, and the ordinary containers that must
// never count as one.
#include <catch2/catch_test_macros.hpp>

#include "restore/restore_recognition.h"

using namespace gpuckpt;
using Annotations = std::map<std::string, std::string>;

namespace {

// What NRI shows of a container containerd 2.1.9 creates: the spec's io.kubernetes.cri.* annotations and the
// CRI annotations the kubelet sent.
Annotations containerd_container(const std::string& image) {
  return {{"io.kubernetes.cri.container-type", "container"},
          {"io.kubernetes.cri.container-name", "trainer"},
          {"io.kubernetes.cri.image-name", image},
          {"io.kubernetes.cri.sandbox-id", "5f0c"},
          {"io.kubernetes.cri.sandbox-name", "trainer-0"},
          {"io.kubernetes.cri.sandbox-namespace", "ml"},
          {"io.kubernetes.cri.sandbox-uid", "0b9e"},
          {"io.kubernetes.container.hash", "a1b2"},
          {"io.kubernetes.container.restartCount", "0"}};
}

// containerd's restore: the original container's CRI annotations (status.dump) plus its own three marks; the
// image name is the checkpoint's base image.
Annotations containerd_restore(const std::string& checkpoint_image, const std::string& carried_id) {
  Annotations a = containerd_container("docker.io/library/python:3.12");
  a["restored"] = "true";
  a["checkpointedAt"] = "2026-11-26T06:00:00.123456789Z";
  a["checkpointImage"] = checkpoint_image;
  if (!carried_id.empty()) a["io.gpuckpt.checkpoint-id"] = carried_id;
  return a;
}

// What CRI-O puts in a container's spec: its own io.kubernetes.cri-o.* keys and each CRI annotation.
Annotations crio_container(const std::string& image, const Annotations& cri) {
  std::string json = "{";
  for (const auto& [k, v] : cri) json += (json.size() > 1 ? "," : "") + ("\"" + k + "\":\"" + v + "\"");
  json += "}";
  Annotations a = {{"io.kubernetes.cri-o.Annotations", json},
                   {"io.kubernetes.cri-o.ContainerID", "7d1e"},
                   {"io.kubernetes.cri-o.ContainerName", "k8s_trainer_trainer-0_ml_0b9e_0"},
                   {"io.kubernetes.cri-o.ContainerType", "container"},
                   {"io.kubernetes.cri-o.ImageName", image},
                   {"io.kubernetes.cri-o.SandboxID", "5f0c"},
                   {"io.kubernetes.pod.name", "trainer-0"},
                   {"io.kubernetes.pod.namespace", "ml"}};
  for (const auto& [k, v] : cri) a[k] = v;
  return a;
}

}  // namespace

TEST_CASE("restores are recognised by each runtime's own marks, ordinary containers never by image name", "[unit]") {
  struct Case {
    const char* what;
    Annotations annotations;
    std::optional<RestoringRuntime> runtime;
    std::string source;
    bool archive;
    std::string checkpoint_id;
  };
  const Annotations crio_restored = {{"io.kubernetes.container.hash", "a1b2"}, {"io.gpuckpt.checkpoint-id", "ck-7"},
                                     {"io.gpuckpt.version", "1"}};
  for (const auto& c : std::vector<Case>{
           {"containerd 2.1.9, from a checkpoint image", containerd_restore("localhost/gpuckpt-checkpoint:ck-7", ""),
            RestoringRuntime::Containerd, "localhost/gpuckpt-checkpoint:ck-7", false, ""},
           {"containerd 2.1.9, from a kubelet archive that carried its id",
            containerd_restore("/var/lib/kubelet/checkpoints/checkpoint-trainer-0_ml-trainer-2026.tar", "kubelet-x"),
            RestoringRuntime::Containerd, "/var/lib/kubelet/checkpoints/checkpoint-trainer-0_ml-trainer-2026.tar", true,
            "kubelet-x"},
           {"containerd, an ordinary container of an image the agent registered",
            containerd_container("localhost/gpuckpt-checkpoint:ck-7"), std::nullopt, "", false, ""},
           {"containerd, 'restored' without checkpointImage",
            [] { auto a = containerd_container("busybox"); a["restored"] = "true"; return a; }(), std::nullopt, "", false, ""},
           {"containerd marks on a container no CRI runtime made",
            {{"restored", "true"}, {"checkpointImage", "ck:1"}}, std::nullopt, "", false, ""},
           {"CRI-O, a restore carrying the agent's checkpoint id",
            crio_container("docker.io/library/python:3.12", crio_restored), RestoringRuntime::CriO, "", false, "ck-7"},
           {"CRI-O, an ordinary container of an image the agent registered",
            crio_container("localhost/gpuckpt-checkpoint:ck-7", {{"io.kubernetes.container.hash", "a1b2"}}),
            std::nullopt, "", false, ""},
           {"CRI-O, a restore of a checkpoint gpuckpt never annotated",
            crio_container("docker.io/library/python:3.12", {{"io.kubernetes.container.hash", "a1b2"}}), std::nullopt,
            "", false, ""},
           {"a checkpoint id with no runtime's marks (podman, hand-made)",
            {{"io.gpuckpt.checkpoint-id", "ck-7"}}, std::nullopt, "", false, ""},
       }) {
    INFO(c.what);
    const auto restore = recognise_restore(c.annotations);
    REQUIRE(restore.has_value() == c.runtime.has_value());
    if (!restore) continue;
    CHECK(restore->runtime == *c.runtime);
    CHECK(restore->source == c.source);
    CHECK(restore->source_is_archive == c.archive);
    CHECK(restore->checkpoint_id == c.checkpoint_id);
  }
}
