// gpuckpt-nri without a runtime: the wire format (mux frames carrying ttrpc messages, split anywhere), the
// plugin's answers, and a whole session over a socketpair with this test playing the runtime's side as NRI 0.6
// does (RegisterPlugin on connection 2, Configure/Synchronize/CreateContainer/StateChange on connection 1). The
// real containerd 1.7 plays it in test/e2e/containerd_flow.sh.
#include <catch2/catch_test_macros.hpp>

#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "nri-plugin/nri_plugin.h"
#include "nri-plugin/nri_session.h"
#include "nri-plugin/ttrpc_mux.h"
#include "common/checkpoint_images.h"
#include "common/restore_plan.h"
#include "common/container_store.h"
#include "test/common/gpu_builders.h"
#include "test/temp_dir.h"
#include "ttrpc/envelope.pb.h"

using namespace gpuckpt;
using namespace gpuckpt::nri;
namespace fs = std::filesystem;

namespace {

NodeInventory two_gpus() {
  NodeInventory inv;
  inv.hostname = "node-a";
  for (int i = 0; i < 2; ++i) {
    GpuDevice g = test::nvidia_gpu("GPU-" + std::to_string(i), "NVIDIA H200", 141);
    g.device_minor = i;
    g.device_paths = {"/dev/nvidia" + std::to_string(i)};
    inv.gpus.push_back(g);
  }
  return inv;
}

Result<std::pair<std::uint32_t, std::uint32_t>> numbers(const std::string& path) {
  if (path == "/dev/nvidia0") return std::make_pair(195u, 0u);
  if (path == "/dev/nvidia1") return std::make_pair(195u, 1u);
  return make_error("no device " + path);
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

// What the agent registered for a checkpoint image: the process used GPU-0 through /dev/nvidia0.
CheckpointGpuRecord checkpoint_on_gpu0() {
  CheckpointGpuRecord record;
  record.checkpoint_id = "ck-1";
  record.record.node = two_gpus();
  record.record.used_gpu_ids = {"GPU-0"};
  record.devices = {{"/dev/nvidia0", 195, 0, "GPU-0"}, {"/dev/nvidiactl", 195, 255, ""}};
  record.gpu_env = {{"NVIDIA_VISIBLE_DEVICES", "GPU-0"}};
  return record;
}

// A CreateContainer as CRI-O sends it when it restores from a checkpoint image: the spec rebuilt from spec.dump
// with CRI-O's own annotations only (io.gpuckpt.* dropped), no precreate hook before it, and the devices the
// device plugin allocated to the new pod: here GPU-1, mounted as the device plugin does (/dev/nvidia1).
api::CreateContainerRequest crio_restore(const std::string& image, const std::string& allocated_minor) {
  api::CreateContainerRequest request;
  auto* c = request.mutable_container();
  c->set_id("restored-1");
  c->set_name("trainer");
  (*c->mutable_annotations())["io.kubernetes.cri-o.ImageName"] = image;
  (*c->mutable_annotations())["io.kubernetes.cri-o.Annotations"] = R"({"io.kubernetes.container.hash":"1"})";
  (*c->mutable_annotations())["io.kubernetes.cri-o.ContainerType"] = "container";
  c->add_env("PATH=/usr/bin");
  if (!allocated_minor.empty()) {
    c->add_env("NVIDIA_VISIBLE_DEVICES=GPU-" + allocated_minor);
    auto* d = c->mutable_linux()->add_devices();
    d->set_path("/dev/nvidia" + allocated_minor);
    d->set_type("c");
    d->set_major(195);
    d->set_minor(std::stoi(allocated_minor));
  }
  return request;
}

}  // namespace

TEST_CASE("a CRI-O-shaped restore is adjusted to the GPUs the runtime gave the new container", "[unit]") {
  test::TempDir tmp;
  REQUIRE(register_checkpoint_image(tmp.path, "registry.example/ml/trainer-ck:1", checkpoint_on_gpu0()).ok());
  NriPluginOptions options;
  options.state_dir = tmp.path;
  options.hook_path = "/opt/gpuckpt/bin/gpuckpt-oci-hook";
  NriPlugin plugin(options, [] { return Result<NodeInventory>(two_gpus()); }, numbers);

  auto answer = plugin.handle("CreateContainer", crio_restore("registry.example/ml/trainer-ck:1", "1").SerializeAsString());
  REQUIRE(answer.ok());
  api::CreateContainerResponse response;
  REQUIRE(response.ParseFromString(answer.value()));
  const auto& adjust = response.adjust();
  // The processes used /dev/nvidia0 (GPU-0); they get GPU-1, the one the runtime allocated, under its own name
  // (NVIDIA's driver opens /dev/nvidia<minor> when it restores them).
  REQUIRE(adjust.linux().devices_size() == 1);
  CHECK(adjust.linux().devices(0).path() == "/dev/nvidia1");
  CHECK(adjust.linux().devices(0).major() == 195);
  CHECK(adjust.linux().devices(0).minor() == 1);
  REQUIRE(adjust.env_size() == 1);
  CHECK(adjust.env(0).key() == "NVIDIA_VISIBLE_DEVICES");
  CHECK(adjust.env(0).value() == "GPU-1");
  // The plan reaches the CRIU plugin through the agent's state dir, named by an id the plugin made.
  const std::string plan_id = adjust.annotations().at(kAnnotationRestorePlan);
  CHECK(is_restore_plan_id(plan_id));
  auto plan = read_restore_plan(tmp.path, plan_id);
  REQUIRE(plan.ok());
  REQUIRE(plan.value());
  REQUIRE(plan.value()->assignments.size() == 1);
  CHECK(plan.value()->assignments[0].source_id == "GPU-0");
  CHECK(plan.value()->assignments[0].target_id == "GPU-1");
  REQUIRE(adjust.hooks().create_runtime_size() == 1);   // containerd has no hooks.d: the hook comes with NRI
  CHECK(adjust.hooks().create_runtime(0).path() == "/opt/gpuckpt/bin/gpuckpt-oci-hook");
}

TEST_CASE("restore adjustment: no allocation falls back to the matcher; an allocation that cannot take it refuses",
          "[unit]") {
  test::TempDir tmp;
  REQUIRE(register_checkpoint_image(tmp.path, "ck:1", checkpoint_on_gpu0()).ok());
  auto plugin = make_plugin(tmp.path);

  // No GPU given to the container: the matcher chooses on the whole node (the same GPU, no move).
  api::CreateContainerResponse free_choice;
  REQUIRE(free_choice.ParseFromString(plugin.handle("CreateContainer", crio_restore("ck:1", "").SerializeAsString()).value()));
  const auto free_plan = read_restore_plan(tmp.path, free_choice.adjust().annotations().at(kAnnotationRestorePlan));
  REQUIRE(free_plan.value());
  CHECK(free_plan.value()->assignments[0].target_id == "GPU-0");

  // The runtime gave it a GPU of another model: refused, with the reason.
  auto other = two_gpus();
  other.gpus[1].name = "NVIDIA A100";
  NriPlugin strict(NriPluginOptions{tmp.path, "/", {}, ""}, [other] { return Result<NodeInventory>(other); }, numbers);
  auto refused = strict.handle("CreateContainer", crio_restore("ck:1", "1").SerializeAsString());
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("refused") != std::string::npos);
  CHECK(refused.error().message.find("the GPUs it was given") != std::string::npos);

  // containerd names images normalised: "ck:1" was registered, "docker.io/library/ck:1" is what it reports.
  api::CreateContainerResponse normalised;
  REQUIRE(normalised.ParseFromString(
      plugin.handle("CreateContainer", crio_restore("docker.io/library/ck:1", "").SerializeAsString()).value()));
  CHECK(normalised.adjust().annotations().count(kAnnotationRestorePlan) == 1);
  CHECK(normalise_image_reference("ck") == "docker.io/library/ck:latest");
  CHECK(normalise_image_reference("localhost/x/y:2") == "localhost/x/y:2");
  CHECK(normalise_image_reference("registry.example:5000/a/b") == "registry.example:5000/a/b:latest");

  // An image nobody registered is an ordinary container: nothing adjusted.
  api::CreateContainerResponse ordinary;
  REQUIRE(ordinary.ParseFromString(plugin.handle("CreateContainer", crio_restore("other:1", "1").SerializeAsString()).value()));
  CHECK(ordinary.adjust().ByteSizeLong() == 0);
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
