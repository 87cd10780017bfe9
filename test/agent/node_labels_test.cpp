#include <catch2/catch_test_macros.hpp>

#include <httplib.h>

#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "agent/node_labels.h"
#include "test/support/archive_builder.h"
#include "test/support/hostile_server.h"

using namespace gpuckpt;
using gpuckpt::agent::compute_node_labels;
using gpuckpt::agent::node_label_patch;
using gpuckpt::agent::to_label_value;

namespace {

GpuDevice h200(int i) {
  GpuDevice g;
  g.id = "GPU-" + std::to_string(i);
  g.vendor = GpuVendor::Nvidia;
  g.name = "NVIDIA H200";
  g.vendor_id = 0x10de;
  g.device_id = 0x2335;
  g.memory_bytes = 150754820096ULL;
  g.compute_capability = "9.0";
  g.driver_version = "580.159.04";
  return g;
}

}  // namespace

TEST_CASE("node labels describe a uniform GPU node", "[unit]") {
  NodeInventory inv;
  inv.gpus = {h200(0), h200(1)};
  const auto labels = compute_node_labels(inv);
  CHECK(labels.at("gpuckpt.io/gpu-count") == "2");
  CHECK(labels.at("gpuckpt.io/gpu-vendor") == "nvidia");
  CHECK(labels.at("gpuckpt.io/gpu-model") == "NVIDIA-H200");
  CHECK(labels.at("gpuckpt.io/gpu-memory-gib") == "140");
  CHECK(labels.at("gpuckpt.io/gpu-driver") == "580.159.04");
  CHECK(labels.at("gpuckpt.io/gpu-compute") == "9.0");
  REQUIRE(labels.at("gpuckpt.io/gpu-fingerprint").has_value());
  CHECK(labels.at("gpuckpt.io/gpu-fingerprint")->size() == 16);
}

TEST_CASE("the fingerprint ignores GPU order and identity, and changes with what matching checks", "[unit]") {
  NodeInventory a, b, c;
  a.gpus = {h200(0), h200(1)};
  b.gpus = {h200(7), h200(3)};   // other ids, same kind of GPUs
  c.gpus = {h200(0), h200(1)};
  c.gpus[1].driver_version = "570.1";
  CHECK(compute_node_labels(a).at("gpuckpt.io/gpu-fingerprint") == compute_node_labels(b).at("gpuckpt.io/gpu-fingerprint"));
  CHECK(compute_node_labels(a).at("gpuckpt.io/gpu-fingerprint") != compute_node_labels(c).at("gpuckpt.io/gpu-fingerprint"));
  CHECK(compute_node_labels(c).at("gpuckpt.io/gpu-driver") == "mixed");
}

TEST_CASE("a node without GPUs removes the GPU labels", "[unit]") {
  const auto labels = compute_node_labels(NodeInventory{});
  CHECK(labels.at("gpuckpt.io/gpu-count") == "0");
  CHECK_FALSE(labels.at("gpuckpt.io/gpu-model").has_value());
  const auto patch = nlohmann::json::parse(node_label_patch(labels));
  CHECK(patch["metadata"]["labels"]["gpuckpt.io/gpu-model"].is_null());
  CHECK(patch["metadata"]["labels"]["gpuckpt.io/gpu-count"] == "0");
}

TEST_CASE("label values are valid Kubernetes label values", "[unit]") {
  CHECK(to_label_value("AMD Instinct MI300X (gfx942)") == "AMD-Instinct-MI300X--gfx942");
  CHECK(to_label_value("--x--") == "x");
  CHECK(to_label_value(std::string(100, 'a')).size() == 63);
  CHECK(to_label_value("") == "");
}

TEST_CASE("labels are published with a merge PATCH on the node, with the service-account token", "[unit]") {
  test::TempDir tmp;
  test::write_file(tmp.path / "token", "sa-token\n");
  httplib::Server api;
  std::string method, path, content_type, auth, body;
  api.Patch(R"(/api/v1/nodes/([a-z0-9.-]+))", [&](const httplib::Request& req, httplib::Response& res) {
    if (!path.empty()) {   // keep the first (successful) call's details
      res.status = 403;
      return;
    }
    method = req.method;
    path = req.path;
    content_type = req.get_header_value("Content-Type");
    auth = req.get_header_value("Authorization");
    body = req.body;
    res.set_content("{}", "application/json");
  });
  const int port = api.bind_to_any_port("127.0.0.1");
  std::thread server([&] { api.listen_after_bind(); });
  node::NodeLabelsConfig config;
  node::KubeEndpoint endpoint;
  endpoint.url = "http://127.0.0.1:" + std::to_string(port);
  endpoint.token_file = (tmp.path / "token").string();
  NodeInventory inv;
  inv.gpus = {h200(0)};
  const auto labels = compute_node_labels(inv);
  auto published = agent::publish_node_labels(config, endpoint, "gpu-node-1", labels);
  auto refused = agent::publish_node_labels(config, endpoint, "forbidden-node", labels);
  endpoint.token_file = (tmp.path / "absent").string();
  auto no_token = agent::publish_node_labels(config, endpoint, "gpu-node-1", labels);
  api.stop();
  server.join();
  REQUIRE(published.ok());
  CHECK(path == "/api/v1/nodes/gpu-node-1");
  CHECK(content_type == "application/merge-patch+json");
  CHECK(auth == "Bearer sa-token");
  CHECK(nlohmann::json::parse(body) == nlohmann::json::parse(node_label_patch(labels)));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("403") != std::string::npos);
  CHECK(refused.error().message.find("patch") != std::string::npos);
  CHECK_FALSE(no_token.ok());
}

TEST_CASE("labels go into an NFD feature file with an expiry, atomically, readable by nfd-worker", "[unit]") {
  NodeInventory inv;
  inv.gpus = {h200(0), h200(1)};
  const auto labels = compute_node_labels(inv);
  const auto now = std::chrono::system_clock::from_time_t(1795000000);   // 2026-11-18T11:06:40Z
  const std::string text = agent::nfd_feature_file(labels, now, 300);
  CHECK(text.find("# +expiry-time=2026-11-18T11:21:40Z\n") != std::string::npos);   // 3 intervals later
  std::size_t lines = 0;
  for (const auto& [key, value] : labels) {
    if (value) {
      CHECK(text.find("\n" + key + "=" + *value + "\n") != std::string::npos);
      ++lines;
    } else {
      CHECK(text.find("\n" + key + "=") == std::string::npos);   // no value: left out, nfd-worker removes it
    }
  }
  CHECK(lines > 0);
  NodeInventory none;
  const std::string empty = agent::nfd_feature_file(compute_node_labels(none), now, 300);
  CHECK(empty.find("gpuckpt.io/gpu-count=0") != std::string::npos);

  test::TempDir tmp;
  node::NodeLabelsConfig config;
  config.method = "nfd_feature_file";
  config.feature_file = (tmp.path / "features.d" / "gpuckpt").string();
  node::KubeEndpoint api;
  api.url = "http://127.0.0.1:1";   // never called
  REQUIRE(agent::publish_node_labels(config, api, "gpu-node-1", labels).ok());
  std::ifstream in(config.feature_file);
  std::stringstream written;
  written << in.rdbuf();
  CHECK(written.str().find("\n" + labels.begin()->first + "=") != std::string::npos);
  struct stat st {};
  REQUIRE(::stat(config.feature_file.c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0644);
  std::size_t entries = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(tmp.path / "features.d")) ++entries;
  CHECK(entries == 1);   // no temporary file left beside it
  config.feature_file = (tmp.path / "not-a-dir").string() + "/x/gpuckpt";
  test::write_file(tmp.path / "not-a-dir", "file");
  auto refused = agent::publish_node_labels(config, api, "gpu-node-1", labels);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("NFD feature file") != std::string::npos);
}

// What the API server said comes from outside: it reaches the log and the operator escaped and cut.
TEST_CASE("an API server's refusal reaches the node labels' error escaped and cut", "[unit]") {
  test::TempDir tmp;
  test::write_file(tmp.path / "token", "a-service-account-token\n");
  test::HostileServer server;
  server.http.Patch(R"(/api/v1/nodes/.*)", [](const httplib::Request&, httplib::Response& res) {
    res.status = 422;
    res.set_content("refused\nlevel=error msg=forged" + std::string(10000, 'z'), "text/plain");
  });
  server.start();
  node::NodeLabelsConfig config;
  config.method = "api";
  node::KubeEndpoint endpoint;
  endpoint.url = server.url();
  endpoint.token_file = (tmp.path / "token").string();
  endpoint.ca_file = "";
  auto published = agent::publish_node_labels(config, endpoint, "node-a", {{"gpuckpt.io/gpu-count", "1"}});
  REQUIRE_FALSE(published);
  const std::string& why = published.error().message;
  CHECK(why.find("returned 422: refused\\x0alevel=error") != std::string::npos);
  CHECK(why.find('\n') == std::string::npos);
  CHECK(why.size() < 1000);
}
