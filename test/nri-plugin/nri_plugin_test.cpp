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
#include "oci-hook/container_store.h"
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
    GpuDevice g;
    g.id = "GPU-" + std::to_string(i);
    g.uuid = g.id;
    g.vendor = GpuVendor::Nvidia;
    g.name = "NVIDIA H200";
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
  CHECK_FALSE(created.has_adjust());   // observed, not changed
  auto state = hook::read_container_state(tmp.path, "c1");
  REQUIRE(state.ok());
  REQUIRE(state.value());
  CHECK(state.value()->gpus.record.used_gpu_ids == std::vector<std::string>{"GPU-1"});
  CHECK(state.value()->gpus.gpu_env.at("NVIDIA_VISIBLE_DEVICES") == "1");
  CHECK(state.value()->annotations.at("io.kubernetes.cri.sandbox-name") == "trainer-0");

  api::CreateContainerRequest plain;
  plain.mutable_container()->set_id("c2");
  REQUIRE(plugin.handle("CreateContainer", plain.SerializeAsString()).ok());
  CHECK_FALSE(hook::read_container_state(tmp.path, "c2").value());

  api::CreateContainerRequest hostile;
  *hostile.mutable_container() = gpu_container("../../etc/passwd", 0);
  REQUIRE(plugin.handle("CreateContainer", hostile.SerializeAsString()).ok());   // answered, nothing written
  CHECK_FALSE(fs::exists(tmp.path / "etc"));

  api::StateChangeEvent removed;
  removed.set_event(api::REMOVE_CONTAINER);
  removed.mutable_container()->set_id("c1");
  REQUIRE(plugin.handle("StateChange", removed.SerializeAsString()).ok());
  CHECK_FALSE(hook::read_container_state(tmp.path, "c1").value());

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
  CHECK(hook::read_container_state(tmp.path, "c9").value());
  CHECK(call(5, "Bogus", "").status().code() == 12);   // UNIMPLEMENTED, and the session goes on

  ::close(fds[1]);
  session.join();
  CHECK(served.ok());
  ::close(fds[0]);
}
