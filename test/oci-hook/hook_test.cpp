#include <catch2/catch_test_macros.hpp>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "common/container_store.h"
#include "common/gpu_container_record.h"
#include "oci-hook/hook.h"

namespace fs = std::filesystem;
using namespace gpuckpt;
using nlohmann::json;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/gpuckpt-hook-test-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

void write(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p) << text;
}

json gpu_config() {
  return {{"ociVersion", "1.0.2"},
          {"process", {{"env", json::array({"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"})}}},
          {"annotations", {{"io.kubernetes.pod.name", "trainer"}, {"io.container.manager", "libpod"}}},
          {"linux", {{"devices", json::array({{{"path", "/dev/nvidia0"}, {"type", "c"}, {"major", 1}, {"minor", 3}}})}}}};
}

// A plan the agent stored for checkpoint `checkpoint_id` moving /dev/nvidia0 to `host_path`.
RestorePlan stored_plan(const hook::HookOptions& options, const std::string& checkpoint_id,
                        const std::string& host_path = "/dev/nvidia1") {
  RestorePlan plan;
  plan.id = new_restore_plan_id();
  plan.checkpoint_id = checkpoint_id;
  plan.assignments = {{"GPU-0", "GPU-1"}};
  plan.devices = {{"/dev/nvidia0", host_path, "GPU-0", host_path == "/dev/nvidia1" ? "GPU-1" : "GPU-9",
                   restored_device_path("/dev/nvidia0", host_path)}};
  REQUIRE(write_restore_plan(options.state_dir, plan).ok());
  return plan;
}

NodeInventory inventory() {
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

Result<std::pair<std::uint32_t, std::uint32_t>> fake_numbers(const std::string& path) {
  if (path == "/dev/nvidia0") return std::make_pair(195u, 0u);
  if (path == "/dev/nvidia1") return std::make_pair(195u, 1u);
  return make_error("no device " + path);
}

}  // namespace

TEST_CASE("createRuntime records a GPU container with the node's GPU properties", "[unit]") {
  TempDir tmp;
  hook::HookOptions options;
  options.state_dir = tmp.path / "state";
  write(tmp.path / "bundle/config.json", gpu_config().dump());
  const json state = {{"ociVersion", "1.0.2"}, {"id", "abc123"}, {"pid", 42}, {"bundle", (tmp.path / "bundle").string()}};
  int inventory_reads = 0;
  auto outcome = hook::record_container(state.dump(), options, [&] { ++inventory_reads; return Result<NodeInventory>(inventory()); },
                                        fake_numbers);
  REQUIRE(outcome.ok());
  CHECK(outcome->gpu_container);
  CHECK(inventory_reads == 1);
  auto stored = read_container_state(options.state_dir, "abc123");
  REQUIRE(stored.ok());
  REQUIRE(stored.value().has_value());
  const auto& record = *stored.value();
  CHECK(record.pid == 42);
  CHECK(record.annotations.at("io.kubernetes.pod.name") == "trainer");
  CHECK_FALSE(record.annotations.count("io.container.manager"));
  CHECK(record.gpus.record.used_gpu_ids == std::vector<std::string>{"GPU-0"});
  CHECK(record.gpus.record.node.gpus.size() == 2);
  CHECK(record.gpus.devices.at(0).gpu_id == "GPU-0");
  CHECK(record.gpus.gpu_env.at("NVIDIA_VISIBLE_DEVICES") == "0");
}

TEST_CASE("createRuntime costs a non-GPU container no inventory read and no record", "[unit]") {
  TempDir tmp;
  hook::HookOptions options;
  options.state_dir = tmp.path / "state";
  auto config = gpu_config();
  config["linux"]["devices"] = json::array();
  config["process"]["env"] = json::array({"PATH=/bin"});
  write(tmp.path / "bundle/config.json", config.dump());
  const json state = {{"id", "plain1"}, {"bundle", (tmp.path / "bundle").string()}};
  int inventory_reads = 0;
  auto outcome = hook::record_container(state.dump(), options, [&] { ++inventory_reads; return Result<NodeInventory>(inventory()); },
                                        fake_numbers);
  REQUIRE(outcome.ok());
  CHECK_FALSE(outcome->gpu_container);
  CHECK(inventory_reads == 0);
  CHECK_FALSE(fs::exists(options.state_dir / "containers"));
}

TEST_CASE("createRuntime refuses hostile or broken state input", "[unit]") {
  TempDir tmp;
  hook::HookOptions options;
  options.state_dir = tmp.path / "state";
  auto inv = [] { return Result<NodeInventory>(inventory()); };
  CHECK_FALSE(hook::record_container("not json", options, inv, fake_numbers).ok());
  CHECK_FALSE(hook::record_container(json{{"id", "../../etc/x"}, {"bundle", "/tmp"}}.dump(), options, inv, fake_numbers).ok());
  CHECK_FALSE(hook::record_container(json{{"id", "ok1"}, {"bundle", "relative"}}.dump(), options, inv, fake_numbers).ok());
  CHECK_FALSE(hook::record_container(json{{"id", "ok1"}, {"bundle", (tmp.path / "none").string()}}.dump(), options, inv,
                                     fake_numbers).ok());
  CHECK_FALSE(fs::exists(options.state_dir / "containers"));
}

TEST_CASE("createRuntime of a restored container places the plan in the CRIU images directory", "[unit]") {
  TempDir tmp;
  hook::HookOptions options;
  options.state_dir = tmp.path / "state";
  RestorePlan plan;
  plan.id = new_restore_plan_id();
  plan.checkpoint_id = "ck-1";
  plan.assignments = {{"GPU-0", "GPU-1"}};
  REQUIRE(write_restore_plan(options.state_dir, plan).ok());
  auto config = gpu_config();
  config["annotations"]["io.gpuckpt.checkpoint-id"] = "ck-1";
  config["annotations"]["io.gpuckpt.restore-plan"] = plan.id;
  write(tmp.path / "bundle/config.json", config.dump());
  fs::create_directories(tmp.path / "bundle/checkpoint");
  const json state = {{"id", "restored1"}, {"bundle", (tmp.path / "bundle").string()}};
  auto outcome = hook::record_container(state.dump(), options, [] { return Result<NodeInventory>(inventory()); }, fake_numbers);
  REQUIRE(outcome.ok());
  std::ifstream in(tmp.path / "bundle/checkpoint" / kPlanFileInImages);
  REQUIRE(in);
  const auto placed = json::parse(in);
  CHECK(placed["assignments"][0]["target_id"] == "GPU-1");
}

TEST_CASE("createRuntime copies no file a container names: a plan annotation is an id in the state dir", "[unit]") {
  TempDir tmp;
  hook::HookOptions options;
  options.state_dir = tmp.path / "state";
  write(tmp.path / "secret", "root:$6$hash:19000:0:99999:7:::\n");
  fs::create_directories(tmp.path / "bundle/checkpoint");
  const json state = {{"id", "thief1"}, {"bundle", (tmp.path / "bundle").string()}};
  const auto placed = tmp.path / "bundle/checkpoint" / kPlanFileInImages;
  for (const std::string& named : {(tmp.path / "secret").string(), std::string("../../secret"),
                                   std::string("rp-../../../secret")}) {
    auto config = gpu_config();
    config["annotations"]["io.gpuckpt.restore-plan"] = named;
    write(tmp.path / "bundle/config.json", config.dump());
    auto outcome = hook::record_container(state.dump(), options, [] { return Result<NodeInventory>(inventory()); },
                                          fake_numbers);
    CHECK_FALSE(outcome.ok());
    CHECK_FALSE(fs::exists(placed));
  }
  // A plan file that came inside the archive is removed: only the agent decides GPU mappings.
  write(placed, R"({"version": 1, "assignments": [{"source_id": "GPU-a", "target_id": "GPU-b"}]})");
  auto config = gpu_config();
  config["annotations"]["io.gpuckpt.checkpoint-id"] = "ck-archive";
  write(tmp.path / "bundle/config.json", config.dump());
  REQUIRE(hook::record_container(state.dump(), options, [] { return Result<NodeInventory>(inventory()); }, fake_numbers).ok());
  CHECK_FALSE(fs::exists(placed));
}

TEST_CASE("precreate applies a pending restore plan and passes everything else through", "[unit]") {
  TempDir tmp;
  hook::HookOptions options;
  options.state_dir = tmp.path / "state";
  auto config = gpu_config();

  SECTION("no checkpoint annotation: unchanged, byte for byte") {
    const std::string text = config.dump();
    auto outcome = hook::precreate(text, options, fake_numbers);
    REQUIRE(outcome.ok());
    CHECK_FALSE(outcome->modified);
    CHECK(outcome->config == text);
  }
  SECTION("annotation but no plan: unchanged") {
    config["annotations"]["io.gpuckpt.checkpoint-id"] = "ck-2";
    config["annotations"]["io.gpuckpt.restore-plan"] = new_restore_plan_id();
    auto outcome = hook::precreate(config.dump(), options, fake_numbers);
    REQUIRE(outcome.ok());
    CHECK_FALSE(outcome->modified);
  }
  SECTION("a checkpoint id alone never selects a plan (archives cannot pick plans)") {
    stored_plan(options, "ck-5");
    config["annotations"]["io.gpuckpt.checkpoint-id"] = "ck-5";
    auto outcome = hook::precreate(config.dump(), options, fake_numbers);
    REQUIRE(outcome.ok());
    CHECK_FALSE(outcome->modified);
  }
  SECTION("an annotation that is no plan id, or a plan that is malformed, refuses") {
    config["annotations"]["io.gpuckpt.restore-plan"] = "/etc/shadow";
    CHECK_FALSE(hook::precreate(config.dump(), options, fake_numbers).ok());
    const std::string id = new_restore_plan_id();
    write(restore_plan_path(options.state_dir, id), R"({"version": 1, "id": ")" + id +
                                                        R"(", "checkpoint_id": "c", "devices": [7]})");
    config["annotations"]["io.gpuckpt.restore-plan"] = id;
    auto outcome = hook::precreate(config.dump(), options, fake_numbers);
    REQUIRE_FALSE(outcome.ok());
    CHECK(outcome.error().message.find("devices[0]") != std::string::npos);
  }
  SECTION("a plan applied to a spec with wrongly typed devices refuses, naming the field") {
    config["annotations"]["io.gpuckpt.restore-plan"] = stored_plan(options, "ck-6").id;
    config["linux"]["devices"] = json::array({"not-an-object"});
    auto outcome = hook::precreate(config.dump(), options, fake_numbers);
    REQUIRE_FALSE(outcome.ok());
    CHECK(outcome.error().message.find("linux.devices[0]") != std::string::npos);
  }
  SECTION("a plan moves /dev/nvidia0 onto GPU 1's node, under GPU 1's own name, and remaps the env") {
    RestorePlan plan;
    plan.id = new_restore_plan_id();
    config["annotations"]["io.gpuckpt.restore-plan"] = plan.id;
    plan.checkpoint_id = "ck-3";
    plan.assignments = {{"GPU-0", "GPU-1"}};
    plan.devices = {{"/dev/nvidia0", "/dev/nvidia1", "GPU-0", "GPU-1", "/dev/nvidia1"}};
    plan.env = {{"NVIDIA_VISIBLE_DEVICES", "1"}};
    REQUIRE(write_restore_plan(options.state_dir, plan).ok());
    auto outcome = hook::precreate(config.dump(), options, fake_numbers);
    REQUIRE(outcome.ok());
    CHECK(outcome->modified);
    const auto out = json::parse(outcome->config);
    const auto& dev = out["linux"]["devices"][0];
    CHECK(dev["path"] == "/dev/nvidia1");
    CHECK(dev["major"] == 195);
    CHECK(dev["minor"] == 1);
    CHECK(out["linux"]["resources"]["devices"][0]["minor"] == 1);
    CHECK(out["process"]["env"][1] == "NVIDIA_VISIBLE_DEVICES=1");
    CHECK(out["annotations"]["io.gpuckpt.restore-plan"] == plan.id);
  }
  SECTION("a plan whose target node is missing refuses the restore with the reason") {
    config["annotations"]["io.gpuckpt.restore-plan"] = stored_plan(options, "ck-4", "/dev/nvidia9").id;
    auto outcome = hook::precreate(config.dump(), options, fake_numbers);
    REQUIRE_FALSE(outcome.ok());
    CHECK(outcome.error().message.find("refused") != std::string::npos);
    CHECK(outcome.error().message.find("/dev/nvidia9") != std::string::npos);
  }
  SECTION("garbage input passes through") {
    auto outcome = hook::precreate("{not json", options, fake_numbers);
    REQUIRE(outcome.ok());
    CHECK(outcome->config == "{not json");
  }
}

TEST_CASE("poststop forgets the container", "[unit]") {
  TempDir tmp;
  hook::HookOptions options;
  options.state_dir = tmp.path / "state";
  ContainerGpuState state;
  state.container_id = "gone1";
  REQUIRE(write_container_state(options.state_dir, state).ok());
  REQUIRE(hook::forget_container(json{{"id", "gone1"}}.dump(), options).ok());
  CHECK_FALSE(read_container_state(options.state_dir, "gone1").value().has_value());
}

TEST_CASE("a container that lists 20,000 device nodes gets a bounded record", "[unit]") {
  TempDir tmp;
  hook::HookOptions options;
  options.state_dir = tmp.path / "state";
  json config = gpu_config();
  auto& devices = config["linux"]["devices"];
  for (int i = 0; i < 20000; ++i)
    devices.push_back({{"path", "/dev/nvidia" + std::to_string(i)}, {"type", "c"}, {"major", 1}, {"minor", 3}});
  auto outcome = record_gpu_container("many", "", 0, config, options.state_dir,
                                      [] { return Result<NodeInventory>(inventory()); }, fake_numbers);
  REQUIRE(outcome.ok());
  auto stored = read_container_state(options.state_dir, "many");
  REQUIRE(stored.ok());
  REQUIRE(stored.value().has_value());
  CHECK(stored.value()->gpus.devices.size() == kMaxRecordedDevices);
  CHECK(stored.value()->gpus.record.used_gpu_ids == std::vector<std::string>{"GPU-0", "GPU-1"});
  CHECK(fs::file_size(options.state_dir / "containers" / "many.json") < (256u << 10));
}
