// CRI-O 1.36.3's NRI CreateContainer requests, captured from the real runtime (test/fixtures/crio/, written by
// test/e2e/crio_flow.sh), replayed through recognition, the checkpoint index and gpuckpt-nri's planning. CI has no
// CRI-O: these bytes are the contract that catches a regression in how gpuckpt-nri reads a CRI-O restore.
#include <catch2/catch_test_macros.hpp>


#include <nlohmann/json.hpp>

#include "archive/checkpoint_images.h"
#include "restore/restore_plan.h"
#include "restore/restore_recognition.h"
#include "nri-plugin/nri_plugin.h"
#include "test/support/gpu_builders.h"
#include "test/nri-plugin/nri_node_fixture.h"
#include "test/support/temp_dir.h"

using namespace gpuckpt;
using namespace gpuckpt::nri;
namespace fs = std::filesystem;

namespace {

NodeInventory two_gpus() { return test_fixture::two_nvidia_gpus("NVIDIA H100 80GB HBM3", 80); }

// What crio_flow.sh step 3 did: pod default/gpuckpt-crio-src's container "counter" ran on GPU 0 (/dev/nvidia0,
// NVIDIA_VISIBLE_DEVICES=0), was checkpointed through CRI into the kubelet's dir, where the agent annotated the
// archive with this id; pod default/gpuckpt-crio-dst restored it with CreateContainer(image = the archive path),
// its request naming /dev/nvidia1 and NVIDIA_VISIBLE_DEVICES=1 (GPU 1, as the device plugin would).
constexpr const char* kRestoreCapture = "create-container-restore-v1.36.3.pb";
constexpr const char* kOrdinaryCapture = "create-container-v1.36.3.pb";
constexpr const char* kCheckpointId = "kubelet-checkpoint-gpuckpt-crio-src_default-counter-2026-11-26T10-45-02Z";

std::map<std::string, std::string> annotations_of(const api::Container& c) {
  return {c.annotations().begin(), c.annotations().end()};
}

// The agent's record of the checkpoint, as its kubelet-dir watcher registered it: GPU 0 through /dev/nvidia0.
CheckpointGpuRecord checkpoint_on_gpu0() {
  CheckpointGpuRecord record;
  record.checkpoint_id = kCheckpointId;
  record.record.node = two_gpus();
  record.record.used_gpu_ids = {"GPU-0"};
  record.devices = {{"/dev/nvidia0", 195, 0, "GPU-0"}};
  record.gpu_env = {{"NVIDIA_VISIBLE_DEVICES", "0"}};
  return record;
}

// The kubelet's PodResources: the restore's pod was given GPU 1, nothing else is listed.
AllocationReader kubelet_gives_restore_pod_gpu1(std::vector<ContainerIdentity>& asked) {
  return [&asked](const ContainerIdentity& who) -> Result<std::optional<std::vector<DeviceAllocation>>> {
    asked.push_back(who);
    if (who.pod_namespace != "default" || who.pod_name != "gpuckpt-crio-dst" || who.container_name != "counter")
      return std::optional<std::vector<DeviceAllocation>>();
    return std::optional<std::vector<DeviceAllocation>>(std::vector<DeviceAllocation>{{"nvidia.com/gpu", {"GPU-1"}}});
  };
}

NriPlugin plugin_with(const fs::path& state, AllocationReader allocation, const std::string& hook_path) {
  NriPluginOptions options;
  options.state_dir = state;
  options.hook_path = hook_path;
  options.allocation = std::move(allocation);
  return NriPlugin(options, [] { return Result<NodeInventory>(two_gpus()); }, test_fixture::gpu_device_numbers);
}

api::ContainerAdjustment adjusted(NriPlugin& plugin, const std::string& payload) {
  auto answer = plugin.handle("CreateContainer", payload);
  INFO((answer ? std::string() : answer.error().message));
  REQUIRE(answer.ok());
  api::CreateContainerResponse response;
  REQUIRE(response.ParseFromString(answer.value()));
  return response.adjust();
}

// The createRuntime hooks CRI-O put in the request from its hooks.d (gpuckpt's entry).
std::vector<std::string> create_runtime_hooks(const api::Container& c) {
  std::vector<std::string> paths;
  for (const auto& h : c.hooks().create_runtime()) paths.push_back(h.path());
  return paths;
}

}  // namespace

TEST_CASE("CRI-O 1.36.3's captured restore: devices and env dropped, the checkpoint id carried, recognised", "[unit]") {
  const auto request = test_fixture::captured_request("crio", kRestoreCapture);
  const api::Container& c = request.container();
  // The request asked for /dev/nvidia1 and NVIDIA_VISIBLE_DEVICES=1; CRI-O's restore passed neither on.
  for (const auto& d : c.linux().devices()) CHECK(d.path().rfind("/dev/nvidia", 0) != 0);
  for (const auto& e : c.env()) CHECK(e.rfind("NVIDIA_VISIBLE_DEVICES=", 0) != 0);
  const auto annotations = annotations_of(c);
  // ImageName is the checkpoint's rootfs image, not the archive the pod named.
  CHECK(annotations.at("io.kubernetes.cri-o.ImageName") == "localhost/gpuckpt-pause:latest");
  // The CRI annotations are the original container's (the source's request annotation; the restore request had
  // none), the pod is the new one.
  CHECK(annotations.at("io.gpuckpt.test/from-request") == "yes");
  CHECK(request.pod().name() == "gpuckpt-crio-dst");
  CHECK(request.pod().uid() == "gpuckpt-crio-dst");
  CHECK(annotations.at("io.gpuckpt.checkpoint-id") == kCheckpointId);
  const auto carried = nlohmann::json::parse(annotations.at("io.kubernetes.cri-o.Annotations"));
  CHECK(carried.at("io.gpuckpt.checkpoint-id").get<std::string>() == kCheckpointId);

  const auto restore = recognise_restore(annotations);
  REQUIRE(restore);
  CHECK(restore->runtime == RestoringRuntime::CriO);
  CHECK(restore->checkpoint_id == kCheckpointId);
  CHECK(restore->source.empty());   // CRI-O does not say what it restores from
  CHECK_FALSE(recognise_restore(annotations_of(test_fixture::captured_request("crio", kOrdinaryCapture).container())));
}

TEST_CASE("gpuckpt-nri gives CRI-O's captured restore the kubelet's GPU, and nothing to what it must not touch",
          "[unit]") {
  test::TempDir tmp;
  const auto restore_bytes = test_fixture::capture_bytes("crio", kRestoreCapture);
  const auto request = test_fixture::captured_request("crio", kRestoreCapture);
  const auto hooks_d = create_runtime_hooks(request.container());
  REQUIRE(hooks_d.size() == 1);   // CRI-O added gpuckpt's hooks.d entry before NRI saw the container
  CHECK(fs::path(hooks_d[0]).filename().string() == "gpuckpt-oci-hook");
  const fs::path archive = tmp.path / "checkpoint-gpuckpt-crio-src_default-counter-2026-11-26T10:45:02Z.tar";
  std::ofstream(archive) << "the archive the agent annotated";
  REQUIRE(register_kubelet_archive(tmp.path, archive, checkpoint_on_gpu0()).ok());

  std::vector<ContainerIdentity> asked;
  auto plugin = plugin_with(tmp.path, kubelet_gives_restore_pod_gpu1(asked), hooks_d[0]);
  const auto adjust = adjusted(plugin, restore_bytes);
  REQUIRE(asked.size() == 1);
  CHECK(asked[0].pod_namespace == "default");
  CHECK(asked[0].pod_name == "gpuckpt-crio-dst");
  CHECK(asked[0].pod_uid == "gpuckpt-crio-dst");
  CHECK(asked[0].container_name == "counter");
  // GPU 1's node under its own name (NRI adds the rw device-cgroup rule from the mode); nothing to remove: CRI-O
  // kept no device.
  REQUIRE(adjust.linux().devices_size() == 1);
  const auto& node = adjust.linux().devices(0);
  CHECK(node.path() == "/dev/nvidia1");
  CHECK(node.type() == "c");
  CHECK(node.major() == 195);
  CHECK(node.minor() == 1);
  CHECK(node.file_mode().value() == 0666);
  REQUIRE(adjust.env_size() == 1);
  CHECK(adjust.env(0).key() == "NVIDIA_VISIBLE_DEVICES");
  CHECK(adjust.env(0).value() == "1");
  const auto plan = read_restore_plan(tmp.path, adjust.annotations().at(kAnnotationRestorePlan));
  REQUIRE(plan.ok());
  REQUIRE(plan.value());
  CHECK(plan.value()->checkpoint_id == kCheckpointId);
  CHECK(plan.value()->container_id == request.container().id());
  REQUIRE(plan.value()->assignments.size() == 1);
  CHECK(plan.value()->assignments[0].source_id == "GPU-0");
  CHECK(plan.value()->assignments[0].target_id == "GPU-1");
  // CRI-O runs the hook from hooks.d already: a second one would find the plan used by the first and fail the
  // restore. A hook at another path is added.
  CHECK(adjust.hooks().create_runtime_size() == 0);
  auto elsewhere = plugin_with(tmp.path, kubelet_gives_restore_pod_gpu1(asked), "/opt/gpuckpt/bin/gpuckpt-oci-hook");
  const auto with_hook = adjusted(elsewhere, restore_bytes);
  REQUIRE(with_hook.hooks().create_runtime_size() == 1);
  CHECK(with_hook.hooks().create_runtime(0).path() == "/opt/gpuckpt/bin/gpuckpt-oci-hook");

  // The ordinary container CRI-O created (GPU 0 in its request) is recorded, never adjusted.
  CHECK(adjusted(plugin, test_fixture::capture_bytes("crio", kOrdinaryCapture)).ByteSizeLong() == 0);
  // The same restore on a node where the agent registered no such checkpoint: not gpuckpt's, left alone.
  test::TempDir other;
  auto unregistered = plugin_with(other.path, kubelet_gives_restore_pod_gpu1(asked), hooks_d[0]);
  CHECK(adjusted(unregistered, restore_bytes).ByteSizeLong() == 0);
  // Registered, but the kubelet gave the pod no GPU: refused, never "any GPU of the node".
  auto no_gpu = plugin_with(tmp.path, [](const ContainerIdentity&) {
    return Result<std::optional<std::vector<DeviceAllocation>>>(std::optional<std::vector<DeviceAllocation>>());
  }, hooks_d[0]);
  auto refused = no_gpu.handle("CreateContainer", restore_bytes);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("CRI-O drops them") != std::string::npos);
}
