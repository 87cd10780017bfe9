// gpuckpt-nri on the CreateContainer requests containerd 2.1.9 really sends (test/fixtures/containerd2/, the
// bytes nri-dump saved in test/e2e/containerd2_flow.sh): a restore of a registered archive or checkpoint image
// gets the GPU the kubelet allocated to the pod's container (which containerd names "containerd"); a plain
// container of the base image and a restore that names no checkpoint get nothing.
#include <catch2/catch_test_macros.hpp>

#include <string>
#include <vector>

#include "archive/checkpoint_images.h"
#include "restore/restore_plan.h"
#include "nri-plugin/nri_plugin.h"
#include "test/support/gpu_builders.h"
#include "test/nri-plugin/nri_node_fixture.h"
#include "test/support/temp_dir.h"

using namespace gpuckpt;
using namespace gpuckpt::nri;
namespace fs = std::filesystem;

namespace {

NodeInventory two_gpus() { return test_fixture::two_nvidia_gpus("NVIDIA H200", 141); }

// The checkpoint the e2e test made: its container used GPU-0 as /dev/nvidia0, NVIDIA_VISIBLE_DEVICES=0.
CheckpointGpuRecord checkpoint_on_gpu0(const std::string& id) {
  CheckpointGpuRecord record;
  record.checkpoint_id = id;
  record.record.node = two_gpus();
  record.record.used_gpu_ids = {"GPU-0"};
  record.devices = {{"/dev/nvidia0", 195, 0, "GPU-0"}};
  record.gpu_env = {{"NVIDIA_VISIBLE_DEVICES", "0"}};
  return record;
}

// The kubelet's PodResources: GPU-1 for the container "counter" of every pod (as the e2e test's server), and
// who was asked.
NriPlugin plugin_with_kubelet(const fs::path& state, std::vector<ContainerIdentity>& asked) {
  NriPluginOptions options;
  options.state_dir = state;
  options.hook_path = "/opt/gpuckpt/bin/gpuckpt-oci-hook";
  options.allocation = [&asked](const ContainerIdentity& who) -> Result<std::optional<std::vector<DeviceAllocation>>> {
    asked.push_back(who);
    if (who.container_name != "counter") return std::optional<std::vector<DeviceAllocation>>();
    return std::optional<std::vector<DeviceAllocation>>(std::vector<DeviceAllocation>{{"nvidia.com/gpu", {"GPU-1"}}});
  };
  return NriPlugin(options, [] { return Result<NodeInventory>(two_gpus()); }, test_fixture::gpu_device_numbers);
}

api::ContainerAdjustment adjusted(NriPlugin& plugin, const api::CreateContainerRequest& request) {
  auto answer = plugin.handle("CreateContainer", request.SerializeAsString());
  INFO((answer ? std::string() : answer.error().message));
  REQUIRE(answer.ok());
  api::CreateContainerResponse response;
  REQUIRE(response.ParseFromString(answer.value()));
  return response.adjust();
}

std::vector<std::string> added_devices(const api::ContainerAdjustment& adjust) {
  std::vector<std::string> out;
  for (const auto& d : adjust.linux().devices())
    out.push_back(d.path() + " " + std::to_string(d.major()) + ":" + std::to_string(d.minor()));
  return out;
}

}  // namespace

TEST_CASE("containerd 2.1.9's restore from a registered kubelet archive gets the pod's GPU from PodResources",
          "[unit]") {
  test::TempDir tmp;
  const fs::path archive = tmp.path / "checkpoint-gpuckpt-src_default-counter-2026-11-26T10:12:17Z.tar";
  std::ofstream(archive) << "the archive the agent annotated";
  REQUIRE(register_kubelet_archive(tmp.path, archive, checkpoint_on_gpu0("kubelet-ck")).ok());
  // The captured request, with its archive path moved into this test's directory
  auto request = test_fixture::captured_request("containerd2", "create-restore-archive-v2.1.9.pb");
  REQUIRE(request.container().annotations().at("restored") == "true");
  (*request.mutable_container()->mutable_annotations())["checkpointImage"] = archive.string();
  REQUIRE(request.container().linux().devices_size() == 0);   // the request named no device: PodResources alone
  std::vector<ContainerIdentity> asked;
  auto plugin = plugin_with_kubelet(tmp.path, asked);
  const auto adjust = adjusted(plugin, request);
  // The kubelet was asked for the pod's container "counter", not for containerd's name for it
  REQUIRE(asked.size() == 1);
  CHECK(asked[0].pod_namespace == "default");
  CHECK(asked[0].pod_name == "gpuckpt-restored-path");
  CHECK(asked[0].container_name == "counter");
  CHECK(added_devices(adjust) == std::vector<std::string>{"/dev/nvidia1 195:1"});
  REQUIRE(adjust.env_size() == 1);
  CHECK(adjust.env(0).key() == "NVIDIA_VISIBLE_DEVICES");
  CHECK(adjust.env(0).value() == "1");
  const auto plan = read_restore_plan(tmp.path, adjust.annotations().at(kAnnotationRestorePlan));
  REQUIRE(plan.ok());
  REQUIRE(plan.value());
  CHECK(plan.value()->checkpoint_id == "kubelet-ck");
  CHECK(plan.value()->container_id == request.container().id());
  REQUIRE(plan.value()->assignments.size() == 1);
  CHECK(plan.value()->assignments[0].source_id == "GPU-0");
  CHECK(plan.value()->assignments[0].target_id == "GPU-1");
  // The CRIU plugin gives the restored /dev these numbers: the same as the spec's.
  REQUIRE(plan.value()->devices.size() == 1);
  CHECK(plan.value()->devices[0].path_after_restore() == "/dev/nvidia1");
  CHECK(plan.value()->devices[0].target_numbers == std::make_pair(195u, 1u));
  REQUIRE(adjust.hooks().create_runtime_size() == 1);
}

TEST_CASE("containerd 2.1.9's restore from a registered checkpoint image is adjusted; its own shapes that are no "
          "gpuckpt restore are not", "[unit]") {
  test::TempDir tmp;
  REQUIRE(register_checkpoint_image(tmp.path, "localhost/gpuckpt-checkpoint:gpuckpt-e2e-ctrd2", "",
                                    checkpoint_on_gpu0("image-ck")).ok());
  const auto plain = test_fixture::captured_request("containerd2", "create-plain-v2.1.9.pb");
  // Even the plain container's own image registered as a checkpoint does not make it a restore
  REQUIRE(register_checkpoint_image(tmp.path, plain.container().annotations().at("io.kubernetes.cri.image-name"), "",
                                    checkpoint_on_gpu0("base-ck")).ok());
  std::vector<ContainerIdentity> asked;
  auto plugin = plugin_with_kubelet(tmp.path, asked);
  const auto adjust = adjusted(plugin, test_fixture::captured_request("containerd2", "create-restore-image-v2.1.9.pb"));
  CHECK(read_restore_plan(tmp.path, adjust.annotations().at(kAnnotationRestorePlan)).value()->checkpoint_id == "image-ck");
  CHECK(added_devices(adjust) == std::vector<std::string>{"/dev/nvidia1 195:1"});
  REQUIRE(asked.size() == 1);
  CHECK(asked[0].container_name == "counter");

  asked.clear();
  CHECK(adjusted(plugin, plain).ByteSizeLong() == 0);
  // containerd marks a restore whose request had no user_specified_image with an empty checkpointImage: nothing
  // names the checkpoint, so it is left as containerd made it (the kubelet is not even asked)
  const auto no_user_image = test_fixture::captured_request("containerd2", "create-restore-archive-no-user-image-v2.1.9.pb");
  CHECK(adjusted(plugin, no_user_image).ByteSizeLong() == 0);
  CHECK(asked.empty());
}
