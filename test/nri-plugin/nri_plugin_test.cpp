// gpuckpt-nri without a runtime: the wire format (mux frames carrying ttrpc messages, split anywhere), the
// plugin's answers, and a whole session over a socketpair with this test playing the runtime's side as NRI 0.6
// does (RegisterPlugin on connection 2, Configure/Synchronize/CreateContainer/StateChange on connection 1). The
// real containerd 1.7 plays it in test/e2e/containerd_flow.sh.
#include <catch2/catch_test_macros.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <ctime>
#include <fstream>
#include <thread>

#include "nri-plugin/nri_plugin.h"
#include "nri-plugin/nri_session.h"
#include "nri-plugin/ttrpc_mux.h"
#include "archive/checkpoint_images.h"
#include "restore/restore_plan.h"
#include "state/container_store.h"
#include "test/support/gpu_builders.h"
#include "test/nri-plugin/nri_node_fixture.h"
#include "test/support/temp_dir.h"
#include "ttrpc/envelope.pb.h"

using namespace gpuckpt;
using namespace gpuckpt::nri;
namespace fs = std::filesystem;

namespace {

NodeInventory two_gpus() { return test_fixture::two_nvidia_gpus("NVIDIA H200", 141); }

void write_file(const fs::path& path, const std::string& data) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << data;
}

Result<std::pair<std::uint32_t, std::uint32_t>> numbers(const std::string& path) {
  if (path == "/dev/nvidiactl") return std::make_pair(195u, 255u);
  return test_fixture::gpu_device_numbers(path);
}

api::Container gpu_container(const std::string& id, int minor) {
  api::Container c;
  c.set_id(id);
  c.set_name("trainer");
  c.add_env("NVIDIA_VISIBLE_DEVICES=" + std::to_string(minor));
  auto* d = c.mutable_linux()->add_devices();
  d->set_path("/dev/nvidia0");
  d->set_type("c");
  d->set_major(195);
  d->set_minor(minor);
  (*c.mutable_annotations())["io.kubernetes.cri.sandbox-name"] = "trainer-0";
  return c;
}

NriPlugin make_plugin(const fs::path& state) {
  NriPluginOptions options;
  options.state_dir = state;
  return NriPlugin(options, [] { return Result<NodeInventory>(two_gpus()); }, numbers);
}

}  // namespace

TEST_CASE("NRI mux frames and ttrpc messages decode however the bytes are split", "[unit]") {
  std::string wire;
  wire += encode_mux_frame(kPluginServiceConn, encode_ttrpc({3, MessageType::Request, 0, "hello"}));
  // one ttrpc message carried by two mux frames, as a writer that flushes its header first produces
  const std::string message = encode_ttrpc({1, MessageType::Response, 0, std::string(300, 'x')});
  wire += encode_mux_frame(kRuntimeServiceConn, message.substr(0, 7));
  wire += encode_mux_frame(kRuntimeServiceConn, message.substr(7));
  for (std::size_t chunk : {std::size_t(1), std::size_t(5), wire.size()}) {
    MuxDecoder decoder;
    for (std::size_t at = 0; at < wire.size(); at += chunk) REQUIRE(decoder.feed(wire.substr(at, chunk)).ok());
    auto first = decoder.next();
    REQUIRE(first);
    CHECK(first->first == kPluginServiceConn);
    CHECK(first->second.stream == 3);
    CHECK(first->second.type == MessageType::Request);
    CHECK(first->second.body == "hello");
    auto second = decoder.next();
    REQUIRE(second);
    CHECK(second->first == kRuntimeServiceConn);
    CHECK(second->second.body.size() == 300);
    CHECK_FALSE(decoder.next());
  }
}

TEST_CASE("NRI frames over the limits or of unknown type are protocol errors", "[unit]") {
  MuxDecoder big;
  std::string header = encode_mux_frame(1, "");
  header[4] = 0x7f;   // length 0x7f000000
  CHECK(big.feed(header).error().errno_value == EPROTO);
  MuxDecoder typed;
  std::string bad = encode_ttrpc({1, MessageType::Request, 0, "x"});
  bad[8] = 9;
  CHECK_FALSE(typed.feed(encode_mux_frame(1, bad)).ok());
  MuxDecoder huge;
  std::string huge_message = encode_ttrpc({1, MessageType::Request, 0, ""});
  huge_message[0] = 0x10;   // 256 MiB body announced
  CHECK_FALSE(huge.feed(encode_mux_frame(1, huge_message)).ok());
}

TEST_CASE("gpuckpt-nri records GPU containers like the hook, forgets removed ones, never blocks a container",
          "[unit]") {
  test::TempDir tmp;
  auto plugin = make_plugin(tmp.path);
  api::ConfigureRequest configure;
  configure.set_runtime_name("containerd");
  api::ConfigureResponse configured;
  REQUIRE(configured.ParseFromString(plugin.handle("Configure", configure.SerializeAsString()).value()));
  CHECK(configured.events() == ((1 << 3) | (1 << 10)));   // CREATE_CONTAINER (4), REMOVE_CONTAINER (11)

  api::CreateContainerRequest create;
  *create.mutable_container() = gpu_container("c1", 1);
  api::CreateContainerResponse created;
  REQUIRE(created.ParseFromString(plugin.handle("CreateContainer", create.SerializeAsString()).value()));
  CHECK(created.adjust().ByteSizeLong() == 0);   // observed, not changed
  auto state = read_container_state(tmp.path, "c1");
  REQUIRE(state.ok());
  REQUIRE(state.value());
  CHECK(state.value()->gpus.record.used_gpu_ids == std::vector<std::string>{"GPU-1"});
  CHECK(state.value()->gpus.gpu_env.at("NVIDIA_VISIBLE_DEVICES") == "1");
  CHECK(state.value()->annotations.at("io.kubernetes.cri.sandbox-name") == "trainer-0");

  api::CreateContainerRequest plain;
  plain.mutable_container()->set_id("c2");
  REQUIRE(plugin.handle("CreateContainer", plain.SerializeAsString()).ok());
  CHECK_FALSE(read_container_state(tmp.path, "c2").value());

  api::CreateContainerRequest hostile;
  *hostile.mutable_container() = gpu_container("../../etc/passwd", 0);
  REQUIRE(plugin.handle("CreateContainer", hostile.SerializeAsString()).ok());   // answered, nothing written
  CHECK_FALSE(fs::exists(tmp.path / "etc"));

  api::StateChangeEvent removed;
  removed.set_event(api::REMOVE_CONTAINER);
  removed.mutable_container()->set_id("c1");
  REQUIRE(plugin.handle("StateChange", removed.SerializeAsString()).ok());
  CHECK_FALSE(read_container_state(tmp.path, "c1").value());

  // NRI >= 0.9 (CRI-O 1.3x, containerd 2.x) calls RemoveContainer {pod = 1, container = 2} before it falls back to
  // the deprecated StateChange: answered, and the record goes.
  *create.mutable_container() = gpu_container("c3", 0);
  REQUIRE(plugin.handle("CreateContainer", create.SerializeAsString()).ok());
  REQUIRE(read_container_state(tmp.path, "c3").value());
  api::CreateContainerRequest remove_request;   // the same fields and wire form as RemoveContainerRequest
  remove_request.mutable_pod()->set_id("pod-1");
  remove_request.mutable_container()->set_id("c3");
  auto answered = plugin.handle("RemoveContainer", remove_request.SerializeAsString());
  REQUIRE(answered.ok());
  CHECK(answered.value().empty());   // RemoveContainerResponse {}
  CHECK_FALSE(read_container_state(tmp.path, "c3").value());

  CHECK(plugin.handle("CreateContainer", "\xff\xff not protobuf").error().errno_value == EPROTO);
  CHECK(plugin.handle("NoSuchMethod", "").error().errno_value == ENOSYS);
}

TEST_CASE("an NRI session registers, answers the runtime's calls and ends when the runtime closes", "[unit]") {
  test::TempDir tmp;
  auto plugin = make_plugin(tmp.path);
  int fds[2];
  REQUIRE(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) == 0);
  Result<void> served;
  std::thread session([&] { served = serve(fds[0], plugin, SessionOptions{}); });

  // The runtime's side.
  MuxDecoder decoder;
  const auto receive = [&]() -> std::pair<std::uint32_t, TtrpcMessage> {
    for (;;) {
      if (auto item = decoder.next()) return *item;
      char buffer[4096];
      const ssize_t n = ::read(fds[1], buffer, sizeof buffer);
      REQUIRE(n > 0);
      REQUIRE(decoder.feed(std::string_view(buffer, static_cast<std::size_t>(n))).ok());
    }
  };
  const auto call = [&](std::uint32_t stream, const std::string& method, const std::string& payload) {
    ttrpc::Request request;
    request.set_service("nri.pkg.api.v1alpha1.Plugin");
    request.set_method(method);
    request.set_payload(payload);
    const auto frame = encode_mux_frame(kPluginServiceConn,
                                        encode_ttrpc({stream, MessageType::Request, 0, request.SerializeAsString()}));
    REQUIRE(::write(fds[1], frame.data(), frame.size()) == static_cast<ssize_t>(frame.size()));
    auto [conn, message] = receive();
    CHECK(conn == kPluginServiceConn);
    CHECK(message.stream == stream);
    CHECK(message.type == MessageType::Response);
    ttrpc::Response response;
    REQUIRE(response.ParseFromString(message.body));
    return response;
  };

  auto [conn, registration] = receive();
  CHECK(conn == kRuntimeServiceConn);
  ttrpc::Request request;
  REQUIRE(request.ParseFromString(registration.body));
  CHECK(request.service() == "nri.pkg.api.v1alpha1.Runtime");
  CHECK(request.method() == "RegisterPlugin");
  api::RegisterPluginRequest who;
  REQUIRE(who.ParseFromString(request.payload()));
  CHECK(who.plugin_name() == "gpuckpt");
  CHECK(who.plugin_idx() == "50");
  ttrpc::Response ok;
  const auto reply = encode_mux_frame(kRuntimeServiceConn,
                                      encode_ttrpc({registration.stream, MessageType::Response, 0, ok.SerializeAsString()}));
  REQUIRE(::write(fds[1], reply.data(), reply.size()) == static_cast<ssize_t>(reply.size()));

  api::ConfigureResponse configured;
  REQUIRE(configured.ParseFromString(call(1, "Configure", api::ConfigureRequest().SerializeAsString()).payload()));
  CHECK(configured.events() == subscribed_events());
  api::CreateContainerRequest create;
  *create.mutable_container() = gpu_container("c9", 0);
  auto response = call(3, "CreateContainer", create.SerializeAsString());
  CHECK(response.status().code() == 0);
  CHECK(read_container_state(tmp.path, "c9").value());
  CHECK(call(5, "Bogus", "").status().code() == 12);   // UNIMPLEMENTED, and the session goes on

  ::close(fds[1]);
  session.join();
  CHECK(served.ok());
  ::close(fds[0]);
}

namespace {

// What the agent registered: a checkpoint whose process used GPU-0 through /dev/nvidia0.
CheckpointGpuRecord checkpoint_on_gpu0() {
  CheckpointGpuRecord record;
  record.checkpoint_id = "ck-1";
  record.record.node = two_gpus();
  record.record.used_gpu_ids = {"GPU-0"};
  record.devices = {{"/dev/nvidia0", 195, 0, "GPU-0"}, {"/dev/nvidiactl", 195, 255, ""}};
  record.gpu_env = {{"NVIDIA_VISIBLE_DEVICES", "GPU-0"}};
  return record;
}

void set_pod(api::CreateContainerRequest& request) {
  request.mutable_pod()->set_namespace_("ml");
  request.mutable_pod()->set_name("trainer-0");
  request.mutable_pod()->set_uid("0b9e");
  request.mutable_container()->set_name("trainer");
}

void add_gpu_device(api::Container& c, const std::string& path, int minor) {
  auto* d = c.mutable_linux()->add_devices();
  d->set_path(path);
  d->set_type("c");
  d->set_major(195);
  d->set_minor(minor);
}

// containerd 2.1.9's CreateContainer of a restore, as NRI shows it: the spec's io.kubernetes.cri.* annotations
// (image-name is the checkpoint's base image) merged with the CRI annotations (the original container's, and
// restored/checkpointedAt/checkpointImage), and the devices and env the device plugin gave the new pod: GPU
// `minor` at `path`.
api::CreateContainerRequest containerd_restore(const std::string& checkpoint_image, const std::string& path, int minor,
                                               const std::string& carried_id = "") {
  api::CreateContainerRequest request;
  set_pod(request);
  auto* c = request.mutable_container();
  c->set_id("restored-ctrd");
  auto& a = *c->mutable_annotations();
  a["io.kubernetes.cri.container-type"] = "container";
  a["io.kubernetes.cri.image-name"] = "docker.io/library/python:3.12";
  a["io.kubernetes.cri.sandbox-name"] = "trainer-0";
  a["io.kubernetes.container.hash"] = "a1b2";
  a["restored"] = "true";
  a["checkpointedAt"] = "2026-11-26T06:00:00Z";
  a["checkpointImage"] = checkpoint_image;
  if (!carried_id.empty()) a["io.gpuckpt.checkpoint-id"] = carried_id;
  c->add_env("PATH=/usr/bin");
  if (minor >= 0) {
    c->add_env("NVIDIA_VISIBLE_DEVICES=GPU-" + std::to_string(minor));
    add_gpu_device(*c, path, minor);
  }
  return request;
}

// CRI-O's CreateContainer of a restore: the original container's annotations (io.gpuckpt.checkpoint-id carried
// from spec.dump's io.kubernetes.cri-o.Annotations), ImageName the rootfs image, no devices and no env.
api::CreateContainerRequest crio_restore(const std::string& carried_id, const std::string& image_name) {
  api::CreateContainerRequest request;
  set_pod(request);
  auto* c = request.mutable_container();
  c->set_id("restored-crio");
  auto& a = *c->mutable_annotations();
  a["io.kubernetes.cri-o.ImageName"] = image_name;
  a["io.kubernetes.cri-o.ContainerType"] = "container";
  a["io.kubernetes.container.hash"] = "a1b2";
  if (!carried_id.empty()) {
    a["io.kubernetes.cri-o.Annotations"] = R"({"io.kubernetes.container.hash":"a1b2","io.gpuckpt.checkpoint-id":")" +
                                           carried_id + "\"}";
    a["io.gpuckpt.checkpoint-id"] = carried_id;
  } else {
    a["io.kubernetes.cri-o.Annotations"] = R"({"io.kubernetes.container.hash":"a1b2"})";
  }
  c->add_env("PATH=/usr/bin");
  return request;
}

// The kubelet's PodResources answer for ml/trainer-0's container "trainer": `ids` of nvidia.com/gpu.
AllocationReader kubelet_allocates(std::vector<std::string> ids, std::vector<ContainerIdentity>* asked = nullptr) {
  return [ids, asked](const ContainerIdentity& who) -> Result<std::optional<std::vector<DeviceAllocation>>> {
    if (asked) asked->push_back(who);
    if (who.pod_namespace != "ml" || who.pod_name != "trainer-0" || who.container_name != "trainer")
      return std::optional<std::vector<DeviceAllocation>>();
    return std::optional<std::vector<DeviceAllocation>>(std::vector<DeviceAllocation>{{"nvidia.com/gpu", ids}});
  };
}

NriPlugin plugin_with(const fs::path& state, AllocationReader allocation, NodeInventory node = two_gpus()) {
  NriPluginOptions options;
  options.state_dir = state;
  options.hook_path = "/opt/gpuckpt/bin/gpuckpt-oci-hook";
  options.allocation = std::move(allocation);
  return NriPlugin(options, [node] { return Result<NodeInventory>(node); }, numbers);
}

api::ContainerAdjustment adjusted(NriPlugin& plugin, const api::CreateContainerRequest& request) {
  auto answer = plugin.handle("CreateContainer", request.SerializeAsString());
  INFO((answer ? std::string() : answer.error().message));
  REQUIRE(answer.ok());
  api::CreateContainerResponse response;
  REQUIRE(response.ParseFromString(answer.value()));
  return response.adjust();
}

std::string refusal(NriPlugin& plugin, const api::CreateContainerRequest& request) {
  auto answer = plugin.handle("CreateContainer", request.SerializeAsString());
  REQUIRE_FALSE(answer.ok());
  return answer.error().message;
}

// "path major:minor" of each device the adjustment adds, "-path" of each it removes, in order.
std::vector<std::string> device_changes(const api::ContainerAdjustment& adjust) {
  std::vector<std::string> out;
  for (const auto& d : adjust.linux().devices())
    out.push_back(d.path().front() == '-' ? d.path()
                                          : d.path() + " " + std::to_string(d.major()) + ":" + std::to_string(d.minor()));
  return out;
}

RestorePlan plan_of(const fs::path& state, const api::ContainerAdjustment& adjust) {
  const auto plan = read_restore_plan(state, adjust.annotations().at(kAnnotationRestorePlan));
  REQUIRE(plan.ok());
  REQUIRE(plan.value());
  return *plan.value();
}

std::size_t plan_count(const fs::path& state) {
  std::error_code ec;
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(state / "restore-plans", ec)) ++n;
  return n;
}

}  // namespace

TEST_CASE("containerd 2.1.9's restore from a registered checkpoint image gets the pod's GPU under its own name",
          "[unit]") {
  test::TempDir tmp;
  REQUIRE(register_checkpoint_image(tmp.path, "localhost/gpuckpt-checkpoint:ck-1", "sha256:ab", checkpoint_on_gpu0()).ok());
  auto plugin = plugin_with(tmp.path, nullptr);   // no PodResources: the devices containerd kept count
  // The device plugin gave GPU-1 under the name /dev/nvidia0, the source GPU's name: that node goes, GPU-1's
  // node comes under its own name (NVIDIA's driver reopens /dev/nvidia<minor>), the shared node follows.
  const auto adjust = adjusted(plugin, containerd_restore("localhost/gpuckpt-checkpoint:ck-1", "/dev/nvidia0", 1));
  CHECK(device_changes(adjust) == std::vector<std::string>{"-/dev/nvidia0", "/dev/nvidia1 195:1", "/dev/nvidiactl 195:255"});
  for (const auto& d : adjust.linux().devices())
    if (d.path().front() != '-') CHECK(d.file_mode().value() == 0666);   // NRI adds the cgroup rule "rw" from it
  REQUIRE(adjust.env_size() == 1);
  CHECK(adjust.env(0).key() == "NVIDIA_VISIBLE_DEVICES");
  CHECK(adjust.env(0).value() == "GPU-1");
  const RestorePlan plan = plan_of(tmp.path, adjust);
  CHECK(plan.checkpoint_id == "ck-1");
  CHECK(plan.container_id == "restored-ctrd");
  const auto now = static_cast<std::int64_t>(std::time(nullptr));
  CHECK(plan.expires_at > now);
  CHECK(plan.expires_at <= now + 601);
  REQUIRE(plan.assignments.size() == 1);
  CHECK(plan.assignments[0].target_id == "GPU-1");
  REQUIRE(adjust.hooks().create_runtime_size() == 1);   // containerd has no hooks.d: the hook comes with NRI
  CHECK(adjust.hooks().create_runtime(0).path() == "/opt/gpuckpt/bin/gpuckpt-oci-hook");
  // The name as the pod wrote it, normalised the way containerd names images, finds the same entry.
  REQUIRE(register_checkpoint_image(tmp.path, "ck:1", "", checkpoint_on_gpu0()).ok());
  CHECK(adjusted(plugin, containerd_restore("docker.io/library/ck:1", "/dev/nvidia1", 1)).annotations().count(kAnnotationRestorePlan));
  CHECK(normalise_image_reference("ck") == "docker.io/library/ck:latest");
  CHECK(normalise_image_reference("localhost/x/y:2") == "localhost/x/y:2");
  CHECK(normalise_image_reference("registry.example:5000/a/b") == "registry.example:5000/a/b:latest");
}

TEST_CASE("containerd's restore from a kubelet archive acts only on the archive the agent annotated, unchanged",
          "[unit]") {
  test::TempDir tmp;
  const fs::path archive = tmp.path / "checkpoint-trainer-0_ml-trainer-2026-11-26T06:00:00Z.tar";
  write_file(archive, "an archive the agent annotated");
  CheckpointGpuRecord record = checkpoint_on_gpu0();
  record.checkpoint_id = "kubelet-checkpoint-trainer-0_ml-trainer-2026-11-26T06-00-00Z";
  REQUIRE(register_kubelet_archive(tmp.path, archive, record).ok());
  auto plugin = plugin_with(tmp.path, kubelet_allocates({"GPU-1"}));
  const auto adjust = adjusted(plugin, containerd_restore(archive.string(), "/dev/nvidia1", 1, record.checkpoint_id));
  CHECK(plan_of(tmp.path, adjust).checkpoint_id == record.checkpoint_id);
  // The archive carries another checkpoint's id: not the archive the agent registered.
  CHECK(refusal(plugin, containerd_restore(archive.string(), "/dev/nvidia1", 1, "ck-other")).find("ck-other") !=
        std::string::npos);
  // Rewritten after the agent annotated it: its record may not describe it any more.
  write_file(archive, "another archive under the same name");
  CHECK(refusal(plugin, containerd_restore(archive.string(), "/dev/nvidia1", 1)).find("changed after the agent annotated") !=
        std::string::npos);
  // An archive the agent never annotated is a restore gpuckpt has no part in.
  CHECK(adjusted(plugin, containerd_restore((tmp.path / "other.tar").string(), "/dev/nvidia1", 1)).ByteSizeLong() == 0);
}

TEST_CASE("CRI-O's restore (devices and env dropped, ImageName the rootfs image) gets the kubelet's allocation",
          "[unit]") {
  test::TempDir tmp;
  REQUIRE(register_checkpoint_image(tmp.path, "localhost/gpuckpt-checkpoint:ck-1", "sha256:ab", checkpoint_on_gpu0()).ok());
  std::vector<ContainerIdentity> asked;
  auto plugin = plugin_with(tmp.path, kubelet_allocates({"GPU-1"}, &asked));
  const auto adjust = adjusted(plugin, crio_restore("ck-1", "docker.io/library/python:3.12"));
  REQUIRE(asked.size() == 1);
  CHECK(asked[0].pod_uid == "0b9e");
  CHECK(device_changes(adjust) == std::vector<std::string>{"/dev/nvidia1 195:1", "/dev/nvidiactl 195:255"});
  REQUIRE(adjust.env_size() == 1);
  CHECK(adjust.env(0).value() == "GPU-1");
  const RestorePlan plan = plan_of(tmp.path, adjust);
  CHECK(plan.container_id == "restored-crio");
  CHECK(plan.assignments.at(0).target_id == "GPU-1");
  // A checkpoint id the agent never registered on this node: not gpuckpt's restore, left alone.
  CHECK(adjusted(plugin, crio_restore("ck-elsewhere", "docker.io/library/python:3.12")).ByteSizeLong() == 0);
}

TEST_CASE("a restore whose GPUs are unknown is refused with what is missing, never given any GPU of the node",
          "[unit]") {
  test::TempDir tmp;
  REQUIRE(register_checkpoint_image(tmp.path, "localhost/gpuckpt-checkpoint:ck-1", "", checkpoint_on_gpu0()).ok());
  const auto request = crio_restore("ck-1", "docker.io/library/python:3.12");
  {
    auto plugin = plugin_with(tmp.path, nullptr);
    const std::string why = refusal(plugin, request);
    CHECK(why.find("refused") != std::string::npos);
    CHECK(why.find("pod ml/trainer-0 container trainer") != std::string::npos);
    CHECK(why.find("--pod-resources-socket") != std::string::npos);
    CHECK(why.find("CRI-O drops them") != std::string::npos);
  }
  {
    auto plugin = plugin_with(tmp.path, [](const ContainerIdentity&) {
      return Result<std::optional<std::vector<DeviceAllocation>>>(std::optional<std::vector<DeviceAllocation>>());
    });
    CHECK(refusal(plugin, request).find("does not list the container") != std::string::npos);
  }
  {
    auto plugin = plugin_with(tmp.path, [](const ContainerIdentity&) -> Result<std::optional<std::vector<DeviceAllocation>>> {
      return make_error("connect /var/lib/kubelet/pod-resources/kubelet.sock: no such file");
    });
    CHECK(refusal(plugin, request).find("kubelet.sock") != std::string::npos);
  }
  {
    auto plugin = plugin_with(tmp.path, kubelet_allocates({"GPU-9f3a"}));   // a device the inventory does not know
    CHECK(refusal(plugin, request).find("allocated no GPU of this node") != std::string::npos);
  }
  CHECK(plan_count(tmp.path) == 0);
}

TEST_CASE("the kubelet's allocation wins over the request's devices, and nothing outside it is given", "[unit]") {
  test::TempDir tmp;
  REQUIRE(register_checkpoint_image(tmp.path, "localhost/gpuckpt-checkpoint:ck-1", "", checkpoint_on_gpu0()).ok());
  // The request names GPU-0 at /dev/nvidia0, the kubelet allocated GPU-1: GPU-1 it is, GPU-0's node goes.
  auto plugin = plugin_with(tmp.path, kubelet_allocates({"GPU-1"}));
  const auto adjust = adjusted(plugin, containerd_restore("localhost/gpuckpt-checkpoint:ck-1", "/dev/nvidia0", 0));
  CHECK(device_changes(adjust) == std::vector<std::string>{"-/dev/nvidia0", "/dev/nvidia1 195:1", "/dev/nvidiactl 195:255"});
  CHECK(plan_of(tmp.path, adjust).assignments.at(0).target_id == "GPU-1");
  // The allocated GPU cannot take the checkpoint (another model): refused, not moved to the free GPU-0.
  auto node = two_gpus();
  node.gpus[1].name = "NVIDIA A100";
  auto strict = plugin_with(tmp.path, kubelet_allocates({"GPU-1"}), node);
  const std::string why = refusal(strict, crio_restore("ck-1", "docker.io/library/python:3.12"));
  CHECK(why.find("none of the GPUs it was given") != std::string::npos);
}

TEST_CASE("an ordinary container of an image whose name is registered is left as the runtime made it", "[unit]") {
  test::TempDir tmp;
  REQUIRE(register_checkpoint_image(tmp.path, "localhost/gpuckpt-checkpoint:ck-1", "", checkpoint_on_gpu0()).ok());
  REQUIRE(register_checkpoint_image(tmp.path, "busybox", "", checkpoint_on_gpu0()).ok());
  auto plugin = plugin_with(tmp.path, kubelet_allocates({"GPU-1"}));
  for (const std::string image : {"localhost/gpuckpt-checkpoint:ck-1", "docker.io/library/busybox:latest"}) {
    INFO(image);
    api::CreateContainerRequest containerd;
    set_pod(containerd);
    containerd.mutable_container()->set_id("plain-ctrd");
    (*containerd.mutable_container()->mutable_annotations())["io.kubernetes.cri.container-type"] = "container";
    (*containerd.mutable_container()->mutable_annotations())["io.kubernetes.cri.image-name"] = image;
    CHECK(adjusted(plugin, containerd).ByteSizeLong() == 0);
    CHECK(adjusted(plugin, crio_restore("", image)).ByteSizeLong() == 0);
  }
  CHECK(plan_count(tmp.path) == 0);
}

TEST_CASE("Synchronize records the GPU containers that already run, reading the inventory once", "[unit]") {
  test::TempDir tmp;
  int reads = 0;
  NriPluginOptions options;
  options.state_dir = tmp.path;
  NriPlugin plugin(options, [&] { ++reads; return Result<NodeInventory>(two_gpus()); }, numbers);
  api::SynchronizeRequest sync;
  *sync.add_containers() = gpu_container("s1", 0);
  *sync.add_containers() = gpu_container("s2", 1);
  sync.add_containers()->set_id("plain");
  REQUIRE(plugin.handle("Synchronize", sync.SerializeAsString()).ok());
  CHECK(reads == 1);
  CHECK(read_container_state(tmp.path, "s1").value()->gpus.record.used_gpu_ids == std::vector<std::string>{"GPU-0"});
  CHECK(read_container_state(tmp.path, "s2").value()->gpus.record.used_gpu_ids == std::vector<std::string>{"GPU-1"});
  CHECK_FALSE(read_container_state(tmp.path, "plain").value());
}

TEST_CASE("NRI frames on connections NRI does not have are refused, so the peer cannot make buffers per id", "[unit]") {
  // Before: 300 invented connection ids, each with a partial message, kept 300 buffers (316 MB with 1 MiB each).
  MuxDecoder decoder;
  const std::string partial = encode_ttrpc({1, MessageType::Request, 0, std::string(64, 'x')}).substr(0, 20);
  REQUIRE(decoder.feed(encode_mux_frame(kPluginServiceConn, partial)).ok());
  REQUIRE(decoder.feed(encode_mux_frame(kRuntimeServiceConn, partial)).ok());
  for (std::uint32_t conn : {0u, 3u, 300u, 0xffffffffu}) {
    MuxDecoder fresh;
    auto fed = fresh.feed(encode_mux_frame(conn, partial));
    REQUIRE_FALSE(fed.ok());
    CHECK(fed.error().errno_value == EPROTO);
    CHECK(fed.error().message.find("which NRI does not have") != std::string::npos);
  }
}
