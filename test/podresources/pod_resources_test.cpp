// The PodResources client against podresources-server, which speaks the kubelet's real v1 proto.
#include <sys/socket.h>
#include <sys/un.h>

#include <catch2/catch_test_macros.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "podresources/pod_resources.h"
#include "test/podresources/podresources_server.h"

using namespace gpuckpt;
using namespace gpuckpt::test;
using nlohmann::json;

namespace {

constexpr const char* kGpu0 = "GPU-3df50d36-548a-08c1-7cd5-41ff6e7b3cad";
constexpr const char* kGpu1 = "GPU-cd626b4e-8c05-6521-8a3e-41d9ae0beccd";

json devices(const std::string& resource, const std::vector<std::string>& ids) {
  return {{"resource_name", resource}, {"device_ids", ids}};
}

// Vectors, not json: a one-element braced list would become the element itself, not an array of it.
json pod(const std::string& ns, const std::string& name, const std::vector<json>& containers) {
  return {{"namespace", ns}, {"name", name}, {"containers", containers}};
}

json container(const std::string& name, const std::vector<json>& device_list = {}) {
  return {{"name", name}, {"devices", device_list}};
}

json node(const std::vector<json>& pods) { return {{"pods", pods}}; }

// A node with a GPU pod (a training container on GPU 1, a sidecar without devices) and another pod on GPU 0.
std::string node_allocations(const std::string& training_gpu = kGpu1) {
  return node({pod("ml", "trainer", {container("sidecar"), container("train", {devices("nvidia.com/gpu", {training_gpu})})}),
               pod("default", "other", {container("c", {devices("nvidia.com/gpu", {kGpu0})})})})
      .dump();
}

PodResourcesOptions options_for(const PodResourcesServer& server, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  return PodResourcesOptions{server.socket(), timeout};
}

const ContainerIdentity kTrain{"ml", "trainer", "0b5e8a58-6d7e-4c52-9f4e-2f8f1b7d9a11", "train"};

std::vector<DeviceAllocation> allocation_ok(const PodResourcesOptions& options, const ContainerIdentity& identity) {
  auto result = container_allocation(options, identity);
  INFO((result.ok() ? std::string() : result.error().message));
  REQUIRE(result.ok());
  REQUIRE(result->has_value());
  return **result;
}

bool not_listed(const PodResourcesOptions& options, const ContainerIdentity& identity) {
  auto result = container_allocation(options, identity);
  INFO((result.ok() ? std::string() : result.error().message));
  REQUIRE(result.ok());
  return !result->has_value();
}

std::string error_of(const PodResourcesOptions& options, const ContainerIdentity& identity) {
  auto result = container_allocation(options, identity);
  REQUIRE_FALSE(result.ok());
  return result.error().message;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

using Calls = std::vector<std::string>;

}  // namespace

TEST_CASE("PodResources: Get answers the container's devices; the allocation is read again at every call", "[unit]") {
  PodResourcesServer server(node_allocations());
  auto allocation = allocation_ok(options_for(server), kTrain);
  REQUIRE(allocation.size() == 1);
  CHECK(allocation[0].resource_name == "nvidia.com/gpu");
  CHECK(allocation[0].device_ids == std::vector<std::string>{kGpu1});
  CHECK(server.calls() == Calls{"Get ml/trainer"});

  server.set_allocations(node_allocations(kGpu0));   // the kubelet allocated GPU 0 to the re-created pod
  allocation = allocation_ok(options_for(server), kTrain);
  REQUIRE(allocation.size() == 1);
  CHECK(allocation[0].device_ids == std::vector<std::string>{kGpu0});

  // A container of the pod without devices: listed, with nothing allocated (not "unknown").
  CHECK(allocation_ok(options_for(server), {"ml", "trainer", "", "sidecar"}).empty());
}

TEST_CASE("PodResources: the kubelet's one-entry-per-device answer is merged per resource, in the kubelet's order",
          "[unit]") {
  // What a kubelet's device manager sends: one ContainerDevices per device (each with its NUMA node).
  PodResourcesServer server(node({pod("ml", "trainer",
                                      {container("train", {devices("nvidia.com/gpu", {kGpu1}),
                                                           devices("example.com/nic", {"vf-3"}),
                                                           devices("nvidia.com/gpu", {kGpu0}),
                                                           devices("nvidia.com/gpu", {kGpu1})})})})
                                .dump());
  const auto allocation = allocation_ok(options_for(server), kTrain);
  REQUIRE(allocation.size() == 2);
  CHECK(allocation[0].resource_name == "nvidia.com/gpu");
  CHECK(allocation[0].device_ids == std::vector<std::string>{kGpu1, kGpu0});
  CHECK(allocation[1].resource_name == "example.com/nic");
  CHECK(allocation[1].device_ids == std::vector<std::string>{"vf-3"});
}

TEST_CASE("PodResources: DRA devices of the container's claims follow the device plugins', with their CDI names",
          "[unit]") {
  json train = container("train", {devices("nvidia.com/gpu", {kGpu0})});
  train["dynamic_resources"] = json::parse(R"([{"claim_namespace": "ml", "claim_name": "big-gpu", "claim_resources": [
      {"driver_name": "gpu.nvidia.com", "pool_name": "node-a", "device_name": "gpu-1",
       "cdi_devices": ["k8s.gpu.nvidia.com/device=uid-gpu-1", "nvidia.com/gpu=1"]},
      {"driver_name": "net.example.com", "pool_name": "node-a"}]}])");   // DRA's other kinds: no device
  PodResourcesServer server(node({pod("ml", "trainer", {train})}).dump());
  for (const std::string flag : {"", "--no-get"}) {
    INFO("flag " << flag);
    PodResourcesServer answering(node({pod("ml", "trainer", {train})}).dump(),
                                 flag.empty() ? std::vector<std::string>{} : std::vector<std::string>{flag});
    const auto allocation = allocation_ok(options_for(answering), kTrain);
    REQUIRE(allocation.size() == 2);
    CHECK_FALSE(allocation[0].dynamic());
    CHECK(allocation[0].device_ids == std::vector<std::string>{kGpu0});
    CHECK(allocation[1].dynamic());
    CHECK(allocation[1].resource_name == "gpu.nvidia.com");
    CHECK(allocation[1].claim == "ml/big-gpu");
    CHECK(allocation[1].device_ids == std::vector<std::string>{"node-a/gpu-1"});
    CHECK(allocation[1].cdi_devices ==
          std::vector<std::string>{"k8s.gpu.nvidia.com/device=uid-gpu-1", "nvidia.com/gpu=1"});
  }

  // A claim without a name, a device without a driver: malformed, never half an allocation.
  json nameless = container("train");
  nameless["dynamic_resources"] =
      json::parse(R"([{"claim_namespace": "ml", "claim_resources": [{"driver_name": "d", "device_name": "x"}]}])");
  server.set_allocations(node({pod("ml", "trainer", {nameless})}).dump());
  CHECK(contains(error_of(options_for(server), kTrain), "DRA claim without a name"));
  json driverless = container("train");
  driverless["dynamic_resources"] =
      json::parse(R"([{"claim_namespace": "ml", "claim_name": "c", "claim_resources": [{"device_name": "x"}]}])");
  server.set_allocations(node({pod("ml", "trainer", {driverless})}).dump());
  CHECK(contains(error_of(options_for(server), kTrain), "claim ml/c has a device without a driver name"));

  // Bounded like device ids: CDI names count too.
  json many = container("train");
  std::vector<std::string> names(static_cast<std::size_t>(kPodResourcesMaxDevicesPerContainer), "v.com/c=n");
  many["dynamic_resources"] =
      json::parse(R"([{"claim_namespace": "ml", "claim_name": "c", "claim_resources": [{"driver_name": "d", "device_name": "x"}]}])");
  many["dynamic_resources"][0]["claim_resources"][0]["cdi_devices"] = names;
  server.set_allocations(node({pod("ml", "trainer", {many})}).dump());
  CHECK(contains(error_of(options_for(server), kTrain), "DRA devices and CDI names"));
}

TEST_CASE("PodResources: a kubelet without Get (UNIMPLEMENTED) or with it disabled (UNKNOWN) is asked with List",
          "[unit]") {
  for (const std::string flag : {"--no-get", "--get-disabled"}) {
    INFO(flag);
    PodResourcesServer server(node_allocations(), {flag});
    const auto allocation = allocation_ok(options_for(server), kTrain);
    REQUIRE(allocation.size() == 1);
    CHECK(allocation[0].device_ids == std::vector<std::string>{kGpu1});
    CHECK(server.calls() == Calls{"Get ml/trainer", "List"});

    CHECK(not_listed(options_for(server), {"ml", "gone", "", "train"}));
    CHECK(not_listed(options_for(server), {"ml", "trainer", "", "eval"}));
  }
}

TEST_CASE("PodResources: a pod or container the kubelet does not list is nullopt, not an error", "[unit]") {
  PodResourcesServer server(node_allocations());
  // The kubelet answers Get for an unknown pod with a plain error (UNKNOWN "pod ... not found"); List settles it.
  CHECK(not_listed(options_for(server), {"ml", "gone", "", "train"}));
  CHECK(server.calls() == Calls{"Get ml/gone", "List"});
  CHECK(not_listed(options_for(server), {"default", "trainer", "", "train"}));   // same pod name, other namespace
  CHECK(not_listed(options_for(server), {"ml", "trainer", "", "eval"}));
  CHECK(server.calls() == Calls{"Get default/trainer", "List", "Get ml/trainer"});
}

TEST_CASE("PodResources: no socket, not a socket, a link, nobody listening: errors naming the socket", "[unit]") {
  TempDir dir("gpuckpt-podres");
  const std::string path = (dir.path / "kubelet.sock").string();
  PodResourcesOptions options{path, std::chrono::seconds(5)};

  auto message = error_of(options, kTrain);
  CHECK(contains(message, "no kubelet PodResources socket at " + path));
  CHECK(contains(message, "hostPath"));

  std::ofstream(path) << "not a socket";
  message = error_of(options, kTrain);
  CHECK(contains(message, path + " is a regular file, not a unix socket"));
  std::filesystem::remove(path);

  // A link to a live kubelet socket is still refused: the path must be the socket itself.
  PodResourcesServer server(node_allocations());
  std::filesystem::create_symlink(server.socket(), path);
  message = error_of(options, kTrain);
  CHECK(contains(message, path + " is a symbolic link"));
  CHECK(server.calls().empty());
  std::filesystem::remove(path);

  // A socket left behind by a stopped kubelet: bound, nobody listening.
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  REQUIRE(fd >= 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  path.copy(address.sun_path, sizeof address.sun_path - 1);
  REQUIRE(::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) == 0);
  message = error_of(options, kTrain);
  ::close(fd);
  CHECK(contains(message, "nothing answers on " + path));
  CHECK(contains(message, "is the kubelet running"));

  CHECK(contains(error_of({"kubelet.sock", std::chrono::seconds(1)}, kTrain), "not an absolute path"));
  CHECK(contains(error_of({"/" + std::string(200, 'd') + "/kubelet.sock", std::chrono::seconds(1)}, kTrain),
                 "longer than a unix socket path may be"));
}

TEST_CASE("PodResources: a kubelet slower than the timeout is an error once the timeout has passed", "[unit]") {
  for (const std::vector<std::string>& flags : {std::vector<std::string>{"--delay-ms", "60000"},
                                               std::vector<std::string>{"--no-get", "--delay-ms", "60000"}}) {
    PodResourcesServer server(node_allocations(), flags);
    const auto started = std::chrono::steady_clock::now();
    const auto message = error_of(options_for(server, std::chrono::milliseconds(300)), kTrain);
    const auto waited = std::chrono::steady_clock::now() - started;
    CHECK(contains(message, "kubelet PodResources Get on " + server.socket()));
    CHECK(contains(message, "DEADLINE_EXCEEDED"));
    CHECK(contains(message, "no answer within 300 ms"));
    // Bounded by the deadline, not by the server (which would answer after a minute); the Get that ran out of
    // time is not followed by a List.
    CHECK(waited < std::chrono::seconds(30));
    CHECK(server.calls() == Calls{"Get ml/trainer"});
  }
}

TEST_CASE("PodResources: malformed or oversized answers are errors, never a partial allocation", "[unit]") {
  struct Case {
    std::string name;
    json node;
    std::vector<std::string> flags;
    std::string expected;
  };
  std::vector<json> many_pods;
  for (int i = 0; i <= kPodResourcesMaxPods; ++i) many_pods.push_back(pod("ns", "p" + std::to_string(i), {}));
  std::vector<std::string> many_ids;
  for (int i = 0; i <= kPodResourcesMaxDevicesPerContainer; ++i) many_ids.push_back("dev-" + std::to_string(i));
  // Over the 4 MiB the client reads: 5 ids of 1 MiB.
  const std::vector<std::string> huge_ids(5, std::string(1 << 20, 'x'));
  const std::vector<Case> cases = {
      {"container listed twice", node({pod("ml", "trainer", {container("train"), container("train")})}), {},
       "lists container train twice"},
      {"empty device id", node({pod("ml", "trainer", {container("train", {devices("nvidia.com/gpu", {""})})})}), {},
       "empty nvidia.com/gpu device id"},
      {"empty resource name", node({pod("ml", "trainer", {container("train", {devices("", {kGpu0})})})}), {},
       "device without a resource name"},
      {"pod listed twice by List", node({pod("ml", "trainer", {container("train")}), pod("ml", "trainer", {container("train")})}),
       {"--no-get"}, "lists pod ml/trainer twice"},
      {"too many pods", node(many_pods), {"--no-get"}, "lists 5001 pods; gpuckpt reads at most 5000"},
      {"too many devices", node({pod("ml", "trainer", {container("train", {devices("example.com/x", many_ids)})})}), {},
       "lists 1025 devices for container train of pod ml/trainer; gpuckpt reads at most 1024"},
      {"answer over 4 MiB", node({pod("ml", "trainer", {container("train", {devices("example.com/x", huge_ids)})})}), {},
       "RESOURCE_EXHAUSTED"},
  };
  for (const auto& c : cases) {
    INFO(c.name);
    PodResourcesServer server(c.node.dump(), c.flags);
    const auto message = error_of(options_for(server), kTrain);
    INFO(message);
    CHECK(contains(message, c.expected));
    CHECK(contains(message, server.socket()));
  }

  // Get failing for another reason than "not served" is an error, not a reason to ask List.
  PodResourcesServer broken("{\"pods\": [");
  const auto message = error_of(options_for(broken), kTrain);
  CHECK(contains(message, "kubelet PodResources Get on " + broken.socket() + " failed"));
  CHECK(contains(message, "(INTERNAL)"));
  CHECK(broken.calls() == Calls{"Get ml/trainer"});
}

TEST_CASE("PodResources: an identity without a namespace, pod or container name is refused before asking", "[unit]") {
  PodResourcesServer server(node_allocations());
  for (const ContainerIdentity& identity : {ContainerIdentity{"", "trainer", "", "train"},
                                            ContainerIdentity{"ml", "", "", "train"},
                                            ContainerIdentity{"ml", "trainer", "", ""}}) {
    CHECK(contains(error_of(options_for(server), identity), "pod namespace, pod name and container name are all needed"));
  }
  CHECK(server.calls().empty());
}
