// The agent's HTTP API end to end in-process: a real httplib server on 127.0.0.1 (port chosen by the kernel)
// over JobService with the one fake runtime (below), fixture inventory, archives built by the test.
#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>

#include <httplib.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include "agent/http_api.h"
#include "agent/pod_events.h"
#include "node/job_store.h"
#include "node/service.h"
#include "archive/checkpoint_images.h"
#include "state/container_store.h"
#include "gpu/inventory.h"
#include "gpu/matcher.h"
#include "gpu/properties_record.h"
#include "gpumem/chunk_store.h"
#include "gpumem/memory_lineage.h"
#include "test/support/archive_builder.h"
#include "test/support/fake_kube_api.h"
#include "test/support/registry_server.h"
#include "test/support/store_checkpoint.h"

namespace fs = std::filesystem;
using namespace gpuckpt;
using nlohmann::json;

namespace {

constexpr const char* kToken = "test-token-0123456789abcdef";

// The fake runtime: containers in a table; checkpoint writes a podman-layout archive into the path it is given
// (the agent's pipe) the way podman does; restore reads the archive twice, as podman does (the config first, then
// everything), and records what it read, as podman would create the container from it.
class FakeRuntime final : public ContainerRuntime {
 public:
  std::map<std::string, RuntimeContainer> containers;
  std::vector<fs::path> restored;
  std::vector<json> restored_specs;
  std::vector<std::vector<ArchiveEntry>> restored_entries;
  // Runs half-way through writing the archive: it may cut what is left to write (`rest`) or fail the runtime (a
  // runtime that died, a full disk).
  std::function<Result<void>(const fs::path& archive, std::string& rest)> checkpoint_fault;
  std::vector<test::TestEntry> extra_entries;   // in every archive a checkpoint writes, after podman's
  std::mutex mutex;
  test::TempDir scratch;
  std::string name() const override { return "fake"; }
  Result<RuntimeContainer> find(const ContainerRef& ref) override {
    std::lock_guard lock(mutex);
    auto it = containers.find(ref.container);
    if (it == containers.end()) return make_error("no container '" + ref.container + "'", ENOENT);
    return it->second;
  }
  Result<std::vector<RuntimeContainer>> list() override {
    std::lock_guard lock(mutex);
    std::vector<RuntimeContainer> out;
    for (const auto& [n, c] : containers) out.push_back(c);
    return out;
  }
  Result<void> checkpoint(const RuntimeContainer& c, const fs::path& archive, JobDeadline) override {
    std::string bytes;
    {
      std::lock_guard lock(mutex);
      auto entries = test::podman_checkpoint_entries();
      entries.insert(entries.end(), extra_entries.begin(), extra_entries.end());
      const auto built = test::make_archive(scratch.path / "export.tar.zst", entries);
      std::ifstream in(built, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    std::ofstream out(archive, std::ios::binary);
    if (!out) return make_error("cannot open " + archive.string());
    std::string rest = bytes.substr(bytes.size() / 2);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2)).flush();
    if (checkpoint_fault)
      if (auto fault = checkpoint_fault(archive, rest); !fault) return fault;
    out.write(rest.data(), static_cast<std::streamsize>(rest.size())).flush();
    std::lock_guard lock(mutex);
    containers[c.name].state = "exited";
    return {};
  }
  // The runtime's image store: a layout loaded under "store/" + tag; has_store false: a runtime with none;
  // load_fails: the store refuses the image.
  bool has_store = true;
  bool load_fails = false;
  std::vector<std::string> loaded;
  Result<std::string> load_image(const fs::path& layout, const std::string& tag, JobDeadline) override {
    if (!has_store) return std::string();
    if (load_fails) return make_error("fake store: import failed", EIO);
    if (!fs::is_regular_file(layout / "index.json")) return make_error("fake store: no layout at " + layout.string());
    std::lock_guard lock(mutex);
    loaded.push_back("store/" + tag);
    return loaded.back();
  }
  // A runtime that refuses the restore: its message names what it was given to read, as podman's does.
  bool refuse_restores = false;
  std::vector<bool> plan_present_at_restore;   // the job's plan was in the state dir while the runtime ran
  fs::path state_dir;
  std::optional<PodmanRestoreStats> restore_stats;   // what a restore reports of its time, as podman does
  Result<RuntimeContainer> restore(const fs::path& archive, const std::string& new_name, JobDeadline) override {
    {
      std::lock_guard lock(mutex);
      bool present = false;
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(state_dir / "restore-plans", ec)) present |= e.is_regular_file();
      plan_present_at_restore.push_back(present);
    }
    if (refuse_restores) return make_error("Error: importing " + archive.string() + ": the runtime refused it");
    auto spec = read_archive_entry(archive, "spec.dump", ArchiveLimits{});
    if (!spec || !spec.value()) return make_error("fake restore: no spec.dump");
    auto entries = list_archive(archive, ArchiveLimits{});
    if (!entries) return entries.error();
    std::lock_guard lock(mutex);
    restored.push_back(archive);
    restored_specs.push_back(json::parse(*spec.value()));
    restored_entries.push_back(entries.value());
    RuntimeContainer c{"restored-" + std::to_string(restored.size()), new_name.empty() ? "counter" : new_name,
                       "running", 4242};
    containers[c.name] = c;
    c.restore_stats = restore_stats;
    return c;
  }
};

NodeInventory two_gpu_node() {
  NodeInventory inv;
  inv.hostname = "node-a";
  for (int i = 0; i < 2; ++i) {
    GpuDevice g;
    g.id = "GPU-" + std::to_string(i);
    g.uuid = g.id;
    g.vendor = GpuVendor::Nvidia;
    g.name = "NVIDIA H200";
    g.device_minor = i;
    g.device_paths = {"/dev/nvidia" + std::to_string(i), "/dev/nvidiactl"};
    inv.gpus.push_back(g);
  }
  return inv;
}

struct Fixture {
  test::TempDir tmp;
  std::shared_ptr<FakeRuntime> runtime = std::make_shared<FakeRuntime>();
  std::unique_ptr<node::JobService> service;
  httplib::Server server;
  std::thread thread;
  int port = 0;

  explicit Fixture(std::function<void(const fs::path&)> before_start = {},
                   std::function<void(node::AgentConfig&)> configure = {},
                   std::function<Result<NodeInventory>()> inventory = {},
                   std::function<void(node::JobServiceDeps&)> wire = {}) {
    if (before_start) before_start(tmp.path);
    node::AgentConfig config;
    config.state_dir = tmp.path / "state";
    config.checkpoint_dir = tmp.path / "checkpoints";
    config.kubelet_checkpoint_dir = tmp.path / "kubelet";
    config.max_request_bytes = 4096;
    config.gpu_memory.store = "inline";   // hermetic: a test that wants a store names its own, never the node's
    config.node_store_dir = tmp.path / "node-store";
    fs::create_directories(config.checkpoint_dir);
    if (configure) configure(config);
    runtime->state_dir = config.state_dir;
    runtime->containers["counter"] = {"abc123", "counter", "running", 100};
    runtime->containers["plain"] = {"def456", "plain", "running", 101};
    node::JobServiceDeps deps;
    deps.runtime = runtime;
    deps.inventory = inventory ? inventory : [] { return Result<NodeInventory>(two_gpu_node()); };
    deps.device_numbers = [](const std::string& p) -> Result<std::pair<std::uint32_t, std::uint32_t>> {
      // As in the e2e test: the nodes the archive's aliases point at (/dev/null, /dev/zero).
      if (p == "/dev/nvidia0") return std::make_pair(1u, 3u);
      if (p == "/dev/nvidia1") return std::make_pair(1u, 5u);
      return make_error("no " + p);
    };
    if (wire) wire(deps);
    service = std::make_unique<node::JobService>(config, deps);
    agent::install_routes(server, *service, kToken);
    port = server.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { server.listen_after_bind(); });
    // httplib's stop() before the listening loop runs is lost, and ~Fixture's join would wait for ever.
    while (!server.is_running()) std::this_thread::yield();
    // What the OCI hook recorded when "counter" started: it uses GPU-0 through /dev/nvidia0.
    ContainerGpuState state;
    state.container_id = "abc123";
    state.gpus.record.node = two_gpu_node();
    state.gpus.record.used_gpu_ids = {"GPU-0"};
    state.gpus.devices = {{"/dev/nvidia0", 1, 3, "GPU-0"}};
    state.gpus.gpu_env = {{"NVIDIA_VISIBLE_DEVICES", "0"}};
    REQUIRE(write_container_state(config.state_dir, state).ok());
  }
  ~Fixture() {
    server.stop();
    thread.join();
  }

  httplib::Client client(const std::string& token = kToken) {
    httplib::Client c("127.0.0.1", port);
    if (!token.empty()) c.set_bearer_token_auth(token.c_str());
    return c;
  }
  json post(const std::string& path, const std::string& body, int expect) {
    auto res = client().Post(path.c_str(), body, "application/json");
    REQUIRE(res);
    INFO(res->body);
    CHECK(res->status == expect);
    return json::parse(res->body);
  }
  json wait_job(const std::string& collection, const std::string& id) {
    service->wait_idle();
    auto res = client().Get((collection + "/" + id).c_str());
    REQUIRE(res);
    REQUIRE(res->status == 200);
    return json::parse(res->body);
  }
  std::vector<std::string> checkpoint_files() {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(tmp.path / "checkpoints")) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

}  // namespace

TEST_CASE("token comparison", "[unit]") {
  CHECK(agent::token_matches("abc", "abc"));
  CHECK_FALSE(agent::token_matches("abd", "abc"));
  CHECK_FALSE(agent::token_matches("ab", "abc"));
  CHECK_FALSE(agent::token_matches("abcd", "abc"));
  CHECK_FALSE(agent::token_matches("", ""));
}

TEST_CASE("every /v1 call needs the bearer token; health and metrics do not", "[unit]") {
  Fixture f;
  for (const std::string& token : {std::string(), std::string("wrong-token")}) {
    auto c = f.client(token);
    auto res = c.Get("/v1/gpus");
    REQUIRE(res);
    CHECK(res->status == 401);
    CHECK(json::parse(res->body)["error"]["message"].get<std::string>().find("bearer token") != std::string::npos);
    auto post = c.Post("/v1/checkpoints", R"({"container":"counter"})", "application/json");
    REQUIRE(post);
    CHECK(post->status == 401);
  }
  CHECK(f.runtime->containers.at("counter").state == "running");   // nothing happened
  auto anon = f.client("");
  CHECK(anon.Get("/healthz")->status == 200);
  auto metrics = anon.Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->body.find("gpuckpt_api_rejected_total{reason=\"auth\"} 4") != std::string::npos);
}

TEST_CASE("every /v1 route of the table answers 401 without the token or with a wrong one, and does nothing",
          "[unit]") {
  Fixture f;
  std::size_t v1_routes = 0;
  for (const agent::Route& route : agent::api_routes(*f.service)) {
    // A path the route takes: each group of its regular expression becomes a name it accepts.
    const std::string path = std::regex_replace(route.pattern, std::regex(R"(\([^()]*\))"), "x1");
    INFO(agent::to_string(route.method) << " " << path);
    if (route.pattern.rfind("/v1/", 0) != 0) {
      // Only these two answer without the token; any other route must live under /v1.
      CHECK((route.pattern == "/healthz" || route.pattern == "/metrics"));
      continue;
    }
    ++v1_routes;
    for (const std::string& token : {std::string(), std::string("wrong-token")}) {
      auto c = f.client(token);
      const auto res = route.method == agent::Method::get    ? c.Get(path.c_str())
                       : route.method == agent::Method::post ? c.Post(path.c_str(), "{}", "application/json")
                                                             : c.Put(path.c_str(), "{}", "application/json");
      REQUIRE(res);
      CHECK(res->status == 401);
      CHECK(res->get_header_value("WWW-Authenticate") == "Bearer");
    }
  }
  CHECK(v1_routes == 25);   // the API's /v1 routes (docs/api.md): a new one is in this test by being in the table
  CHECK(f.runtime->containers.at("counter").state == "running");   // nothing happened
  CHECK(f.checkpoint_files().empty());
  auto metrics = f.client("").Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->body.find("gpuckpt_api_rejected_total{reason=\"auth\"} " + std::to_string(2 * v1_routes) + "\n") !=
        std::string::npos);
}

TEST_CASE("GET /v1/gpus and /v1/containers", "[unit]") {
  Fixture f;
  auto gpus = f.client().Get("/v1/gpus");
  REQUIRE(gpus);
  CHECK(gpus->status == 200);
  CHECK(json::parse(gpus->body)["node"]["gpus"].size() == 2);
  auto containers = f.client().Get("/v1/containers");
  REQUIRE(containers);
  const auto list = json::parse(containers->body)["containers"];
  REQUIRE(list.size() == 1);
  CHECK(list[0]["id"] == "abc123");
  CHECK(list[0]["name"] == "counter");
  CHECK(list[0]["used_gpu_ids"][0] == "GPU-0");
}

TEST_CASE("POST /v1/match judges a GPU record with the agent's inventory and policy, behind the token", "[unit]") {
  Fixture f;
  GpuPropertiesRecord record;
  record.node = two_gpu_node();
  record.used_gpu_ids = {"GPU-1"};
  auto yes = f.post("/v1/match", to_json(record).dump(), 200);
  CHECK(yes["matched"] == true);
  REQUIRE(yes["mappings"].size() == 1);
  CHECK(yes["mappings"][0]["source"]["id"] == "GPU-1");
  CHECK(yes["mappings"][0]["target"]["device_paths"][0].get<std::string>().rfind("/dev/nvidia", 0) == 0);

  record.node.gpus[1].name = "NVIDIA B200";   // a model this node does not have
  auto no = f.post("/v1/match", to_json(record).dump(), 200);
  CHECK(no["matched"] == false);
  CHECK_FALSE(no["rejections"].empty());
  CHECK(no["rejections"][0]["property"] == "model");

  auto bad = f.post("/v1/match", R"({"not": "a record"})", 400);
  CHECK(bad["error"]["message"].get<std::string>().find("request body") != std::string::npos);
  auto anon = f.client("").Post("/v1/match", to_json(record).dump(), "application/json");
  REQUIRE(anon);
  CHECK(anon->status == 401);
}

TEST_CASE("an 8x H100 NVLink record matches its own node through the agent, which reads NVML", "[unit]") {
  // The agent reads the node with NVML (here its recorded snapshot): NVLink links are in its inventory and so in
  // the records of checkpoints it takes. Reading the same host root without NVML (what `gpuckpt match --host-root`
  // does in a pod) loses the links, and the record no longer matches its own node.
  const fs::path root = fs::path(GPUCKPT_TEST_FIXTURES) / "nvidia-h100-8gpu";
  InventoryOptions with_nvml;
  with_nvml.nvml_snapshot = root / "nvml-snapshot.json";
  auto node = read_inventory(HostRoot(root.string()), with_nvml);
  REQUIRE(node.ok());
  REQUIRE(node->gpus.size() == 8);
  REQUIRE_FALSE(node->gpus[0].links.empty());
  GpuPropertiesRecord record;
  record.node = node.value();
  record.used_gpu_ids = {node->gpus[0].id, node->gpus[1].id};

  InventoryOptions without_nvml;
  without_nvml.use_nvml = false;
  auto blind = read_inventory(HostRoot(root.string()), without_nvml);
  REQUIRE(blind.ok());
  MatchRequest request{&record, &blind.value(), std::nullopt, MatchPolicy{}};
  REQUIRE(std::holds_alternative<MatchFailure>(match_gpus(request)));   // the plugin's old host-root guess

  Fixture f({}, [](node::AgentConfig& c) { c.max_request_bytes = 65536; },
            [root, with_nvml] { return read_inventory(HostRoot(root.string()), with_nvml); });
  auto verdict = f.post("/v1/match", to_json(record).dump(), 200);
  CHECK(verdict["matched"] == true);
  CHECK(verdict["mappings"].size() == 2);
}

TEST_CASE("GET /v1/checkpoints lists jobs newest first, filtered and bounded, behind the token", "[unit]") {
  Fixture f;
  const auto first = f.post("/v1/checkpoints", R"({"container":"counter"})", 202)["id"].get<std::string>();
  f.service->wait_idle();
  f.post("/v1/checkpoints", R"({"container":"no-such-container-yet"})", 404);   // refused: no job
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));   // created_at has whole seconds: a later one
  const auto third = f.post("/v1/checkpoints", R"({"container":"plain"})", 202)["id"].get<std::string>();
  f.service->wait_idle();
  auto get = [&](const std::string& path, int status) {
    auto res = f.client().Get(path.c_str());
    REQUIRE(res);
    INFO(path << ": " << res->body);
    CHECK(res->status == status);
    return json::parse(res->body);
  };
  auto all = get("/v1/checkpoints", 200);
  REQUIRE(all["jobs"].size() == 2);
  CHECK(all["truncated"] == false);
  // newest first; each with what it was about, its state and times
  CHECK(all["jobs"][0]["id"] == third);
  CHECK(all["jobs"][1]["id"] == first);
  CHECK(all["jobs"][1]["kind"] == "checkpoint");
  CHECK(all["jobs"][1]["state"] == "succeeded");
  CHECK(all["jobs"][1]["request"]["container"] == "counter");
  CHECK_FALSE(all["jobs"][1]["created_at"].get<std::string>().empty());
  CHECK_FALSE(all["jobs"][1]["finished_at"].get<std::string>().empty());
  CHECK(all["jobs"][1]["archive"].get<std::string>().find(".tar") != std::string::npos);
  CHECK_FALSE(all["jobs"][1].contains("result"));   // a summary: the full job is GET /v1/checkpoints/{id}

  auto one_job = get("/v1/checkpoints?limit=1", 200);
  CHECK(one_job["jobs"].size() == 1);
  CHECK(one_job["truncated"] == true);
  CHECK(get("/v1/checkpoints?state=failed", 200)["jobs"].size() == (all["jobs"][0]["state"] == "failed" ? 1u : 0u));
  CHECK(get("/v1/restores", 200)["jobs"].empty());
  CHECK(get("/v1/images", 200)["jobs"].empty());
  CHECK(get("/v1/checkpoints?limit=0", 400)["error"]["message"].get<std::string>().find("'limit'") != std::string::npos);
  CHECK(get("/v1/checkpoints?limit=501", 400)["error"]["message"].get<std::string>().find("1 to 500") != std::string::npos);
  CHECK(get("/v1/checkpoints?state=done", 400)["error"]["message"].get<std::string>().find("'state'") != std::string::npos);
  auto anon = f.client("").Get("/v1/checkpoints");
  REQUIRE(anon);
  CHECK(anon->status == 401);
}

TEST_CASE("GET /v1/node reports the node checks (runtime/node_report) behind the token", "[unit]") {
  Fixture f;
  auto anon = f.client("").Get("/v1/node");
  REQUIRE(anon);
  CHECK(anon->status == 401);
  auto res = f.client().Get("/v1/node");
  REQUIRE(res);
  CHECK(res->status == 200);
  const auto report = json::parse(res->body);
  CHECK((report["status"] == "pass" || report["status"] == "warn" || report["status"] == "fail"));
  std::map<std::string, json> checks;
  for (const auto& c : report["checks"]) checks[c["name"].get<std::string>()] = c;
  for (const char* name : {"criu", "criu-plugin", "oci-hook", "gpu-driver", "kernel-checkpoint-restore", "thp", "selinux"})
    CHECK(checks.count(name) == 1);
  // Where this agent writes archives (its config), not a default path.
  REQUIRE(checks.count("archive-space"));
  CHECK(checks["archive-space"]["detail"].get<std::string>().find((f.tmp.path / "checkpoints").string()) != std::string::npos);
  for (const auto& [name, c] : checks)
    if (c["status"] != "pass") CHECK(c.contains("fix"));
}

TEST_CASE("bad checkpoint requests get clear 4xx and change nothing", "[unit]") {
  Fixture f;
  auto message = [](const json& j) { return j["error"]["message"].get<std::string>(); };
  CHECK(message(f.post("/v1/checkpoints", R"({"container":"nope"})", 404)).find("nope") != std::string::npos);
  CHECK(message(f.post("/v1/checkpoints", R"({"container":"../etc"})", 400)).find("container") != std::string::npos);
  f.post("/v1/checkpoints", R"({"container":"counter","pod":"a/b"})", 400);
  f.post("/v1/checkpoints", R"({"container":"counter","extra":"x"})", 400);
  f.post("/v1/checkpoints", R"({"container":5})", 400);
  f.post("/v1/checkpoints", R"(not json)", 400);
  f.post("/v1/checkpoints", R"([1,2])", 400);
  auto big = f.client().Post("/v1/checkpoints", std::string(8192, ' '), "application/json");
  REQUIRE(big);
  CHECK(big->status == 413);
  auto unknown = f.client().Get("/v1/checkpoints/ck-none");
  REQUIRE(unknown);
  CHECK(unknown->status == 404);
  CHECK(f.checkpoint_files().empty());
  CHECK(f.runtime->containers.at("counter").state == "running");
}

TEST_CASE("a checkpoint through the API produces an annotated archive", "[unit]") {
  Fixture f;
  const auto started = f.post("/v1/checkpoints", R"({"namespace":"default","pod":"p","container":"counter"})", 202);
  const std::string id = started["id"];
  CHECK(started["kind"] == "checkpoint");
  const auto job = f.wait_job("/v1/checkpoints", id);
  INFO(job.dump());
  REQUIRE(job["state"] == "succeeded");
  const fs::path archive = job["result"]["archive"].get<std::string>();
  CHECK(archive.parent_path() == f.tmp.path / "checkpoints");
  CHECK(f.checkpoint_files() == std::vector<std::string>{archive.filename().string()});   // no partial files
  auto info = inspect_checkpoint_archive(archive, ArchiveLimits{});
  REQUIRE(info.ok());
  REQUIRE(info->gpus.has_value());
  CHECK(info->gpus->checkpoint_id == id);
  CHECK(info->gpus->record.used_gpu_ids == std::vector<std::string>{"GPU-0"});
  CHECK(info->spec["annotations"]["io.gpuckpt.checkpoint-id"] == id);
  CHECK(job["phase_seconds"].contains("checkpointing"));
  // A second request for the now exited container is a conflict.
  f.post("/v1/checkpoints", R"({"container":"counter"})", 409);
  CHECK(f.service->metrics_text().find("gpuckpt_checkpoints_total{result=\"success\"} 1") != std::string::npos);
}

namespace {

// GET /metrics from the agent's HTTP API, parsed: series (name with its labels, as exposed) -> value.
std::map<std::string, double> scrape(Fixture& f) {
  auto res = f.client("").Get("/metrics");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  std::map<std::string, double> series;
  std::istringstream lines(res->body);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] == '#') continue;
    const auto space = line.rfind(' ');
    series[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return series;
}

// The buckets of one histogram series (`labels` without braces) in exposition order, +Inf last.
std::vector<double> buckets(const std::map<std::string, double>& series, const std::string& name,
                            const std::string& labels) {
  std::vector<double> out;
  for (const char* le : {"0.1", "0.25", "0.5", "1", "2.5", "5", "10", "30", "60", "120", "300", "600", "1200", "1800",
                         "+Inf"})
    out.push_back(series.at(name + "_bucket{" + labels + ",le=\"" + le + "\"}"));
  return out;
}

}  // namespace

TEST_CASE("GET /metrics: job duration and phase histograms, in-flight jobs, archive dir bytes and free space",
          "[unit]") {
  Fixture f;
  const std::string ck_ok = "kind=\"checkpoint\",result=\"success\"";
  auto before = scrape(f);
  for (const char* kind : {"checkpoint", "restore", "image"}) {   // every kind from the start, at zero
    CHECK(before.at(std::string("gpuckpt_jobs_in_flight{kind=\"") + kind + "\"}") == 0);
    CHECK(before.at(std::string("gpuckpt_job_duration_seconds_count{kind=\"") + kind + "\",result=\"failure\"}") == 0);
  }
  CHECK(before.at("gpuckpt_archive_dir_bytes") == 0);
  CHECK(before.at("gpuckpt_archive_dir_free_bytes") > 0);

  // A checkpoint held mid-way by its runtime is in flight, and not yet in any histogram.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> reached;
  f.runtime->checkpoint_fault = [released, &reached](const fs::path&, std::string&) -> Result<void> {
    reached.set_value();
    released.wait();
    return {};
  };
  const std::string id = f.post("/v1/checkpoints", R"({"container":"counter"})", 202)["id"];
  reached.get_future().wait();
  auto during = scrape(f);
  CHECK(during.at("gpuckpt_jobs_in_flight{kind=\"checkpoint\"}") == 1);
  CHECK(during.at("gpuckpt_job_duration_seconds_count{" + ck_ok + "}") == 0);
  release.set_value();
  const auto job = f.wait_job("/v1/checkpoints", id);
  REQUIRE(job["state"] == "succeeded");

  auto after = scrape(f);
  CHECK(after.at("gpuckpt_jobs_in_flight{kind=\"checkpoint\"}") == 0);
  CHECK(after.at("gpuckpt_checkpoints_total{result=\"success\"}") == 1);
  const auto b = buckets(after, "gpuckpt_job_duration_seconds", ck_ok);
  CHECK(std::is_sorted(b.begin(), b.end()));   // cumulative
  CHECK(b.back() == 1);
  CHECK(after.at("gpuckpt_job_duration_seconds_count{" + ck_ok + "}") == 1);
  // The job took at least as long as its steps, and its sum says so.
  const double total = after.at("gpuckpt_job_duration_seconds_sum{" + ck_ok + "}");
  CHECK(total >= job["phase_seconds"]["checkpointing"].get<double>());
  for (const char* phase : {"queued", "reading-gpu-record", "checkpointing", "annotating"}) {
    INFO(phase);
    const std::string labels = std::string("kind=\"checkpoint\",phase=\"") + phase + "\"";
    CHECK(after.at("gpuckpt_job_phase_duration_seconds_count{" + labels + "}") == 1);
    CHECK(after.at("gpuckpt_job_phase_duration_seconds_sum{" + labels + "}") ==
          Catch::Approx(job["phase_seconds"][phase].get<double>()).margin(1e-4));
    CHECK(buckets(after, "gpuckpt_job_phase_duration_seconds", labels).back() == 1);
  }
  CHECK(after.count("gpuckpt_job_phase_duration_seconds_count{kind=\"checkpoint\",phase=\"total\"}") == 0);
  // The archive directory now holds the archive, and only that.
  const auto archive_bytes = fs::file_size(job["result"]["archive"].get<std::string>());
  CHECK(after.at("gpuckpt_archive_dir_bytes") == static_cast<double>(archive_bytes));
  CHECK(after.at("gpuckpt_checkpoint_bytes_total") == static_cast<double>(archive_bytes));

  // A refused restore lands among the failures of its kind.
  f.runtime->refuse_restores = true;
  const std::string archive = fs::path(job["result"]["archive"].get<std::string>()).filename();
  const auto rs = f.wait_job("/v1/restores", f.post("/v1/restores", json{{"archive", archive}}.dump(), 202)["id"]);
  CHECK(rs["state"] == "failed");
  auto failed = scrape(f);
  CHECK(failed.at("gpuckpt_job_duration_seconds_count{kind=\"restore\",result=\"failure\"}") == 1);
  CHECK(failed.at("gpuckpt_job_duration_seconds_count{kind=\"restore\",result=\"success\"}") == 0);
  CHECK(failed.at("gpuckpt_restores_total{result=\"failure\"}") == 1);
  CHECK(failed.at("gpuckpt_jobs_in_flight{kind=\"restore\"}") == 0);
  CHECK(failed.at("gpuckpt_job_phase_duration_seconds_count{kind=\"restore\",phase=\"planning\"}") == 1);
}

TEST_CASE("every metric family and job phase the agent exposes is in docs/api.md", "[unit]") {
  Fixture f;
  f.service->metrics().set_runtime("podman", "podman", "5.4.2");
  const std::string id = f.post("/v1/checkpoints", R"({"container":"counter"})", 202)["id"];
  REQUIRE(f.wait_job("/v1/checkpoints", id)["state"] == "succeeded");
  std::ifstream doc_file(std::string(GPUCKPT_SOURCE_DIR) + "/docs/api.md");
  const std::string doc((std::istreambuf_iterator<char>(doc_file)), std::istreambuf_iterator<char>());
  REQUIRE_FALSE(doc.empty());
  const std::string metrics_section = doc.substr(doc.find("## `GET /metrics`"));
  auto res = f.client("").Get("/metrics");
  REQUIRE(res);
  std::istringstream lines(res->body);
  std::size_t families = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      const std::string family = line.substr(7, line.find(' ', 7) - 7);
      INFO(family);
      ++families;
      CHECK((metrics_section.find("`" + family + "`") != std::string::npos ||
             metrics_section.find("`" + family + "{") != std::string::npos));
    }
    if (const auto at = line.find("phase=\""); at != std::string::npos && line[0] != '#') {
      const std::string phase = line.substr(at + 7, line.find('"', at + 7) - at - 7);
      INFO(phase);
      CHECK(metrics_section.find("`" + phase + "`") != std::string::npos);
    }
  }
  CHECK(families >= 12);
}

TEST_CASE("concurrent checkpoints of one container run one after the other", "[unit]") {
  Fixture f;
  std::vector<std::string> ids;
  std::vector<std::thread> clients;
  std::mutex m;
  for (int i = 0; i < 3; ++i)
    clients.emplace_back([&] {
      auto res = f.client().Post("/v1/checkpoints", R"({"container":"counter"})", "application/json");
      std::lock_guard lock(m);
      if (res && res->status == 202) ids.push_back(json::parse(res->body)["id"]);
    });
  for (auto& t : clients) t.join();
  REQUIRE_FALSE(ids.empty());
  f.service->wait_idle();
  int succeeded = 0;
  for (const auto& id : ids) {
    const auto job = f.wait_job("/v1/checkpoints", id);
    if (job["state"] == "succeeded") ++succeeded;
    else CHECK(job["error"].get<std::string>().find("is exited now") != std::string::npos);
  }
  CHECK(succeeded == 1);   // the first one; the others found the container already checkpointed
  CHECK(f.checkpoint_files().size() == 1);
}

TEST_CASE("a container the hook never saw is checkpointed with an empty GPU list", "[unit]") {
  Fixture f;
  const auto job = f.wait_job("/v1/checkpoints", f.post("/v1/checkpoints", R"({"container":"plain"})", 202)["id"]);
  REQUIRE(job["state"] == "succeeded");
  auto info = inspect_checkpoint_archive(job["result"]["archive"].get<std::string>(), ArchiveLimits{});
  REQUIRE(info.ok());
  CHECK(info->gpus->record.used_gpu_ids.empty());
  CHECK(info->gpus->record.node.gpus.size() == 2);
}

TEST_CASE("restore matches GPUs, rewrites the devices and restores", "[unit]") {
  Fixture f;
  const auto ck = f.wait_job("/v1/checkpoints", f.post("/v1/checkpoints", R"({"container":"counter"})", 202)["id"]);
  REQUIRE(ck["state"] == "succeeded");
  const std::string archive = fs::path(ck["result"]["archive"].get<std::string>()).filename();

  SECTION("onto the same GPU: the archive is restored as it is") {
    const auto job = f.wait_job("/v1/restores", f.post("/v1/restores", json{{"archive", archive}}.dump(), 202)["id"]);
    INFO(job.dump());
    REQUIRE(job["state"] == "succeeded");
    REQUIRE(f.runtime->restored.size() == 1);
    const fs::path stored = f.tmp.path / "checkpoints" / archive;
    CHECK(f.runtime->restored_specs[0] == json::parse(*read_archive_entry(stored, "spec.dump", ArchiveLimits{}).value()));
    const auto entries = list_archive(stored, ArchiveLimits{});
    REQUIRE(entries.ok());
    REQUIRE(f.runtime->restored_entries[0].size() == entries->size());
    for (std::size_t i = 0; i < entries->size(); ++i) {
      CHECK(f.runtime->restored_entries[0][i].name == entries.value()[i].name);
      CHECK(f.runtime->restored_entries[0][i].size == entries.value()[i].size);
    }
    CHECK(f.checkpoint_files() == std::vector<std::string>{archive});   // the pipe it read from is gone
    CHECK(job["result"]["plan"]["assignments"][0]["target_id"] == "GPU-0");
    const std::string plan_id = job["result"]["plan"]["id"];
    CHECK(is_restore_plan_id(plan_id));
    CHECK(f.runtime->plan_present_at_restore == std::vector<bool>{true});
    CHECK_FALSE(fs::exists(restore_plan_path(f.tmp.path / "state", plan_id)));   // the job ended: so did its plan
    CHECK_FALSE(fs::exists(restore_plan_path(f.tmp.path / "state", ck["id"].get<std::string>())));
  }
  SECTION("onto the GPU the scheduler assigned: devices and env follow on the way to the runtime, no copy") {
    const auto job = f.wait_job(
        "/v1/restores",
        f.post("/v1/restores", json{{"archive", archive}, {"name", "moved"}, {"target_gpus", {"GPU-1"}}}.dump(), 202)["id"]);
    INFO(job.dump());
    REQUIRE(job["state"] == "succeeded");
    CHECK(job["result"]["container_name"] == "moved");
    REQUIRE(f.runtime->restored_specs.size() == 1);
    const auto& spec = f.runtime->restored_specs[0];
    // GPU 1's node under its own name: NVIDIA's driver opens /dev/nvidia<minor> when it restores the process.
    CHECK(spec["linux"]["devices"][0]["path"] == "/dev/nvidia1");
    CHECK(spec["linux"]["devices"][0]["major"] == 1);
    CHECK(spec["linux"]["devices"][0]["minor"] == 5);
    CHECK(spec["process"]["env"][1] == "NVIDIA_VISIBLE_DEVICES=1");
    CHECK(f.runtime->restored[0].parent_path() == f.tmp.path / "checkpoints");
    CHECK_FALSE(fs::exists(f.runtime->restored[0]));
    CHECK(f.checkpoint_files() == std::vector<std::string>{archive});
    // The stored archive is untouched: it restores onto any GPU again.
    auto stored = json::parse(*read_archive_entry(f.tmp.path / "checkpoints" / archive, "spec.dump", ArchiveLimits{}).value());
    CHECK(stored["linux"]["devices"][0]["minor"] == 3);
  }
  SECTION("the plan is bound to the checkpoint, expires, and names it in the spec the runtime restores") {
    const auto job = f.wait_job(
        "/v1/restores", f.post("/v1/restores", json{{"archive", archive}, {"target_gpus", {"GPU-1"}}}.dump(), 202)["id"]);
    REQUIRE(job["state"] == "succeeded");
    const auto& plan = job["result"]["plan"];
    CHECK(plan["checkpoint_id"] == ck["id"]);
    CHECK(plan["container_id"] == "");   // podman names the restored container's id only once it exists
    const auto expires_at = plan["expires_at"].get<std::int64_t>();
    CHECK(expires_at > plan_clock_now());
    CHECK(expires_at <= plan_clock_now() + f.service->config().runtime_timeout.count() + 60);
    const auto& annotations = f.runtime->restored_specs.at(0)["annotations"];
    CHECK(annotations["io.gpuckpt.restore-plan"] == plan["id"]);
    CHECK(annotations["io.gpuckpt.checkpoint-id"] == ck["id"]);
  }
  SECTION("a restore the runtime refuses leaves no plan behind and names the archive, not the agent's pipe") {
    f.runtime->refuse_restores = true;
    const auto job = f.wait_job(
        "/v1/restores", f.post("/v1/restores", json{{"archive", archive}, {"target_gpus", {"GPU-1"}}}.dump(), 202)["id"]);
    INFO(job.dump());
    REQUIRE(job["state"] == "failed");
    CHECK(f.runtime->plan_present_at_restore == std::vector<bool>{true});
    CHECK(fs::is_empty(f.tmp.path / "state" / "restore-plans"));
    const std::string error = job["error"];
    CHECK(error.find((f.tmp.path / "checkpoints" / archive).string()) != std::string::npos);
    CHECK(error.find(".fifo") == std::string::npos);
  }
  SECTION("onto a GPU this node does not have: 422 with the reason, nothing restored") {
    const auto err = f.post("/v1/restores", json{{"archive", archive}, {"target_gpus", {"GPU-9"}}}.dump(), 422);
    CHECK(err["error"]["message"].get<std::string>().find("no GPU") != std::string::npos);
    CHECK(f.runtime->restored.empty());
  }
}

TEST_CASE("the agent sweeps the plans nobody may use any more when it starts", "[unit]") {
  RestorePlan expired, live;
  for (auto* plan : {&expired, &live}) {
    plan->id = new_restore_plan_id();
    plan->checkpoint_id = "ck-1";
  }
  expired.expires_at = plan_clock_now() - 1;
  live.expires_at = plan_clock_now() + 600;
  Fixture f([&](const fs::path& root) {
    REQUIRE(write_restore_plan(root / "state", expired).ok());
    REQUIRE(write_restore_plan(root / "state", live).ok());
  });
  CHECK_FALSE(fs::exists(restore_plan_path(f.tmp.path / "state", expired.id)));
  CHECK(fs::exists(restore_plan_path(f.tmp.path / "state", live.id)));
}

TEST_CASE("bad restore requests get clear 4xx and restore nothing", "[unit]") {
  Fixture f;
  const auto dir = f.tmp.path / "checkpoints";
  test::make_archive(dir / "good.tar.zst", test::podman_checkpoint_entries());
  test::make_archive(dir / "truncated.tar.zst", test::podman_checkpoint_entries());
  fs::resize_file(dir / "truncated.tar.zst", fs::file_size(dir / "truncated.tar.zst") / 2);
  test::write_file(dir / "junk.tar.zst", "not an archive");
  auto evil = test::podman_checkpoint_entries();
  evil.push_back({"../../escape", "x"});
  test::make_archive(dir / "evil.tar.zst", evil);
  test::make_archive(f.tmp.path / "outside.tar.zst", test::podman_checkpoint_entries());
  fs::create_symlink(f.tmp.path / "outside.tar.zst", dir / "link.tar.zst");
  fs::create_directories(dir / "sub");
  auto no_images = test::podman_checkpoint_entries();
  no_images.erase(no_images.begin() + 4);   // checkpoint/inventory.img
  test::make_archive(dir / "noimages.tar.zst", no_images);

  struct Case {
    json body;
    int status;
    const char* says;
  };
  const Case cases[] = {
      {{{"archive", "../outside.tar.zst"}}, 403, ".."},
      {{{"archive", (f.tmp.path / "outside.tar.zst").string()}}, 403, "outside"},
      {{{"archive", "/etc/passwd"}}, 403, "outside"},
      {{{"archive", "link.tar.zst"}}, 403, "symlink"},
      {{{"archive", "absent.tar.zst"}}, 404, "does not exist"},
      {{{"archive", "sub"}}, 400, "regular file"},
      {{{"archive", ""}}, 400, "empty"},
      {{{"archive", "truncated.tar.zst"}}, 422, "truncated"},
      {{{"archive", "junk.tar.zst"}}, 422, "junk"},
      {{{"archive", "evil.tar.zst"}}, 422, "climbs out"},
      {{{"archive", "noimages.tar.zst"}}, 422, "CRIU images"},
      {{{"archive", "good.tar.zst"}, {"name", "../x"}}, 400, "name"},
      {{{"archive", "good.tar.zst"}, {"target_gpus", "GPU-0"}}, 400, "array"},
  };
  for (const auto& c : cases) {
    INFO(c.body.dump());
    const auto err = f.post("/v1/restores", c.body.dump(), c.status);
    CHECK(err["error"]["message"].get<std::string>().find(c.says) != std::string::npos);
  }
  CHECK(f.runtime->restored.empty());
  // The good one restores anywhere: it carries no GPU record.
  const auto job = f.wait_job("/v1/restores", f.post("/v1/restores", R"({"archive":"good.tar.zst"})", 202)["id"]);
  CHECK(job["state"] == "succeeded");
  CHECK_FALSE(job["result"].contains("plan"));
  CHECK(f.runtime->restored.size() == 1);
}

TEST_CASE("hostile bodies and archives fail their request or job, never the agent", "[unit]") {
  Fixture f;
  SECTION("a body nested 100k levels deep is a 400") {
    const auto err = f.post("/v1/restores", std::string(2000, '[') + std::string(2000, ']'), 400);
    CHECK(err["error"]["message"].get<std::string>().find("nested deeper") != std::string::npos);
  }
  SECTION("an archive whose spec.dump devices are not objects fails its restore job with the field named") {
    const auto ck = f.wait_job("/v1/checkpoints", f.post("/v1/checkpoints", R"({"container":"counter"})", 202)["id"]);
    REQUIRE(ck["state"] == "succeeded");
    const fs::path archive = ck["result"]["archive"].get<std::string>();
    auto spec = json::parse(*read_archive_entry(archive, "spec.dump", ArchiveLimits{}).value());
    spec["linux"]["devices"] = json::array({"not-a-device", 7});
    ArchiveEdit edit;
    edit.replace["spec.dump"] = spec.dump();
    REQUIRE(rewrite_archive(archive, archive, edit, ArchiveLimits{}).ok());
    const auto job = f.wait_job(
        "/v1/restores",
        f.post("/v1/restores", json{{"archive", archive.filename()}, {"target_gpus", {"GPU-1"}}}.dump(), 202)["id"]);
    CHECK(job["state"] == "failed");
    CHECK(job["error"].get<std::string>().find("linux.devices[0] is not a device object") != std::string::npos);
    CHECK(f.runtime->restored.empty());
    auto health = f.client().Get("/healthz");
    REQUIRE(health);
    CHECK(health->status == 200);
  }
}

TEST_CASE("an archive moved to this node becomes a checkpoint image in the runtime's store", "[unit]") {
  Fixture f;
  const auto ck = f.wait_job("/v1/checkpoints",
                             f.post("/v1/checkpoints", R"({"container":"counter"})", 202)["id"].get<std::string>());
  REQUIRE(ck["state"] == "succeeded");
  const std::string archive = fs::path(ck["result"]["archive"].get<std::string>()).filename();
  const auto started = f.post("/v1/images", json{{"archive", archive}, {"image", "moved-1"}}.dump(), 202);
  CHECK(started["kind"] == "image");
  const std::string id = started["id"];
  CHECK(id.rfind("im-", 0) == 0);
  const auto job = f.wait_job("/v1/images", id);
  INFO(job.dump());
  REQUIRE(job["state"] == "succeeded");
  CHECK(job["result"]["image"]["loaded_as"] == "store/moved-1");
  CHECK(job["result"]["image"]["reference"] == "moved-1");
  CHECK(job["result"]["gpu_record"] == true);
  CHECK(f.runtime->loaded == std::vector<std::string>{"store/moved-1"});
  // The store holds it: no second copy of the checkpoint is left beside the archive.
  CHECK(f.checkpoint_files() == std::vector<std::string>{archive});
  // gpuckpt-nri finds the checkpoint's GPU record under the store's name.
  auto registered = find_checkpoint_source(f.tmp.path / "state", "store/moved-1");
  REQUIRE(registered.ok());
  REQUIRE(registered->has_value());
  CHECK(registered->value().record.record.used_gpu_ids == std::vector<std::string>{"GPU-0"});
  CHECK(registered->value().manifest_digest == job["result"]["image"]["manifest_digest"]);
  // Only under the store's name: the bare tag is nobody's image name here.
  CHECK_FALSE(find_checkpoint_source(f.tmp.path / "state", "moved-1").value());
  // Without a tag, the job's id (lower case) is the tag; the job is listed under /v1/images only.
  const auto untagged = f.wait_job("/v1/images", f.post("/v1/images", json{{"archive", archive}}.dump(), 202)["id"]);
  std::string lower = untagged["id"];
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  CHECK(untagged["result"]["image"]["loaded_as"] == "store/" + lower);
  CHECK(f.client().Get(("/v1/restores/" + untagged["id"].get<std::string>()).c_str())->status == 404);
}

TEST_CASE("image requests: paths and tags from the request are not trusted; no store is a clear failure", "[unit]") {
  Fixture f;
  test::make_archive(f.tmp.path / "checkpoints" / "good.tar.zst", test::podman_checkpoint_entries());
  fs::create_directories(f.tmp.path / "elsewhere");
  test::make_archive(f.tmp.path / "elsewhere" / "out.tar.zst", test::podman_checkpoint_entries());
  fs::create_symlink(f.tmp.path / "elsewhere" / "out.tar.zst", f.tmp.path / "checkpoints" / "link.tar.zst");
  test::write_file(f.tmp.path / "checkpoints" / "junk.tar.zst", "not an archive");
  struct Case {
    json body;
    int status;
    const char* says;
  };
  for (const auto& c : std::vector<Case>{
           {{{"archive", "../elsewhere/out.tar.zst"}}, 403, "contains '..'"},
           {{{"archive", (f.tmp.path / "elsewhere" / "out.tar.zst").string()}}, 403, "outside"},
           {{{"archive", "link.tar.zst"}}, 403, "symlink"},
           {{{"archive", "missing.tar.zst"}}, 404, "does not exist"},
           {{{"archive", "junk.tar.zst"}}, 422, "cannot become a checkpoint image"},
           {{{"archive", "good.tar.zst"}, {"image", "../../x"}}, 400, "image tag"},
           {{{"archive", "good.tar.zst"}, {"image", "a:b"}}, 400, "image tag"},
           {{{"archive", "good.tar.zst"}, {"layout", "/etc"}}, 400, "unknown field 'layout'"},
       }) {
    INFO(c.body.dump());
    const auto answer = f.post("/v1/images", c.body.dump(), c.status);
    CHECK(answer["error"]["message"].get<std::string>().find(c.says) != std::string::npos);
  }
  CHECK(f.runtime->loaded.empty());
  // A runtime without a store the agent can fill: the job fails saying so, and keeps the layout for a manual load.
  f.runtime->has_store = false;
  const auto job = f.wait_job("/v1/images", f.post("/v1/images", R"({"archive":"good.tar.zst"})", 202)["id"]);
  CHECK(job["state"] == "failed");
  CHECK(job["error"].get<std::string>().find("no image store to load into") != std::string::npos);
  CHECK(job["error"].get<std::string>().find("is kept") != std::string::npos);
  CHECK(fs::is_directory(f.tmp.path / "checkpoints" / node::image_layout_name(job["id"].get<std::string>())));
}

TEST_CASE("with an image_registry, images go to the registry too; a node without a store uses it alone", "[e2e]") {
  test::RegistryServer registry;
  if (!registry.ready()) SKIP("docker-registry is not installed or did not start (scripts/setup.sh installs it)");
  Fixture f({}, [&](node::AgentConfig& config) {
    config.image_registry.repository = registry.host() + "/gpuckpt/ck";
    config.image_registry.plain_http = true;
  });
  // A checkpoint with an image tag: loaded into the store and pushed.
  const auto ck = f.wait_job("/v1/checkpoints",
                             f.post("/v1/checkpoints", R"({"container":"counter","image":"pushed-1"})", 202)["id"]);
  REQUIRE(ck["state"] == "succeeded");
  const std::string digest = ck["result"]["image"]["manifest_digest"];
  CHECK(ck["result"]["image"]["loaded_as"] == "store/pushed-1");
  CHECK(ck["result"]["image"]["pushed_as"] == registry.host() + "/gpuckpt/ck:pushed-1@" + digest);
  CHECK(ck["phase_seconds"].contains("pushing-image"));
  // A moved archive on a node whose runtime has no store the agent fills (CRI-O): the registry alone holds it, and
  // gpuckpt-nri knows its registry name.
  f.runtime->has_store = false;
  const std::string archive = fs::path(ck["result"]["archive"].get<std::string>()).filename();
  const auto im = f.wait_job("/v1/images", f.post("/v1/images", json{{"archive", archive}, {"image", "moved-2"}}.dump(), 202)["id"]);
  INFO(im.dump());
  REQUIRE(im["state"] == "succeeded");
  CHECK_FALSE(im["result"]["image"].contains("loaded_as"));
  CHECK(im["result"]["image"]["load_error"].get<std::string>().find("no image store") != std::string::npos);
  CHECK(im["result"]["image"]["pushed_as"].get<std::string>().rfind(registry.host() + "/gpuckpt/ck:moved-2@sha256:", 0) == 0);
  auto registered = find_checkpoint_source(f.tmp.path / "state", registry.host() + "/gpuckpt/ck:moved-2");
  REQUIRE(registered.ok());
  CHECK(registered->has_value());
  CHECK(f.checkpoint_files() == std::vector<std::string>{archive, node::image_layout_name(ck["id"].get<std::string>())});
}

TEST_CASE("a store-backed checkpoint image takes its chunks to the registry; another agent pulls them "
          "(POST /v1/chunk-pulls)", "[e2e]") {
  test::RegistryServer registry;
  if (!registry.ready()) SKIP("docker-registry is not installed or did not start (scripts/setup.sh installs it)");
  test::TempDir stores("gpuckpt-api-chunks");
  const auto with_registry = [&registry](std::optional<fs::path> store) {
    return [&registry, store](node::AgentConfig& config) {
      config.image_registry.repository = registry.host() + "/gpuckpt/ck";
      config.image_registry.plain_http = true;
      if (store) config.gpu_memory.store = store->string();
    };
  };
  Fixture source({}, with_registry(stores.path / "source"));
  auto c = test::write_store_checkpoint(test::open_store(stores.path / "source"), stores.path / "made",
                                        {{7, {test::random_chunk(1), test::random_chunk(2), test::random_chunk(1)}}});
  REQUIRE(c);
  fs::copy_file(c->archive, source.tmp.path / "checkpoints" / "sb.tar");
  const auto im = source.wait_job("/v1/images", source.post("/v1/images", json{{"archive", "sb.tar"}, {"image", "sb-1"}}.dump(),
                                                             202)["id"]);
  INFO(im.dump());
  REQUIRE(im["state"] == "succeeded");
  const json chunks = im["result"]["image"]["chunks"];
  CHECK(chunks["chunks"] == 2);
  CHECK(chunks["uploaded"] == 2);
  CHECK(chunks["artifact"].get<std::string>().rfind(registry.host() + "/gpuckpt/ck:sb-1.gpuckpt-chunks@sha256:", 0) == 0);

  // Another agent with an empty store pulls them, and the checkpoint restores from its store.
  Fixture target({}, with_registry(stores.path / "target"));
  const std::string image = registry.host() + "/gpuckpt/ck:sb-1";
  const auto pulled = target.wait_job("/v1/chunk-pulls",
                                      target.post("/v1/chunk-pulls", json{{"image", image}}.dump(), 202)["id"]);
  INFO(pulled.dump());
  REQUIRE(pulled["state"] == "succeeded");
  CHECK(pulled["id"].get<std::string>().rfind("pl-", 0) == 0);
  CHECK(pulled["result"]["added"] == 2);
  CHECK(pulled["result"]["subject"] == im["result"]["image"]["manifest_digest"]);
  CHECK(pulled["result"]["store"] == (stores.path / "target").string());
  test::check_restorable(*c, c->archive, test::open_store(stores.path / "target"));
  CHECK(target.client().Get("/v1/chunk-pulls")->body.find(pulled["id"].get<std::string>()) != std::string::npos);
  // `gpuckpt pull-chunks --agent` has the agent pull (its own store and settings): everything is there now.
  test::write_file(stores.path / "token", std::string(kToken) + "\n");
  const std::string cli = std::string(GPUCKPT_CLI) + " pull-chunks " + image + " --agent http://127.0.0.1:" +
                          std::to_string(target.port) + " --token-file " + (stores.path / "token").string();
  CHECK(std::system((cli + " --json > " + (stores.path / "cli.json").string() + " 2>/dev/null").c_str()) == 0);
  const json by_cli = json::parse(test::read_file(stores.path / "cli.json"), nullptr, false);
  INFO(test::read_file(stores.path / "cli.json"));
  CHECK(by_cli["kind"] == "pull");
  CHECK(by_cli["result"]["added"] == 0);
  CHECK(by_cli["result"]["present"] == 2);
  // The local flags mean nothing to an agent: refused, exit 2.
  CHECK(WEXITSTATUS(std::system((cli + " --store /tmp >/dev/null 2>&1").c_str())) == 2);

  // Refused before any job: names that are no image, unknown fields, an agent without a store.
  CHECK(target.post("/v1/chunk-pulls", R"({"image":"no-tag-here"})", 400)["error"]["message"].get<std::string>().find(
            "HOST[:PORT]/PATH:TAG") != std::string::npos);
  target.post("/v1/chunk-pulls", json{{"image", image}, {"store", "/etc"}}.dump(), 400);
  target.post("/v1/chunk-pulls", "{}", 400);
  Fixture storeless({}, with_registry(std::nullopt));
  CHECK(storeless.post("/v1/chunk-pulls", json{{"image", image}}.dump(), 409)["error"]["message"].get<std::string>().find(
            "gpu_memory.store") != std::string::npos);
}

TEST_CASE("a checkpoint's record has the plugin's own steps as parts when its timings travel with the archive",
          "[unit]") {
  const std::string stats = test::criu_dump_stats_image();
  Fixture f;
  f.runtime->extra_entries = {{"stats-dump", stats},
                              {"gpuckpt-dump-timings.json", R"({"gpu-lock":0.001,"gpu-checkpoint":0.002,)"
                                                            R"("gpu-memory-images":0.003,"cpu-pages-store":0.004})"}};
  const auto gpu = f.wait_job("/v1/checkpoints", f.post("/v1/checkpoints", R"({"container":"counter"})", 202)["id"]);
  INFO(gpu.dump());
  REQUIRE(gpu["state"] == "succeeded");
  const json parts = gpu["runtime_phase_seconds"];
  CHECK(parts.size() == 8);
  double sum = 0;
  for (const auto& [part, seconds] : parts.items()) {
    CHECK(seconds.get<double>() >= 0);
    sum += seconds.get<double>();
  }
  for (const char* part : {"gpuckpt-gpu-lock", "gpuckpt-gpu-checkpoint", "gpuckpt-gpu-memory-images",
                           "gpuckpt-cpu-pages-store"})
    CHECK(parts.contains(part));
  CHECK(sum <= gpu["phase_seconds"]["checkpointing"].get<double>() + 1e-9);
  CHECK(scrape(f).at("gpuckpt_job_runtime_phase_duration_seconds_count{kind=\"checkpoint\",phase=\"gpuckpt-gpu-lock\"}") == 1);

  // Timings the agent cannot read split nothing of the plugin's; CRIU's parts stay.
  f.runtime->extra_entries = {{"stats-dump", stats}, {"gpuckpt-dump-timings.json", R"({"gpu-lock":"soon"})"}};
  const auto odd = f.wait_job("/v1/checkpoints", f.post("/v1/checkpoints", R"({"container":"plain"})", 202)["id"]);
  REQUIRE(odd["state"] == "succeeded");
  CHECK(odd["runtime_phase_seconds"].size() == 4);
  CHECK_FALSE(odd["runtime_phase_seconds"].contains("gpuckpt-gpu-lock"));
}

TEST_CASE("a checkpoint's record splits its runtime call by CRIU's statistics; /metrics has their histograms",
          "[unit]") {
  Fixture f;
  f.runtime->extra_entries = {{"stats-dump", test::criu_dump_stats_image()}};
  const auto job = f.wait_job("/v1/checkpoints", f.post("/v1/checkpoints", R"({"container":"counter"})", 202)["id"]);
  INFO(job.dump());
  REQUIRE(job["state"] == "succeeded");
  const json steps = job["phase_seconds"], parts = job["runtime_phase_seconds"];
  const double total = steps["total"].get<double>();
  double steps_sum = 0, parts_sum = 0;
  for (const auto& [name, seconds] : steps.items()) {
    CHECK(seconds.get<double>() >= 0);
    if (name != "total") steps_sum += seconds.get<double>();
  }
  CHECK(steps_sum <= total);
  REQUIRE(parts.is_object());
  for (const char* part : {"criu-freezing", "criu-cpu-pages", "criu-frozen-other", "runtime-other"}) {
    INFO(part);
    REQUIRE(parts.contains(part));
    CHECK(parts[part].get<double>() >= 0);
    parts_sum += parts[part].get<double>();
  }
  CHECK(parts.size() == 4);
  CHECK(parts_sum <= steps["checkpointing"].get<double>() + 1e-9);
  CHECK(job["result"]["criu_pages"] == json{{"scanned", 48}, {"written", 33}});
  // Read as it passed, kept as it was.
  auto kept = read_archive_entry(job["result"]["archive"].get<std::string>(), "stats-dump", ArchiveLimits{});
  REQUIRE(kept);
  CHECK(kept->value_or("") == test::criu_dump_stats_image());

  const auto metrics = scrape(f);
  for (const auto& [part, seconds] : parts.items()) {
    INFO(part);
    const std::string labels = "kind=\"checkpoint\",phase=\"" + part + "\"";
    CHECK(metrics.at("gpuckpt_job_runtime_phase_duration_seconds_count{" + labels + "}") == 1);
    CHECK(metrics.at("gpuckpt_job_runtime_phase_duration_seconds_sum{" + labels + "}") ==
          Catch::Approx(seconds.get<double>()).margin(1e-4));
    const auto b = buckets(metrics, "gpuckpt_job_runtime_phase_duration_seconds", labels);
    CHECK(std::is_sorted(b.begin(), b.end()));
    CHECK(b.back() == 1);
  }

  // An archive without CRIU's statistics: the steps only, nothing made up.
  f.runtime->extra_entries.clear();
  const auto plain = f.wait_job("/v1/checkpoints", f.post("/v1/checkpoints", R"({"container":"plain"})", 202)["id"]);
  REQUIRE(plain["state"] == "succeeded");
  CHECK_FALSE(plain.contains("runtime_phase_seconds"));
  CHECK_FALSE(plain["result"].contains("criu_pages"));
  CHECK(scrape(f).at("gpuckpt_job_runtime_phase_duration_seconds_count{kind=\"checkpoint\",phase=\"criu-freezing\"}") == 1);


  // A restore whose runtime reports its times (podman --print-stats) is split by them too.
  f.runtime->restore_stats = PodmanRestoreStats{"restored-1", 0.550032, 0.177004, 0.104568};
  const std::string archive = fs::path(job["result"]["archive"].get<std::string>()).filename();
  const auto rs = f.wait_job("/v1/restores", f.post("/v1/restores", json{{"archive", archive}}.dump(), 202)["id"]);
  INFO(rs.dump());
  REQUIRE(rs["state"] == "succeeded");
  const json restore_parts = rs["runtime_phase_seconds"];
  REQUIRE(restore_parts.is_object());
  CHECK(restore_parts.size() == 3);
  double restore_sum = 0;
  for (const char* part : {"criu-restore", "runtime-other", "podman-other"}) {
    INFO(part);
    REQUIRE(restore_parts.contains(part));
    CHECK(restore_parts[part].get<double>() >= 0);
    restore_sum += restore_parts[part].get<double>();
    CHECK(scrape(f).at("gpuckpt_job_runtime_phase_duration_seconds_count{kind=\"restore\",phase=\"" +
                       std::string(part) + "\"}") == 1);
  }
  CHECK(restore_sum <= rs["phase_seconds"]["restoring"].get<double>() + 1e-9);
  CHECK(rs["phase_seconds"]["restoring"].get<double>() <= rs["phase_seconds"]["total"].get<double>());

  // The plugin's own steps, as it leaves them in the node store for the restored pid (the fake's 4242): carved out
  // of the parts that hold them, and taken, so none stays for a later process of that pid.
  const fs::path node_store = f.tmp.path / "node-store";
  REQUIRE(gpuckpt::chunk_store::Store::open(node_store, true));
  // (Times small enough for the fake's call: a part never gets more than the agent's own clock saw.)
  f.runtime->restore_stats = PodmanRestoreStats{"restored-2", 0.0009, 0.0006, 0.0003};
  REQUIRE(gpuckpt::memory_lineage::spool_restore_timings(
      node_store.string(), 4242, gpuckpt::serialize_plugin_restore_timings({0.0001, 0.0001, 0.0001})));
  const fs::path spooled = node_store / gpuckpt::memory_lineage::kRestoreTimingsDir / "4242.json";
  REQUIRE(fs::exists(spooled));
  const auto rs2 = f.wait_job("/v1/restores", f.post("/v1/restores", json{{"archive", archive}}.dump(), 202)["id"]);
  INFO(rs2.dump());
  REQUIRE(rs2["state"] == "succeeded");
  const json steps2 = rs2["runtime_phase_seconds"];
  REQUIRE(steps2.size() == 6);
  CHECK(steps2["gpuckpt-cpu-pages"].get<double>() == Catch::Approx(0.0001));
  CHECK(steps2["gpuckpt-gpu-memory"].get<double>() == Catch::Approx(0.0001));
  CHECK(steps2["gpuckpt-gpu-restore"].get<double>() == Catch::Approx(0.0001));
  CHECK(steps2["criu-restore"].get<double>() == Catch::Approx(0.0001));
  CHECK(scrape(f).at("gpuckpt_job_runtime_phase_duration_seconds_count{kind=\"restore\",phase=\"gpuckpt-gpu-restore\"}") == 1);
  CHECK_FALSE(fs::exists(spooled));

  // A runtime that prints no restore times (containerd): the plugin's steps alone split the call.
  f.runtime->restore_stats.reset();
  REQUIRE(gpuckpt::memory_lineage::spool_restore_timings(
      node_store.string(), 4242, gpuckpt::serialize_plugin_restore_timings({0.0001, 0.0001, 0.0001})));
  const auto bare = f.wait_job("/v1/restores", f.post("/v1/restores", json{{"archive", archive}}.dump(), 202)["id"]);
  REQUIRE(bare["state"] == "succeeded");
  CHECK(bare["runtime_phase_seconds"].size() == 4);
  CHECK(bare["runtime_phase_seconds"]["gpuckpt-gpu-restore"].get<double>() == Catch::Approx(0.0001));
  CHECK(bare["runtime_phase_seconds"].contains("runtime-other"));
  CHECK_FALSE(fs::exists(spooled));
  f.runtime->restore_stats = PodmanRestoreStats{"restored-2", 0.0009, 0.0006, 0.0003};

  // What the plugin left is not trusted: a file that is no timings is dropped with a warning, the split stays CRIU's.
  { std::ofstream(spooled) << R"({"gpu-restore": -3})"; }
  const auto rs3 = f.wait_job("/v1/restores", f.post("/v1/restores", json{{"archive", archive}}.dump(), 202)["id"]);
  REQUIRE(rs3["state"] == "succeeded");
  CHECK(rs3["runtime_phase_seconds"].size() == 3);
  CHECK_FALSE(fs::exists(spooled));
}

TEST_CASE("restores no job ran: their plugin steps are observed once they are old enough, and removed", "[unit]") {
  if (::geteuid() != 0) SKIP("the node store must be root's");
  Fixture f;
  const fs::path node_store = f.tmp.path / "node-store";
  REQUIRE(gpuckpt::chunk_store::Store::open(node_store, true));
  const fs::path spool = node_store / gpuckpt::memory_lineage::kRestoreTimingsDir;
  const auto left = [&](int pid, const std::string& text, std::chrono::seconds age) {
    REQUIRE(gpuckpt::memory_lineage::spool_restore_timings(node_store.string(), pid, text));
    fs::last_write_time(spool / (std::to_string(pid) + ".json"), fs::file_time_type::clock::now() - age);
  };
  // A kubelet restore a minute ago, one just now (a job of the agent may still take it), one that is no timings.
  left(::getpid(), gpuckpt::serialize_plugin_restore_timings({1.5, 0.5, 1.25}), std::chrono::seconds(60));
  left(1, gpuckpt::serialize_plugin_restore_timings({9, 9, 9}), std::chrono::seconds(0));
  left(::getppid(), R"({"gpu-memory": "fast"})", std::chrono::seconds(3600));
  f.service->sweep_restore_timings();
  const auto metrics = scrape(f);
  CHECK(metrics.at("gpuckpt_runtime_restore_step_duration_seconds_count{step=\"gpu-restore\"}") == 1);
  CHECK(metrics.at("gpuckpt_runtime_restore_step_duration_seconds_sum{step=\"cpu-pages\"}") == 1.5);
  CHECK(metrics.at("gpuckpt_runtime_restore_step_duration_seconds_bucket{step=\"gpu-restore\",le=\"2.5\"}") == 1);
  CHECK_FALSE(fs::exists(spool / (std::to_string(::getpid()) + ".json")));
  CHECK_FALSE(fs::exists(spool / (std::to_string(::getppid()) + ".json")));
  CHECK(fs::exists(spool / "1.json"));
  // Observed once: the next sweep finds nothing more of it.
  f.service->sweep_restore_timings();
  CHECK(scrape(f).at("gpuckpt_runtime_restore_step_duration_seconds_count{step=\"gpu-restore\"}") == 1);
}

TEST_CASE("a token holder's tag never makes an ordinary image a checkpoint, and a failed load registers nothing",
          "[unit]") {
  Fixture f;
  const auto ck = f.wait_job("/v1/checkpoints",
                             f.post("/v1/checkpoints", R"({"container":"counter"})", 202)["id"].get<std::string>());
  REQUIRE(ck["state"] == "succeeded");
  const std::string archive = fs::path(ck["result"]["archive"].get<std::string>()).filename();
  const fs::path state = f.tmp.path / "state";
  const auto busybox = f.wait_job("/v1/images", f.post("/v1/images", json{{"archive", archive}, {"image", "busybox"}}.dump(), 202)["id"]);
  REQUIRE(busybox["state"] == "succeeded");
  CHECK(find_checkpoint_source(state, "store/busybox").value());   // the name the store gave it
  for (const char* ordinary : {"busybox", "docker.io/library/busybox:latest", "busybox:latest"})
    CHECK_FALSE(find_checkpoint_source(state, ordinary).value());
  // The store refuses the image: the job fails and the index is unchanged.
  f.runtime->load_fails = true;
  const auto failed = f.wait_job("/v1/images", f.post("/v1/images", json{{"archive", archive}, {"image", "nginx"}}.dump(), 202)["id"]);
  CHECK(failed["state"] == "failed");
  for (const char* name : {"store/nginx", "nginx", "docker.io/library/nginx:latest", "localhost/gpuckpt-checkpoint:nginx"})
    CHECK_FALSE(find_checkpoint_source(state, name).value());
}

TEST_CASE("GET /v1/runtime says which runtime and whether restores are pods", "[unit]") {
  Fixture f;
  f.service->metrics().set_runtime("podman", "podman", "4.3.1");
  auto res = f.client().Get("/v1/runtime");
  REQUIRE(res);
  CHECK(res->status == 200);
  CHECK(json::parse(res->body) == json{{"kind", "podman"}, {"name", "podman"}, {"version", "4.3.1"}, {"restores", "container"}});
  CHECK(f.client("").Get("/v1/runtime")->status == 401);
}

TEST_CASE("GET /v1/runtime answers every runtime kind's restore unit: containers on podman and containerd, pods on CRI",
          "[unit]") {
  const std::map<std::string, std::string> expected = {
      {"podman", "container"}, {"containerd", "container"}, {"cri", "pod"}, {"kubelet", "pod"}};
  REQUIRE(node::kRuntimeKinds.size() == expected.size());
  for (const auto& kind : node::kRuntimeKinds) {
    Fixture f({}, [&](node::AgentConfig& config) { config.runtime_kind = std::string(kind.name); });
    auto res = f.client().Get("/v1/runtime");
    REQUIRE(res);
    const auto body = json::parse(res->body);
    CHECK(body["kind"] == std::string(kind.name));
    CHECK(body["restores"] == expected.at(std::string(kind.name)));
  }
}

TEST_CASE("an agent restarted mid-job closes the job and removes its temporary files", "[unit]") {
  const std::string interrupted = "ck-20261123T120000Z-0badf00d";
  const std::string restoring = "rs-20261123T120001Z-0badf00e";
  const std::string finished = "ck-20261123T110000Z-600dd00d";
  const std::string annotated = "ck-20261123T120002Z-0badf00f";
  const std::string imaging = "ck-20261123T120003Z-0badf010";
  const std::string loading = "im-20261123T120004Z-0badf011";
  const std::string streamed = "ck-20261123T120005Z-0badf012";
  Fixture f([&](const fs::path& root) {
    // What a killed agent leaves: job records in the state dir, its temporary files in the checkpoint dir.
    auto record = [&](const std::string& id, node::JobKind kind, node::JobState state, const char* phase) {
      node::JobStatus job;
      job.id = id;
      job.kind = kind;
      job.state = state;
      job.phase = phase;
      job.created_at = "2026-11-23T12:00:00Z";
      REQUIRE(node::save_job(root / "state", job).ok());
    };
    record(interrupted, node::JobKind::checkpoint, node::JobState::running, "checkpointing");
    record(restoring, node::JobKind::restore, node::JobState::running, "restoring");
    record(streamed, node::JobKind::checkpoint, node::JobState::running, "checkpointing");
    record(finished, node::JobKind::checkpoint, node::JobState::succeeded, "done");
    record(annotated, node::JobKind::checkpoint, node::JobState::running, "annotating");
    record(imaging, node::JobKind::checkpoint, node::JobState::running, "writing-image");
    record(loading, node::JobKind::image, node::JobState::running, "loading-image");
    test::write_file(root / "checkpoints" / "im-20261123t120004z-0badf011.oci" / "index.json", "{}");
    test::make_archive(root / "checkpoints" / (imaging + ".tar.zst"), test::podman_checkpoint_entries());
    test::write_file(root / "checkpoints" / "ck-20261123t120003z-0badf010.oci" / "oci-layout", "{");
    REQUIRE(::mkfifo((root / "checkpoints" / ("." + interrupted + ".runtime.fifo")).c_str(), 0600) == 0);
    test::write_file(root / "checkpoints" / ("." + interrupted + ".tar.zst.partial-99999-3"), "half");
    REQUIRE(::mkfifo((root / "checkpoints" / ("." + restoring + ".restore.fifo")).c_str(), 0600) == 0);
    // Renamed into place while the runtime was still finishing: the archive is complete.
    REQUIRE(::mkfifo((root / "checkpoints" / ("." + streamed + ".runtime.fifo")).c_str(), 0600) == 0);
    test::make_archive(root / "checkpoints" / (streamed + ".tar.zst"), test::podman_checkpoint_entries());
    test::write_file(root / "checkpoints" / ("." + annotated + ".tar.zst.partial-99999-1"), "half");
    test::make_archive(root / "checkpoints" / (annotated + ".tar.zst"), test::podman_checkpoint_entries());
    test::write_file(root / "checkpoints" / ".other.tar.zst.partial-99999-2", "left by a dead rewrite");
    test::write_file(root / "checkpoints" / "kept.tar.zst", "an archive of someone else");
  });
  auto get = [&](const char* collection, const std::string& id) {
    auto res = f.client().Get((std::string(collection) + "/" + id).c_str());
    REQUIRE(res);
    REQUIRE(res->status == 200);
    return json::parse(res->body);
  };
  const auto ck = get("/v1/checkpoints", interrupted);
  CHECK(ck["state"] == "failed");
  CHECK(ck["error"].get<std::string>().find("the agent stopped while this job was checkpointing") == 0);
  const auto rs = get("/v1/restores", restoring);
  CHECK(rs["state"] == "failed");
  CHECK(get("/v1/checkpoints", finished)["state"] == "succeeded");
  // Killed after the archive's rename: the archive is complete, so the job is.
  const auto done = get("/v1/checkpoints", annotated);
  CHECK(done["state"] == "succeeded");
  CHECK(done["result"]["recovered_after_restart"] == true);
  CHECK(get("/v1/checkpoints", streamed)["state"] == "succeeded");
  // Killed while writing the OCI image: the archive is complete, the partial image is removed.
  const auto image = get("/v1/checkpoints", imaging);
  CHECK(image["state"] == "failed");
  CHECK(image["error"].get<std::string>().find("the image is not") != std::string::npos);
  // Killed while loading a moved archive's image: the layout goes, the archive it came from is untouched.
  const auto im = get("/v1/images", loading);
  CHECK(im["state"] == "failed");
  CHECK(im["error"].get<std::string>().find("the archive is untouched") != std::string::npos);
  CHECK(f.checkpoint_files() ==
        std::vector<std::string>{annotated + ".tar.zst", imaging + ".tar.zst", streamed + ".tar.zst", "kept.tar.zst"});
  // The closed records were saved: a second restart sees the same outcome.
  bool found = false;
  for (const auto& job : node::load_jobs(f.tmp.path / "state"))
    if (job.id == interrupted) found = job.state == node::JobState::failed;
  CHECK(found);
}

TEST_CASE("a checkpoint whose runtime fails, or whose archive dir vanishes, fails clearly and leaves nothing", "[unit]") {
  Fixture f;
  SECTION("the runtime dies after writing part of its output") {
    f.runtime->checkpoint_fault = [](const fs::path&, std::string&) -> Result<void> {
      return make_error("podman container checkpoint: exit status 137 (killed)", EIO);
    };
    const auto job = f.wait_job("/v1/checkpoints", f.post("/v1/checkpoints", R"({"container":"counter"})", 202)["id"]);
    CHECK(job["state"] == "failed");
    CHECK(job["error"].get<std::string>().find("killed") != std::string::npos);
  }
  SECTION("the runtime's output is cut, yet it says it succeeded") {
    f.runtime->checkpoint_fault = [](const fs::path&, std::string& rest) -> Result<void> {
      rest.clear();   // what a full disk under the runtime leaves: a cut stream
      return {};
    };
    const auto job = f.wait_job("/v1/checkpoints", f.post("/v1/checkpoints", R"({"container":"counter"})", 202)["id"]);
    CHECK(job["state"] == "failed");
    CHECK(job["error"].get<std::string>().find("runcated") != std::string::npos);   // "Truncated zstd input"
  }
  SECTION("the archive directory is removed mid-job") {
    f.runtime->checkpoint_fault = [](const fs::path& archive, std::string&) -> Result<void> {
      fs::remove_all(archive.parent_path());
      return {};
    };
    const auto job = f.wait_job("/v1/checkpoints", f.post("/v1/checkpoints", R"({"container":"counter"})", 202)["id"]);
    CHECK(job["state"] == "failed");
    CHECK(job["error"].get<std::string>().find("No such file or directory") != std::string::npos);
    fs::create_directories(f.tmp.path / "checkpoints");
  }
  CHECK(f.checkpoint_files().empty());
  // The agent goes on: the next checkpoint works.
  f.runtime->checkpoint_fault = {};
  f.runtime->containers["counter"].state = "running";
  const auto again = f.wait_job("/v1/checkpoints", f.post("/v1/checkpoints", R"({"container":"counter"})", 202)["id"]);
  CHECK(again["state"] == "succeeded");
}

TEST_CASE("queued jobs are capped per client and in all; beyond, 429 before any work", "[unit]") {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  Fixture f({}, [](node::AgentConfig& c) {
    c.max_concurrent_jobs = 1;
    c.max_queued_jobs = 3;
    c.max_queued_jobs_per_client = 2;
  });
  f.runtime->checkpoint_fault = [released](const fs::path&, std::string&) -> Result<void> {
    released.wait();   // the running job holds its slot until the test lets it go
    return {};
  };
  const ContainerRef counter{"", "", "counter"};
  CHECK(f.service->start_checkpoint(counter, "", "client-a").ok());
  CHECK(f.service->start_checkpoint(counter, "", "client-a").ok());
  auto third = f.service->start_checkpoint(counter, "", "client-a");
  REQUIRE_FALSE(third.ok());
  CHECK(third.error().errno_value == EAGAIN);
  CHECK(third.error().message.find("limits.max_queued_jobs_per_client") != std::string::npos);
  CHECK(f.service->start_checkpoint(counter, "", "client-b").ok());
  auto over = f.service->start_checkpoint(counter, "", "client-c");
  REQUIRE_FALSE(over.ok());
  CHECK(over.error().message.find("limits.max_queued_jobs)") != std::string::npos);
  // Through the API: 429 with Retry-After, and no job record for it.
  auto res = f.client().Post("/v1/checkpoints", R"({"container":"counter"})", "application/json");
  REQUIRE(res);
  CHECK(res->status == 429);
  CHECK(res->get_header_value("Retry-After") == "10");
  release.set_value();
  f.service->wait_idle();
  std::size_t records = 0;
  for (const auto& e : fs::directory_iterator(f.tmp.path / "state" / "jobs")) records += e.path().extension() == ".json";
  CHECK(records == 3);
  // Finished jobs free their places.
  CHECK(f.service->start_checkpoint({"", "", "plain"}, "", "client-a").ok());
  f.service->wait_idle();
}

TEST_CASE("a job's budget counts from its acceptance: in the queue, and in the archive it receives", "[unit]") {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  Fixture f({}, [](node::AgentConfig& c) {
    c.max_concurrent_jobs = 1;
    c.job_timeout = std::chrono::seconds(1);
  });
  f.runtime->checkpoint_fault = [released](const fs::path&, std::string&) -> Result<void> {
    released.wait();   // a runtime that ignores the deadline it was given, holding the only slot
    return {};
  };
  auto running = f.service->start_checkpoint({"", "", "counter"});
  auto queued = f.service->start_checkpoint({"", "", "plain"});
  REQUIRE(running.ok());
  REQUIRE(queued.ok());
  // The queued job fails by itself once its second has passed, while the first still holds the slot.
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (f.service->job(queued.value())->state != node::JobState::failed && std::chrono::steady_clock::now() < give_up)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  CHECK(f.service->job(queued.value())->error ==
        "the job ran out of time: limits.job_timeout_seconds (1 s) passed while queued (every one of "
        "limits.max_concurrent_jobs (1) was busy)");
  CHECK(f.service->job(running.value())->state == node::JobState::running);
  release.set_value();
  f.service->wait_idle();
  // The first one's archive arrived after its deadline: the receiving walk stopped, and nothing partial is left.
  const auto first = f.service->job(running.value());
  INFO(first->error);
  CHECK(first->state == node::JobState::failed);
  CHECK(first->error.find("the job ran out of time: limits.job_timeout_seconds (1 s) passed while checkpointing") == 0);
  CHECK(f.checkpoint_files().empty());
}

namespace {

// Jobs that report to a PodEventRecorder posting to `api_url` (made once the service's metrics exist, gone after
// the jobs, as in the agent's main).
struct EventsFixture {
  std::unique_ptr<agent::PodEventRecorder> recorder;
  Fixture f{{}, {}, {}, [this](node::JobServiceDeps& deps) {
              deps.observer = [this](node::JobStage stage, const node::JobStatus& job, const node::PodRef& pod) {
                if (recorder) recorder->record_job(stage, job, pod);
              };
            }};
  explicit EventsFixture(const std::string& api_url) {
    test::write_file(f.tmp.path / "sa-token", "sa-token\n");
    node::KubeEndpoint api;
    api.url = api_url;
    api.token_file = (f.tmp.path / "sa-token").string();
    api.ca_file = "";
    recorder = std::make_unique<agent::PodEventRecorder>(api, "node-a", node::EventsConfig{true, 16, 5},
                                                         f.service->metrics());
  }
  ~EventsFixture() { f.service->wait_idle(); }
};

}  // namespace

TEST_CASE("Kubernetes Events on the pod for a checkpoint that succeeds and one that fails: the exact requests",
          "[unit]") {
  test::FakeKubeApi api;
  EventsFixture e(api.url());
  e.f.runtime->containers["counter"].pod_uid = "5f0c3f9e-3b0e-4c59-9a57-2d8f3b1c0a11";   // from CRI labels
  const auto ok = e.f.wait_job("/v1/checkpoints", e.f.post("/v1/checkpoints",
                               R"({"namespace":"ml","pod":"trainer-0","container":"counter"})", 202)["id"]);
  REQUIRE(ok["state"] == "succeeded");
  CHECK(ok["result"]["pod_uid"] == "5f0c3f9e-3b0e-4c59-9a57-2d8f3b1c0a11");
  const auto requests = api.wait_for(2);
  REQUIRE(requests.size() == 2);
  for (const auto& r : requests) {
    CHECK(r.method == "POST");
    CHECK(r.path == "/api/v1/namespaces/ml/events");
    CHECK(r.content_type == "application/json");
    CHECK(r.authorization == "Bearer sa-token");
  }
  const auto started = json::parse(requests[0].body);
  const auto succeeded = json::parse(requests[1].body);
  for (const auto& event : {started, succeeded}) {
    CHECK(event["involvedObject"] == json{{"apiVersion", "v1"}, {"kind", "Pod"}, {"namespace", "ml"},
                                          {"name", "trainer-0"}, {"uid", "5f0c3f9e-3b0e-4c59-9a57-2d8f3b1c0a11"}});
    CHECK(event["metadata"]["namespace"] == "ml");
    CHECK(event["type"] == "Normal");
    CHECK(event["source"] == json{{"component", "gpuckpt-agent"}, {"host", "node-a"}});
    CHECK(event["count"] == 1);
    CHECK(event["action"] == "Checkpoint");
    CHECK(event["message"].get<std::string>().find(ok["id"].get<std::string>()) != std::string::npos);
  }
  CHECK(started["reason"] == "CheckpointStarted");
  CHECK(succeeded["reason"] == "CheckpointSucceeded");
  CHECK(succeeded["message"].get<std::string>().find(
            fs::path(ok["result"]["archive"].get<std::string>()).filename().string()) != std::string::npos);

  // A restore of that archive concerns the same pod: the agent's checkpoint job names it, uid included.
  const std::string archive = fs::path(ok["result"]["archive"].get<std::string>()).filename();
  e.f.runtime->refuse_restores = true;
  const auto rs = e.f.wait_job("/v1/restores", e.f.post("/v1/restores", json{{"archive", archive}}.dump(), 202)["id"]);
  REQUIRE(rs["state"] == "failed");
  const auto restore_events = api.events(4);
  REQUIRE(restore_events.size() == 4);
  CHECK(restore_events[2]["reason"] == "RestoreStarted");
  CHECK(restore_events[3]["reason"] == "RestoreFailed");
  CHECK(restore_events[3]["type"] == "Warning");
  CHECK(restore_events[3]["message"].get<std::string>().find("the runtime refused it") != std::string::npos);
  CHECK(restore_events[3]["involvedObject"]["uid"] == "5f0c3f9e-3b0e-4c59-9a57-2d8f3b1c0a11");

  // The container runs again; its runtime fails the next checkpoint: Started, then Failed with the reason.
  e.f.runtime->containers["counter"].state = "running";
  e.f.runtime->checkpoint_fault = [](const fs::path&, std::string&) -> Result<void> {
    return make_error("criu dump failed: cuda-checkpoint --toggle timed out");
  };
  const auto bad = e.f.wait_job("/v1/checkpoints", e.f.post("/v1/checkpoints",
                                R"({"namespace":"ml","pod":"trainer-0","container":"counter"})", 202)["id"]);
  REQUIRE(bad["state"] == "failed");
  const auto all = api.events(6);
  REQUIRE(all.size() == 6);
  CHECK(all[4]["reason"] == "CheckpointStarted");
  CHECK(all[5]["reason"] == "CheckpointFailed");
  CHECK(all[5]["type"] == "Warning");
  const std::string message = all[5]["message"];
  CHECK(message.find(bad["id"].get<std::string>()) != std::string::npos);
  CHECK(message.find(bad["error"].get<std::string>()) != std::string::npos);
  CHECK(message.find("cuda-checkpoint --toggle timed out") != std::string::npos);

  // A checkpoint that names no pod makes no event.
  e.f.runtime->checkpoint_fault = nullptr;
  e.f.runtime->containers["plain"].state = "running";
  REQUIRE(e.f.wait_job("/v1/checkpoints", e.f.post("/v1/checkpoints", R"({"container":"plain"})", 202)["id"])["state"] ==
          "succeeded");
  e.recorder.reset();   // posts whatever is queued
  CHECK(api.wait_for(0).size() == 6);
}

TEST_CASE("an unreachable API server leaves the jobs' results as they are and counts the dropped events", "[unit]") {
  std::string url;
  {
    test::FakeKubeApi gone;
    url = gone.url();
  }
  EventsFixture e(url);
  const auto job = e.f.wait_job("/v1/checkpoints", e.f.post("/v1/checkpoints",
                                R"({"namespace":"ml","pod":"trainer-0","container":"counter"})", 202)["id"]);
  CHECK(job["state"] == "succeeded");
  CHECK_FALSE(job.contains("error"));
  CHECK(fs::exists(job["result"]["archive"].get<std::string>()));
  CHECK(job["result"]["container_id"] == "abc123");
  e.recorder.reset();   // every event has been tried by then
  const std::string metrics = e.f.service->metrics_text();
  CHECK(metrics.find("gpuckpt_pod_events_dropped_total{reason=\"api_error\"} 2\n") != std::string::npos);
  CHECK(metrics.find("gpuckpt_pod_events_posted_total 0\n") != std::string::npos);
}

TEST_CASE("shutdown: a checkpoint inside the runtime's call finishes; one waiting for the container never starts; "
          "new jobs get 503", "[unit]") {
  Fixture f({}, [](node::AgentConfig& c) { c.shutdown_grace = std::chrono::seconds(0); });
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> reached;
  std::atomic<int> runtime_calls{0};
  f.runtime->checkpoint_fault = [released, &reached, &runtime_calls](const fs::path&, std::string&) -> Result<void> {
    if (++runtime_calls == 1) reached.set_value();
    released.wait();
    return {};
  };
  const std::string dumping = f.post("/v1/checkpoints", R"({"container":"counter"})", 202)["id"];
  reached.get_future().wait();   // CRIU is dumping it (the container frozen): killing it would leave it so
  const std::string waiting = f.post("/v1/checkpoints", R"({"container":"counter"})", 202)["id"];
  // Its queue time is recorded once it has a slot: from then on it waits for the container's lock.
  for (int i = 0; i < 500 && !f.service->job(waiting)->phase_seconds.count("queued"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::thread stopping([&] { f.service->shutdown(); });
  // The second one leaves its wait for the container's lock without calling the runtime.
  for (int i = 0; i < 500 && f.service->job(waiting)->state != node::JobState::interrupted; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const auto cut = f.service->job(waiting);
  CHECK(cut->state == node::JobState::interrupted);
  CHECK(cut->error.find("the agent was stopping and cut this job short after limits.shutdown_grace_seconds (0 s)") !=
        std::string::npos);
  CHECK(cut->error.find("the checkpoint was not started") != std::string::npos);
  CHECK(f.service->job(dumping)->state == node::JobState::running);   // still in the runtime's call, not killed
  auto refused = f.client().Post("/v1/checkpoints", R"({"container":"plain"})", "application/json");
  REQUIRE(refused);
  CHECK(refused->status == 503);
  CHECK(refused->body.find("the agent is stopping and takes no new jobs") != std::string::npos);
  release.set_value();
  stopping.join();   // returns once no job runs
  const auto done = f.service->job(dumping);
  CHECK(done->state == node::JobState::succeeded);   // the container's checkpoint is complete: it is not left without one
  CHECK(fs::is_regular_file(done->result["archive"].get<std::string>()));
  CHECK(runtime_calls == 1);
  CHECK(f.checkpoint_files().size() == 1);   // no temporary file of either job is left
}
