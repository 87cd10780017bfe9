// Recognising containerd 2.1.9's restores from what it really sends NRI plugins (test/fixtures/containerd2/,
// captured by test/e2e/containerd2_flow.sh): the marks gpuckpt-nri matches, the name containerd gives a restored
// container, and the containers that must never count as restores.
#include <catch2/catch_test_macros.hpp>

#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "restore/restore_recognition.h"

using namespace gpuckpt;
using Strings = std::map<std::string, std::string>;

namespace {

struct CapturedContainer {
  std::string name;
  Strings annotations;
  Strings labels;
};

// A captured CreateContainerRequest (the .json nri-dump wrote beside the .pb): the container's name, annotations
// and labels.
CapturedContainer captured(const std::string& file) {
  std::ifstream in(std::string(GPUCKPT_TEST_FIXTURES) + "/containerd2/" + file);
  REQUIRE(in);
  const auto request = nlohmann::json::parse(in);
  const auto& c = request.at("container");
  CapturedContainer out;
  out.name = c.at("name").get<std::string>();
  out.annotations = c.value("annotations", Strings());
  out.labels = c.value("labels", Strings());
  return out;
}

}  // namespace

TEST_CASE("containerd 2.1.9's captured restores are recognised by restored + checkpointImage", "[unit]") {
  SECTION("from the archive path (user_specified_image = the path, as the kubelet sends the pod's image)") {
    const auto c = captured("create-restore-archive-v2.1.9.json");
    const auto restore = recognise_restore(c.annotations);
    REQUIRE(restore);
    CHECK(restore->runtime == RestoringRuntime::Containerd);
    CHECK(restore->source_is_archive);
    CHECK(restore->source == c.annotations.at("checkpointImage"));
    CHECK(restore->source.ends_with(".tar"));
    CHECK(restore->checkpoint_id.empty());   // containerd restores status.dump's annotations, which carry none
    // containerd names the restored container "containerd"; the kubelet's label names the pod's container
    CHECK(c.name == "containerd");
    CHECK(c.annotations.at("io.kubernetes.cri.container-name") == "containerd");
    CHECK(restored_container_name(*restore, c.name, c.labels) == "counter");
  }
  SECTION("from a checkpoint image (image = its id, user_specified_image = its name)") {
    const auto c = captured("create-restore-image-v2.1.9.json");
    const auto restore = recognise_restore(c.annotations);
    REQUIRE(restore);
    CHECK(restore->runtime == RestoringRuntime::Containerd);
    CHECK_FALSE(restore->source_is_archive);
    CHECK(restore->source == "localhost/gpuckpt-checkpoint:gpuckpt-e2e-ctrd2");
    // io.kubernetes.cri.image-name is the checkpoint's base image, not the checkpoint image
    CHECK(c.annotations.at("io.kubernetes.cri.image-name").find("gpuckpt-busybox@sha256:") != std::string::npos);
    CHECK(restored_container_name(*restore, c.name, c.labels) == "counter");
  }
  SECTION("a restore whose request named no user_specified_image is not recognised, but known as such") {
    const auto c = captured("create-restore-archive-no-user-image-v2.1.9.json");
    CHECK(c.annotations.at("restored") == "true");
    CHECK(c.annotations.at("checkpointImage").empty());
    CHECK_FALSE(recognise_restore(c.annotations));
    CHECK(is_containerd_restore_without_source(c.annotations));
  }
  SECTION("a plain container of the checkpoint's base image is no restore") {
    const auto c = captured("create-plain-v2.1.9.json");
    CHECK_FALSE(recognise_restore(c.annotations));
    CHECK_FALSE(is_containerd_restore_without_source(c.annotations));
    CHECK(c.name == "counter");
  }
}

TEST_CASE("only a containerd restore is looked up by the kubelet's container label", "[unit]") {
  const Strings labels = {{"io.kubernetes.container.name", "trainer"}};
  RecognisedRestore containerd;
  containerd.runtime = RestoringRuntime::Containerd;
  CHECK(restored_container_name(containerd, "containerd", labels) == "trainer");
  CHECK(restored_container_name(containerd, "containerd", {}) == "containerd");   // no label: NRI's name stands
  // a containerd that names its restores correctly: the name is the container's, a label does not change it
  CHECK(restored_container_name(containerd, "worker", labels) == "worker");
  RecognisedRestore crio;
  crio.runtime = RestoringRuntime::CriO;
  CHECK(restored_container_name(crio, "trainer-x", labels) == "trainer-x");
}
