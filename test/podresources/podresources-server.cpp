// podresources-server: a simulated kubelet for tests. It serves the kubelet's PodResources API (gRPC v1, the
// vendored k8s.io/kubelet/pkg/apis/podresources/v1/api.proto: List, Get, GetAllocatableResources) on a unix
// socket, with the allocations in a JSON file that it reads again for every request, so a test changes the
// allocation between calls by rewriting the file (write a temporary file and rename it over the old one).
//
//   podresources-server [--no-get] [--get-disabled] [--delay-ms N] SOCKET ALLOCATIONS.json
//
//   SOCKET             unix socket path to listen on (a stale socket there is replaced; its directory must exist)
//   ALLOCATIONS.json   {"pods": [{"namespace": "default", "name": "p", "containers": [{"name": "c",
//                        "devices": [{"resource_name": "nvidia.com/gpu", "device_ids": ["GPU-..."]}],
//                        "dynamic_resources": [{"claim_namespace": "ml", "claim_name": "gpu",
//                          "claim_resources": [{"driver_name": "gpu.example.com", "pool_name": "node-a",
//                            "device_name": "gpu-0", "cdi_devices": ["example.com/gpu=claim-gpu-0"]}]}]}]}],
//                       "allocatable": [{"resource_name": "nvidia.com/gpu", "device_ids": ["GPU-...", ...]}]}
//                      ("allocatable", "containers", "devices", "dynamic_resources" and every field of a claim
//                      resource may be left out)
//   --no-get           answer Get with UNIMPLEMENTED, as kubelets before 1.27 (which have no Get) do
//   --get-disabled     answer Get with UNKNOWN "PodResources API Get method disabled", as kubelets 1.27-1.33 do
//                      with their KubeletPodResourcesGet feature gate off (the default there)
//   --delay-ms N       wait N ms before answering each request (a slow or hung kubelet)
//
// Like the kubelet, Get for a pod it does not list answers UNKNOWN "pod NAME in namespace NS not found". An
// unreadable or malformed ALLOCATIONS.json is answered with INTERNAL naming the file.
// Output: "listening" on stdout once the socket accepts calls, then one line per request ("Get NS/NAME", "List",
// "GetAllocatableResources") so a test sees which calls a client made. SIGTERM or SIGINT: stops, removes the
// socket, exits 0. Exit 2: bad command line; 1: cannot listen.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "k8s.io/kubelet/pkg/apis/podresources/v1/api.grpc.pb.h"

namespace {

struct Settings {
  std::string socket;
  std::string allocations;
  bool no_get = false;
  bool get_disabled = false;
  std::chrono::milliseconds delay{0};
};

void fill_devices(const nlohmann::json& list, google::protobuf::RepeatedPtrField<::v1::ContainerDevices>& out) {
  for (const auto& entry : list) {
    auto& devices = *out.Add();
    devices.set_resource_name(entry.at("resource_name").get<std::string>());
    for (const auto& id : entry.at("device_ids")) devices.add_device_ids(id.get<std::string>());
  }
}

void fill_pod(const nlohmann::json& pod, ::v1::PodResources& out) {
  out.set_namespace_(pod.at("namespace").get<std::string>());
  out.set_name(pod.at("name").get<std::string>());
  for (const auto& container : pod.value("containers", nlohmann::json::array())) {
    auto& resources = *out.add_containers();
    resources.set_name(container.at("name").get<std::string>());
    fill_devices(container.value("devices", nlohmann::json::array()), *resources.mutable_devices());
    for (const auto& claim : container.value("dynamic_resources", nlohmann::json::array())) {
      auto& dynamic = *resources.add_dynamic_resources();
      dynamic.set_claim_namespace(claim.value("claim_namespace", ""));
      dynamic.set_claim_name(claim.value("claim_name", ""));
      for (const auto& entry : claim.value("claim_resources", nlohmann::json::array())) {
        auto& resource = *dynamic.add_claim_resources();
        resource.set_driver_name(entry.value("driver_name", ""));
        resource.set_pool_name(entry.value("pool_name", ""));
        resource.set_device_name(entry.value("device_name", ""));
        for (const auto& cdi : entry.value("cdi_devices", nlohmann::json::array()))
          resource.add_cdi_devices()->set_name(cdi.get<std::string>());
      }
    }
  }
}

class Lister final : public ::v1::PodResourcesLister::Service {
 public:
  explicit Lister(Settings settings) : settings_(std::move(settings)) {}

  // Ends every --delay-ms wait now, so that shutting down does not wait for them.
  void stop() {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    stopped_.notify_all();
  }

  grpc::Status List(grpc::ServerContext*, const ::v1::ListPodResourcesRequest*,
                    ::v1::ListPodResourcesResponse* response) override {
    return answer("List", [&](const nlohmann::json& node) {
      for (const auto& pod : node.value("pods", nlohmann::json::array())) fill_pod(pod, *response->add_pod_resources());
      return grpc::Status::OK;
    });
  }

  grpc::Status Get(grpc::ServerContext*, const ::v1::GetPodResourcesRequest* request,
                   ::v1::GetPodResourcesResponse* response) override {
    return answer("Get " + request->pod_namespace() + "/" + request->pod_name(), [&](const nlohmann::json& node) {
      if (settings_.no_get)
        return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "unknown method Get for service v1.PodResourcesLister");
      if (settings_.get_disabled) return grpc::Status(grpc::StatusCode::UNKNOWN, "PodResources API Get method disabled");
      for (const auto& pod : node.value("pods", nlohmann::json::array()))
        if (pod.at("namespace") == request->pod_namespace() && pod.at("name") == request->pod_name()) {
          fill_pod(pod, *response->mutable_pod_resources());
          return grpc::Status::OK;
        }
      return grpc::Status(grpc::StatusCode::UNKNOWN,
                          "pod " + request->pod_name() + " in namespace " + request->pod_namespace() + " not found");
    });
  }

  grpc::Status GetAllocatableResources(grpc::ServerContext*, const ::v1::AllocatableResourcesRequest*,
                                       ::v1::AllocatableResourcesResponse* response) override {
    return answer("GetAllocatableResources", [&](const nlohmann::json& node) {
      fill_devices(node.value("allocatable", nlohmann::json::array()), *response->mutable_devices());
      return grpc::Status::OK;
    });
  }

 private:
  template <class Fill>
  grpc::Status answer(const std::string& call, Fill fill) {
    {
      std::unique_lock lock(mutex_);
      std::cout << call << std::endl;
      stopped_.wait_for(lock, settings_.delay, [&] { return stopping_; });
    }
    try {
      std::ifstream in(settings_.allocations);
      if (!in) return grpc::Status(grpc::StatusCode::INTERNAL, "cannot read " + settings_.allocations);
      return fill(nlohmann::json::parse(in));
    } catch (const nlohmann::json::exception& e) {
      return grpc::Status(grpc::StatusCode::INTERNAL, settings_.allocations + ": " + e.what());
    }
  }

  Settings settings_;
  std::mutex mutex_;                    // stdout and stopping_
  std::condition_variable stopped_;     // ends a --delay-ms wait at shutdown
  bool stopping_ = false;
};

int usage(const std::string& problem) {
  std::cerr << "podresources-server: " << problem
            << "\nusage: podresources-server [--no-get] [--get-disabled] [--delay-ms N] SOCKET ALLOCATIONS.json\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Settings settings;
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--no-get") {
      settings.no_get = true;
    } else if (arg == "--get-disabled") {
      settings.get_disabled = true;
    } else if (arg == "--delay-ms") {
      if (i + 1 >= argc) return usage("--delay-ms needs a number of milliseconds");
      char* end = nullptr;
      const long ms = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || ms < 0) return usage(std::string("--delay-ms: not a number of milliseconds: ") + argv[i]);
      settings.delay = std::chrono::milliseconds(ms);
    } else if (arg.rfind("--", 0) == 0) {
      return usage("unknown option " + arg);
    } else {
      positional.push_back(arg);
    }
  }
  if (positional.size() != 2) return usage("needs SOCKET and ALLOCATIONS.json");
  settings.socket = positional[0];
  settings.allocations = positional[1];

  // Blocked before gRPC starts its threads, so only the sigwait below receives them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  Lister lister(settings);
  grpc::ServerBuilder builder;
  builder.AddListeningPort("unix:" + settings.socket, grpc::InsecureServerCredentials());
  builder.RegisterService(&lister);
  const auto server = builder.BuildAndStart();
  if (!server) {
    std::cerr << "podresources-server: cannot listen on " << settings.socket << "\n";
    return 1;
  }
  std::cout << "listening" << std::endl;

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  lister.stop();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  ::unlink(settings.socket.c_str());
  return 0;
}
