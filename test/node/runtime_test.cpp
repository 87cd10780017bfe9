// The kubelet adapter against a stand-in of what it talks to: an in-process HTTP server speaking kubelet's /pods
// and /checkpoint (the CRI adapter's stand-in is in cri_runtime_test.cpp).
#include <catch2/catch_test_macros.hpp>

#include <httplib.h>
#include <sys/stat.h>

#include <fstream>
#include <thread>

#include "node/kubelet_runtime.h"
#include "test/support/archive_builder.h"

namespace fs = std::filesystem;
using namespace gpuckpt;

namespace {

const char* kPods = R"({"kind":"PodList","items":[
  {"metadata":{"namespace":"ml","name":"trainer-0"},
   "status":{"containerStatuses":[
     {"name":"main","containerID":"cri-o://0123abcd","state":{"running":{"startedAt":"x"}}},
     {"name":"sidecar","containerID":"cri-o://9999","state":{"terminated":{"exitCode":0}}}]}}]})";

struct FakeKubelet {
  httplib::Server server;
  std::thread thread;
  int port = 0;
  std::string seen_auth;
  std::string seen_checkpoint;
  fs::path kubelet_dir;
  explicit FakeKubelet(fs::path dir) : kubelet_dir(std::move(dir)) {
    server.Get("/api/v1/nodes/n1/proxy/pods", [this](const httplib::Request& req, httplib::Response& res) {
      seen_auth = req.get_header_value("Authorization");
      res.set_content(kPods, "application/json");
    });
    server.Post(R"(/api/v1/nodes/n1/proxy/checkpoint/([^/]+)/([^/]+)/([^/]+))",
                [this](const httplib::Request& req, httplib::Response& res) {
                  seen_checkpoint = std::string(req.matches[1]) + "/" + std::string(req.matches[2]) + "/" +
                                    std::string(req.matches[3]);
                  const std::string name = "checkpoint-trainer-0_ml-main-2026-11-22T00:00:00Z.tar";
                  test::make_archive(kubelet_dir / name, test::podman_checkpoint_entries(), test::Compression::None);
                  res.set_content(R"({"items":["/var/lib/kubelet/checkpoints/)" + name + R"("]})", "application/json");
                });
    port = server.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { server.listen_after_bind(); });
  }
  ~FakeKubelet() {
    server.stop();
    thread.join();
  }
};

}  // namespace

TEST_CASE("the kubelet runtime finds containers through /pods and checkpoints through /checkpoint", "[unit]") {
  test::TempDir tmp;
  fs::create_directories(tmp.path / "kubelet");
  FakeKubelet kubelet(tmp.path / "kubelet");
  test::write_file(tmp.path / "token", "sa-token\n");
  node::KubeletRuntimeOptions options;
  options.kubelet.url = "http://127.0.0.1:" + std::to_string(kubelet.port) + "/api/v1/nodes/n1/proxy/";
  options.kubelet.token_file = (tmp.path / "token").string();
  options.kubelet.ca_file.clear();
  options.checkpoint_dir = tmp.path / "kubelet";
  auto runtime = node::make_kubelet_runtime(options);

  auto found = runtime->find({"ml", "trainer-0", "main"});
  REQUIRE(found.ok());
  CHECK(found->id == "0123abcd");
  CHECK(found->state == "running");
  CHECK(found->name == "ml/trainer-0/main");
  CHECK(kubelet.seen_auth == "Bearer sa-token");
  auto sidecar = runtime->find({"ml", "trainer-0", "sidecar"});
  REQUIRE(sidecar.ok());
  CHECK(sidecar->state == "exited");
  auto missing = runtime->find({"ml", "trainer-0", "nope"});
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().errno_value == ENOENT);
  CHECK_FALSE(runtime->find({"", "", "main"}).ok());
  CHECK(runtime->list()->size() == 2);

  REQUIRE(runtime->checkpoint(found.value(), tmp.path / "copy.tar", kNoDeadline).ok());
  CHECK(kubelet.seen_checkpoint == "ml/trainer-0/main");
  CHECK(inspect_checkpoint_archive(tmp.path / "copy.tar", ArchiveLimits{})->container_name == "counter");
  auto restore = runtime->restore(tmp.path / "copy.tar", "", kNoDeadline);
  REQUIRE_FALSE(restore.ok());
  CHECK(restore.error().message.find("kubelet has no restore") != std::string::npos);
}
