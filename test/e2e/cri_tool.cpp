// cri-tool: drives a CRI runtime through the agent's CriClient, for the e2e tests (there is no crictl here, and
// the tests should exercise the client the agent uses). Pods run with host networking (no CNI on the test
// machine), in namespace "default", uid = pod name.
//   cri-tool ENDPOINT version
//   cri-tool ENDPOINT run-pod NAME                                   -> pod id
//   cri-tool ENDPOINT create POD_NAME POD_ID NAME IMAGE [--device HOST:CONTAINER]... [--env K=V]...
//            [--label K=V]... [--annotation K=V]... [--mount HOST:CONTAINER]... [--user-image IMAGE]
//            [-- CMD...]                                            -> container id
//            (--user-image: CRI user_specified_image, the pod's image as written when IMAGE is the id kubelet
//            got from ImageStatus; without "-- CMD" the request has no command, as for a pod that names none)
//   cri-tool ENDPOINT pull IMAGE                                     -> PullImage's image ref (as kubelet pulls)
//   cri-tool ENDPOINT image-id IMAGE                                 -> the id ImageStatus gives (kubelet's
//                                                                       ImageSpec.image for CreateContainer)
//   cri-tool ENDPOINT start|stop|rm|pid ID
//   cri-tool ENDPOINT stop-pod|rm-pod POD_ID
//   cri-tool ENDPOINT checkpoint ID LOCATION                        (exit 3: the runtime lacks the call)
//   cri-tool ENDPOINT list [K=V]...                                  -> "id name state" lines
#include <cstdio>
#include <string>
#include <vector>

#include "node/cri_client.h"
#include "rpc/grpc_unix.h"

namespace v1 = runtime::v1;
using gpuckpt::node::CriClient;
using gpuckpt::node::CriOptions;

namespace {

v1::PodSandboxConfig pod_config(const std::string& name) {
  v1::PodSandboxConfig pod;
  pod.mutable_metadata()->set_name(name);
  pod.mutable_metadata()->set_namespace_("default");
  pod.mutable_metadata()->set_uid(name);
  (*pod.mutable_labels())["io.kubernetes.pod.name"] = name;
  auto* namespaces = pod.mutable_linux()->mutable_security_context()->mutable_namespace_options();
  namespaces->set_network(v1::NODE);
  namespaces->set_pid(v1::CONTAINER);   // kubelet's default (no shareProcessNamespace)
  pod.set_log_directory("/tmp/" + name + "-logs");
  return pod;
}

std::pair<std::string, std::string> split(const std::string& s, char sep) {
  const auto at = s.find(sep);
  return at == std::string::npos ? std::pair{s, std::string()} : std::pair{s.substr(0, at), s.substr(at + 1)};
}

// PullImage and ImageStatus on the runtime's image service: the agent's client has no image calls (it needs none).
int pull_image(const std::string& endpoint, const std::string& image) {
  auto stub = v1::ImageService::NewStub(gpuckpt::unix_socket_channel(endpoint));
  v1::PullImageRequest request;
  request.mutable_image()->set_image(image);
  v1::PullImageResponse response;
  const auto status = gpuckpt::call_unary(*stub, &v1::ImageService::Stub::PullImage, request, response,
                                                 std::chrono::seconds(60));
  if (!status.ok()) {
    std::fprintf(stderr, "cri-tool: CRI PullImage %s: %s\n", image.c_str(), status.error_message().c_str());
    return 1;
  }
  std::printf("%s\n", response.image_ref().c_str());
  return 0;
}

int image_id(const std::string& endpoint, const std::string& image) {
  auto stub = v1::ImageService::NewStub(gpuckpt::unix_socket_channel(endpoint));
  v1::ImageStatusRequest request;
  request.mutable_image()->set_image(image);
  v1::ImageStatusResponse response;
  const auto status = gpuckpt::call_unary(*stub, &v1::ImageService::Stub::ImageStatus, request, response,
                                                 std::chrono::seconds(10));
  if (!status.ok()) {
    std::fprintf(stderr, "cri-tool: CRI ImageStatus %s: %s\n", image.c_str(), status.error_message().c_str());
    return 1;
  }
  if (!response.has_image()) {
    std::fprintf(stderr, "cri-tool: CRI ImageStatus %s: the runtime has no such image\n", image.c_str());
    return 1;
  }
  std::printf("%s\n", response.image().id().c_str());
  return 0;
}

int report(const gpuckpt::Error& e) {
  std::fprintf(stderr, "cri-tool: %s\n", e.message.c_str());
  return e.errno_value == ENOTSUP ? 3 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: cri-tool ENDPOINT COMMAND ARGS...\n");
    return 2;
  }
  CriOptions options;
  options.endpoint = argv[1];
  CriClient cri(options);
  const std::string command = argv[2];
  std::vector<std::string> args(argv + 3, argv + argc);
  const auto need = [&](std::size_t n) {
    if (args.size() < n) {
      std::fprintf(stderr, "cri-tool %s: missing arguments\n", command.c_str());
      std::exit(2);
    }
  };
  if (command == "version") {
    auto v = cri.version();
    if (!v) return report(v.error());
    std::printf("%s %s %s\n", v->runtime_name.c_str(), v->runtime_version.c_str(), v->api_version.c_str());
  } else if (command == "run-pod") {
    need(1);
    auto id = cri.run_pod_sandbox(pod_config(args[0]));
    if (!id) return report(id.error());
    std::printf("%s\n", id->c_str());
  } else if (command == "create") {
    need(4);
    v1::ContainerConfig config;
    config.mutable_metadata()->set_name(args[2]);
    config.mutable_image()->set_image(args[3]);
    config.set_log_path(args[2] + ".log");
    config.mutable_linux()->mutable_security_context()->mutable_namespace_options()->set_pid(v1::CONTAINER);
    // the labels kubelet puts on every container
    (*config.mutable_labels())["io.kubernetes.pod.name"] = args[0];
    (*config.mutable_labels())["io.kubernetes.pod.namespace"] = "default";
    (*config.mutable_labels())["io.kubernetes.container.name"] = args[2];
    std::size_t i = 4;
    for (; i < args.size() && args[i] != "--"; ++i) {
      if (i + 1 >= args.size()) break;
      const auto [key, value] = split(args[i + 1], args[i] == "--device" || args[i] == "--mount" ? ':' : '=');
      if (args[i] == "--device") {
        auto* d = config.add_devices();
        d->set_host_path(key);
        d->set_container_path(value);
        d->set_permissions("rwm");
      } else if (args[i] == "--env") {
        auto* e = config.add_envs();
        e->set_key(key);
        e->set_value(value);
      } else if (args[i] == "--label") {
        (*config.mutable_labels())[key] = value;
      } else if (args[i] == "--annotation") {
        (*config.mutable_annotations())[key] = value;
      } else if (args[i] == "--mount") {
        auto* m = config.add_mounts();
        m->set_host_path(key);
        m->set_container_path(value);
      } else if (args[i] == "--user-image") {
        config.mutable_image()->set_user_specified_image(args[i + 1]);
      } else {
        std::fprintf(stderr, "cri-tool create: unknown option %s\n", args[i].c_str());
        return 2;
      }
      ++i;
    }
    for (++i; i < args.size(); ++i) config.add_command(args[i]);
    auto id = cri.create_container(args[1], config, pod_config(args[0]));
    if (!id) return report(id.error());
    std::printf("%s\n", id->c_str());
  } else if (command == "start" || command == "stop" || command == "rm" || command == "stop-pod" ||
             command == "rm-pod") {
    need(1);
    auto r = command == "start"      ? cri.start_container(args[0])
             : command == "stop"     ? cri.stop_container(args[0], std::chrono::seconds(0))
             : command == "rm"       ? cri.remove_container(args[0])
             : command == "stop-pod" ? cri.stop_pod_sandbox(args[0])
                                     : cri.remove_pod_sandbox(args[0]);
    if (!r) return report(r.error());
  } else if (command == "pid") {
    need(1);
    auto pid = cri.container_pid(args[0]);
    if (!pid) return report(pid.error());
    std::printf("%d\n", pid.value());
  } else if (command == "checkpoint") {
    need(2);
    auto r = cri.checkpoint_container(args[0], args[1], cri.options().checkpoint_timeout);
    if (!r) return report(r.error());
  } else if (command == "pull") {
    need(1);
    return pull_image(options.endpoint, args[0]);
  } else if (command == "image-id") {
    need(1);
    return image_id(options.endpoint, args[0]);
  } else if (command == "list") {
    std::map<std::string, std::string> labels;
    for (const auto& a : args) labels.insert(split(a, '='));
    auto list = cri.list_containers(labels);
    if (!list) return report(list.error());
    for (const auto& c : list.value()) std::printf("%s %s %s\n", c.id.c_str(), c.name.c_str(), c.state.c_str());
  } else {
    std::fprintf(stderr, "cri-tool: unknown command %s\n", command.c_str());
    return 2;
  }
  return 0;
}
