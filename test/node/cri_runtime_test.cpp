// The CRI adapter against an in-process CRI server on a unix socket (a stand-in for CRI-O and containerd >= 2.0,
// which exist nowhere we can run): it answers as the CRI v1 contract says, so the checks are the adapter's
// requests (label filters, the checkpoint location and timeout), its deadlines, and its error for a runtime
// without CheckpointContainer. The real containerd 1.7 answers the same calls in test/e2e/containerd_flow.sh.
#include <catch2/catch_test_macros.hpp>

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <fstream>
#include <thread>

#include "node/cri_client.h"
#include "node/cri_runtime.h"
#include "node/metrics.h"
#include "test/support/archive_builder.h"

namespace v1 = runtime::v1;
using namespace gpuckpt;
using namespace gpuckpt::node;
namespace fs = std::filesystem;

namespace {

class StandInCri final : public v1::RuntimeService::Service {
 public:
  std::string runtime_version = "v2.1.0";
  bool implements_checkpoint = true;
  std::chrono::milliseconds checkpoint_delay{0};
  std::map<std::string, std::string> seen_label_selector;
  std::string seen_location;
  std::int64_t seen_timeout = -1;

  grpc::Status Version(grpc::ServerContext*, const v1::VersionRequest*, v1::VersionResponse* out) override {
    out->set_version("0.1.0");
    out->set_runtime_name("containerd");
    out->set_runtime_version(runtime_version);
    out->set_runtime_api_version("v1");
    return grpc::Status::OK;
  }

  grpc::Status ListContainers(grpc::ServerContext*, const v1::ListContainersRequest* in,
                              v1::ListContainersResponse* out) override {
    seen_label_selector = {in->filter().label_selector().begin(), in->filter().label_selector().end()};
    add(out, "c-main", "main", v1::CONTAINER_RUNNING, "trainer-0");
    add(out, "c-old", "main", v1::CONTAINER_EXITED, "trainer-0");
    add(out, "c-side", "sidecar", v1::CONTAINER_RUNNING, "trainer-0");
    return grpc::Status::OK;
  }

  grpc::Status ContainerStatus(grpc::ServerContext*, const v1::ContainerStatusRequest* in,
                               v1::ContainerStatusResponse* out) override {
    if (!in->verbose()) return {grpc::StatusCode::INVALID_ARGUMENT, "expected verbose"};
    (*out->mutable_info())["info"] = R"({"pid": 4242, "sandboxID": "pod-1"})";
    return grpc::Status::OK;
  }

  grpc::Status CheckpointContainer(grpc::ServerContext* context, const v1::CheckpointContainerRequest* in,
                                   v1::CheckpointContainerResponse*) override {
    if (!implements_checkpoint) return {grpc::StatusCode::UNIMPLEMENTED, "method CheckpointContainer not implemented"};
    seen_location = in->location();
    seen_timeout = in->timeout();
    const auto until = std::chrono::steady_clock::now() + checkpoint_delay;
    while (std::chrono::steady_clock::now() < until && !context->IsCancelled())
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ofstream(in->location()) << "archive";
    return grpc::Status::OK;
  }

 private:
  static void add(v1::ListContainersResponse* out, const char* id, const char* name, v1::ContainerState state,
                  const char* pod) {
    auto* c = out->add_containers();
    c->set_id(id);
    c->mutable_metadata()->set_name(name);
    c->set_state(state);
    (*c->mutable_labels())["io.kubernetes.pod.name"] = pod;
  }
};

struct Server {
  test::TempDir tmp;
  StandInCri service;
  std::unique_ptr<grpc::Server> server;
  std::string endpoint;
  Server() {
    endpoint = "unix://" + (tmp.path / "cri.sock").string();
    grpc::ServerBuilder builder;
    builder.AddListeningPort(endpoint, grpc::InsecureServerCredentials());
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    REQUIRE(server);
  }
  ~Server() { server->Shutdown(std::chrono::system_clock::now()); }
};

}  // namespace

TEST_CASE("the CRI adapter finds by pod labels, prefers running, reads the pid and checkpoints to the location",
          "[unit]") {
  Server cri;
  CriOptions options;
  options.endpoint = cri.endpoint;
  options.checkpoint_timeout = std::chrono::seconds(900);
  auto runtime = make_cri_runtime(options);
  CHECK(runtime->name() == "cri");

  auto found = runtime->find({"ml", "trainer-0", "main"});
  REQUIRE(found.ok());
  CHECK(found->id == "c-main");   // the exited container of the same name is not chosen
  CHECK(found->pid == 4242);
  CHECK(cri.service.seen_label_selector ==
        std::map<std::string, std::string>{{"io.kubernetes.pod.name", "trainer-0"}, {"io.kubernetes.pod.namespace", "ml"}});
  CHECK(runtime->find({"", "", "missing"}).error().errno_value == ENOENT);
  CHECK_FALSE(runtime->find({"", "", "bad/name"}).ok());
  CHECK(runtime->list()->size() == 2);

  REQUIRE(runtime->checkpoint(found.value(), cri.tmp.path / "out.tar", kNoDeadline).ok());
  CHECK(cri.service.seen_location == (cri.tmp.path / "out.tar").string());
  CHECK(cri.service.seen_timeout == 900);   // the runtime is told the deadline, not left at its default
  CHECK(fs::exists(cri.tmp.path / "out.tar"));

  auto restore = runtime->restore(cri.tmp.path / "out.tar", "", kNoDeadline);
  REQUIRE_FALSE(restore.ok());
  CHECK(restore.error().message.find("checkpoint image") != std::string::npos);
}

TEST_CASE("the CRI client reports the runtime's version and explains a missing CheckpointContainer", "[unit]") {
  Server cri;
  cri.service.runtime_version = "1.7.24";
  cri.service.implements_checkpoint = false;
  CriOptions options;
  options.endpoint = cri.endpoint;
  CriClient client(options);
  auto version = client.version();
  REQUIRE(version.ok());
  CHECK(version->describe() == "containerd 1.7.24");
  auto refused = client.checkpoint_container("c-main", (cri.tmp.path / "x.tar").string(),
                                             client.options().checkpoint_timeout);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().errno_value == ENOTSUP);
  const auto& text = refused.error().message;
  CHECK(text.find("containerd 1.7.24") != std::string::npos);
  CHECK(text.find("from 2.0") != std::string::npos);
  CHECK(text.find("runtime.kind: containerd") != std::string::npos);
}

TEST_CASE("a CRI checkpoint slower than the configured deadline fails with the setting to raise", "[unit]") {
  Server cri;
  cri.service.checkpoint_delay = std::chrono::milliseconds(4000);
  CriOptions options;
  options.endpoint = cri.endpoint;
  options.checkpoint_timeout = std::chrono::seconds(1);   // +2 s transport margin: 3 s < 4 s
  CriClient client(options);
  auto late = client.checkpoint_container("c-main", (cri.tmp.path / "x.tar").string(),
                                          client.options().checkpoint_timeout);
  REQUIRE_FALSE(late.ok());
  CHECK(late.error().errno_value == ETIMEDOUT);
  CHECK(late.error().message.find("checkpoints.runtime_timeout_seconds") != std::string::npos);

  // The agent's job has less time left than checkpoint_timeout: the call ends with the job (1 s + 2 s < 4 s).
  options.checkpoint_timeout = std::chrono::seconds(600);
  auto runtime = make_cri_runtime(options);
  const RuntimeContainer target{"c-main", "main", "running", 0};
  auto cut_short = runtime->checkpoint(target, cri.tmp.path / "y.tar",
                                       std::chrono::steady_clock::now() + std::chrono::seconds(1));
  REQUIRE_FALSE(cut_short.ok());
  CHECK(cut_short.error().errno_value == ETIMEDOUT);
  auto none_left = runtime->checkpoint(target, cri.tmp.path / "y.tar", std::chrono::steady_clock::now());
  REQUIRE_FALSE(none_left.ok());
  CHECK(none_left.error().message.find("no time left") != std::string::npos);
}

TEST_CASE("nothing listening on the CRI socket is a clear error", "[unit]") {
  test::TempDir tmp;
  CriOptions options;
  options.endpoint = (tmp.path / "absent.sock").string();
  options.call_timeout = std::chrono::seconds(2);
  CriClient client(options);
  auto version = client.version();
  REQUIRE_FALSE(version.ok());
  CHECK(version.error().message.find((tmp.path / "absent.sock").string()) != std::string::npos);
}

TEST_CASE("the runtime the agent talks to is reported in /metrics, label values escaped", "[unit]") {
  Metrics metrics;
  CHECK(metrics.render().find("gpuckpt_runtime_info") == std::string::npos);   // not before it is known
  metrics.set_runtime("cri", "containerd", "1.7.24~ds1");
  CHECK(metrics.render().find("gpuckpt_runtime_info{kind=\"cri\",name=\"containerd\",version=\"1.7.24~ds1\"} 1\n") !=
        std::string::npos);
  metrics.set_runtime("cri", "odd\"name\n", "");
  CHECK(metrics.render().find("name=\"odd\\\"name\\n\",version=\"\"} 1") != std::string::npos);
}
