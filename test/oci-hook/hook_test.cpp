#include <catch2/catch_test_macros.hpp>

#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "state/container_store.h"
#include "state/gpu_container_record.h"
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

// A plan the agent stored for checkpoint `checkpoint_id` moving /dev/nvidia0 to `host_path`, usable for ten
// minutes by a container whose config carries that checkpoint id.
RestorePlan stored_plan(const hook::HookOptions& options, const std::string& checkpoint_id,
                        const std::string& host_path = "/dev/nvidia1") {
  RestorePlan plan;
  plan.id = new_restore_plan_id();
  plan.checkpoint_id = checkpoint_id;
  plan.expires_at = plan_clock_now() + 600;
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

Result<NodeInventory> two_gpus() { return inventory(); }

// A directory as CRIU leaves its images.
void criu_images(const fs::path& dir) { write(dir / "inventory.img", "criu"); }

// A restored container in podman's layout: its config (a GPU container from checkpoint `checkpoint_id`, naming
// `plan_id` when given) and CRIU's images in <bundle>/checkpoint. Returns its OCI state.
std::string restored_container(const fs::path& bundle, const std::string& id, const std::string& checkpoint_id,
                               const std::string& plan_id) {
  auto config = gpu_config();
  config["annotations"]["io.gpuckpt.checkpoint-id"] = checkpoint_id;
  if (!plan_id.empty()) config["annotations"]["io.gpuckpt.restore-plan"] = plan_id;
  write(bundle / "config.json", config.dump());
  criu_images(bundle / "checkpoint");
  return json{{"ociVersion", "1.0.2"}, {"id", id}, {"status", "creating"}, {"bundle", bundle.string()}}.dump();
}

std::string precreate_config(const std::string& checkpoint_id, const std::string& plan_id) {
  auto config = gpu_config();
  config["annotations"]["io.gpuckpt.checkpoint-id"] = checkpoint_id;
  config["annotations"]["io.gpuckpt.restore-plan"] = plan_id;
  return config.dump();
}

bool in_state_dir(const hook::HookOptions& options, const RestorePlan& plan) {
  return fs::exists(restore_plan_path(options.state_dir, plan.id));
}

}  // namespace

TEST_CASE("createRuntime records a GPU container with the node's GPU properties", "[unit]") {
  TempDir tmp;
  hook::HookOptions options;
  options.state_dir = tmp.path / "state";
  write(tmp.path / "bundle/config.json", gpu_config().dump());
  const json state = {{"ociVersion", "1.0.2"}, {"id", "abc123"}, {"pid", 42}, {"bundle", (tmp.path / "bundle").string()}};
  int inventory_reads = 0;
  auto outcome = hook::create_runtime(state.dump(), options, [&] { ++inventory_reads; return Result<NodeInventory>(inventory()); },
                                        fake_numbers).record;
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
  auto outcome = hook::create_runtime(state.dump(), options, [&] { ++inventory_reads; return Result<NodeInventory>(inventory()); },
                                        fake_numbers).record;
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
  auto recorded = [&](const std::string& state) { return hook::create_runtime(state, options, inv, fake_numbers).record.ok(); };
  CHECK_FALSE(recorded("not json"));
  CHECK_FALSE(recorded(json{{"id", "../../etc/x"}, {"bundle", "/tmp"}}.dump()));
  CHECK_FALSE(recorded(json{{"id", "ok1"}, {"bundle", "relative"}}.dump()));
  CHECK_FALSE(recorded(json{{"id", "ok1"}, {"bundle", (tmp.path / "none").string()}}.dump()));
  CHECK_FALSE(fs::exists(options.state_dir / "containers"));
}

TEST_CASE("createRuntime of a restore places its plan for CRIU and uses it up: a second use is refused", "[unit]") {
  TempDir tmp;
  hook::HookOptions options;
  options.state_dir = tmp.path / "state";
  const auto plan = stored_plan(options, "ck-1");
  const auto state = restored_container(tmp.path / "bundle", "restored1", "ck-1", plan.id);
  auto outcome = hook::create_runtime(state, options, two_gpus, fake_numbers);
  REQUIRE(outcome.record.ok());
  REQUIRE(outcome.restore.ok());
  CHECK(outcome.restore->find("placed in") != std::string::npos);
  std::ifstream in(tmp.path / "bundle/checkpoint" / kPlanFileInImages);
  REQUIRE(in);
  const auto placed = json::parse(in);
  CHECK(placed["assignments"][0]["target_id"] == "GPU-1");
  CHECK_FALSE(in_state_dir(options, plan));

  SECTION("another restore naming the used plan is refused and gets no plan in its images directory") {
    const auto again = restored_container(tmp.path / "bundle2", "restored2", "ck-1", plan.id);
    auto second = hook::create_runtime(again, options, two_gpus, fake_numbers);
    REQUIRE_FALSE(second.restore.ok());
    CHECK(second.restore.error().message.find("used already") != std::string::npos);
    CHECK_FALSE(fs::exists(tmp.path / "bundle2/checkpoint" / kPlanFileInImages));
  }
  SECTION("precreate of a container naming the used plan grants it nothing") {
    auto reused = hook::precreate(precreate_config("ck-1", plan.id), options, fake_numbers);
    REQUIRE(reused.ok());
    CHECK_FALSE(reused->modified);
    CHECK(json::parse(reused->config)["linux"]["devices"][0]["path"] == "/dev/nvidia0");
  }
}

TEST_CASE("precreate applies a plan without using it up: podman's createRuntime comes next and does", "[unit]") {
  TempDir tmp;
  hook::HookOptions options;
  options.state_dir = tmp.path / "state";
  const auto plan = stored_plan(options, "ck-1");
  auto applied = hook::precreate(precreate_config("ck-1", plan.id), options, fake_numbers);
  REQUIRE(applied.ok());
  CHECK(applied->modified);
  CHECK(in_state_dir(options, plan));
  auto outcome = hook::create_runtime(restored_container(tmp.path / "bundle", "r1", "ck-1", plan.id), options,
                                      two_gpus, fake_numbers);
  REQUIRE(outcome.restore.ok());
  CHECK(fs::exists(tmp.path / "bundle/checkpoint" / kPlanFileInImages));
  CHECK_FALSE(in_state_dir(options, plan));
}

TEST_CASE("an expired plan, or one with no expiry, is refused by both stages and removed", "[unit]") {
  TempDir tmp;
  hook::HookOptions options;
  options.state_dir = tmp.path / "state";
  for (const std::int64_t expires_at : {plan_clock_now() - 1, std::int64_t{0}}) {
    INFO("expires_at " << expires_at);
    auto plan = stored_plan(options, "ck-1");
    plan.expires_at = expires_at;
    REQUIRE(write_restore_plan(options.state_dir, plan).ok());
    auto refused = hook::precreate(precreate_config("ck-1", plan.id), options, fake_numbers);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message.find(expires_at ? "expired" : "no expiry") != std::string::npos);
    CHECK_FALSE(in_state_dir(options, plan));

    REQUIRE(write_restore_plan(options.state_dir, plan).ok());
    auto outcome = hook::create_runtime(restored_container(tmp.path / "bundle", "r1", "ck-1", plan.id), options,
                                        two_gpus, fake_numbers);
    REQUIRE_FALSE(outcome.restore.ok());
    CHECK(outcome.restore.error().message.find("refused") != std::string::npos);
    CHECK_FALSE(fs::exists(tmp.path / "bundle/checkpoint" / kPlanFileInImages));
    CHECK_FALSE(in_state_dir(options, plan));
  }
}

TEST_CASE("a plan bound to one container is refused for another, and at precreate, which sees no container id",
          "[unit]") {
  TempDir tmp;
  hook::HookOptions options;
  options.state_dir = tmp.path / "state";
  auto plan = stored_plan(options, "ck-1");
  plan.container_id = "the-restore";
  REQUIRE(write_restore_plan(options.state_dir, plan).ok());
  auto thief = hook::create_runtime(restored_container(tmp.path / "bundle", "a-thief", "ck-1", plan.id), options,
                                    two_gpus, fake_numbers);
  REQUIRE_FALSE(thief.restore.ok());
  CHECK(thief.restore.error().message.find("bound to container the-restore, not to a-thief") != std::string::npos);
  CHECK_FALSE(fs::exists(tmp.path / "bundle/checkpoint" / kPlanFileInImages));
  CHECK(in_state_dir(options, plan));   // still there for the container it was made for
  auto at_precreate = hook::precreate(precreate_config("ck-1", plan.id), options, fake_numbers);
  REQUIRE_FALSE(at_precreate.ok());
  CHECK(at_precreate.error().message.find("cannot see") != std::string::npos);

  auto owner = hook::create_runtime(restored_container(tmp.path / "bundle2", "the-restore", "ck-other", plan.id),
                                    options, two_gpus, fake_numbers);
  REQUIRE(owner.restore.ok());
  CHECK(fs::exists(tmp.path / "bundle2/checkpoint" / kPlanFileInImages));
}

TEST_CASE("a plan bound to its checkpoint is refused for a config of another checkpoint", "[unit]") {
  TempDir tmp;
  hook::HookOptions options;
  options.state_dir = tmp.path / "state";
  const auto plan = stored_plan(options, "ck-1");
  for (const std::string& other : {std::string("ck-2"), std::string()}) {
    auto refused = hook::precreate(precreate_config(other, plan.id), options, fake_numbers);
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message.find("bound to its checkpoint") != std::string::npos);
    auto outcome = hook::create_runtime(restored_container(tmp.path / "bundle", "r1", other, plan.id), options,
                                        two_gpus, fake_numbers);
    REQUIRE_FALSE(outcome.restore.ok());
    CHECK(outcome.restore.error().message.find("bound to its checkpoint") != std::string::npos);
    CHECK_FALSE(fs::exists(tmp.path / "bundle/checkpoint" / kPlanFileInImages));
  }
  CHECK(in_state_dir(options, plan));
}

TEST_CASE("createRuntime finds containerd's images directory through the restoring runtime's --image-path",
          "[unit]") {
  TempDir tmp;
  hook::HookOptions options;
  options.state_dir = tmp.path / "state";
  options.host_root = tmp.path / "host";
  const std::string images = "/var/lib/containerd/io.containerd.grpc.v1.cri/containers/c0ffee/ctrd-restore/checkpoint";
  criu_images(options.host_root / images.substr(1));
  const auto plan = stored_plan(options, "ck-1");
  auto config = gpu_config();
  config["annotations"]["io.gpuckpt.checkpoint-id"] = "ck-1";
  config["annotations"]["io.gpuckpt.restore-plan"] = plan.id;
  const fs::path bundle = tmp.path / "run/containerd/io.containerd.runtime.v2.task/k8s.io/c0ffee";
  write(bundle / "config.json", config.dump());
  const json state = {{"id", "c0ffee"}, {"status", "creating"}, {"bundle", bundle.string()}};
  // The hook's parent: containerd's shim ran `runc ... restore --image-path <images>` (go-runc's arguments).
  options.runtime_pid = 4242;
  options.process_root = options.host_root;
  std::string cmdline;
  for (const char* arg : {"runc", "--root", "/run/containerd/runc/k8s.io", "--log", "/run/log.json",
                                 "--log-format", "json", "restore", "--image-path", images.c_str(), "--work-path",
                                 "/var/lib/containerd/work", "--bundle", bundle.c_str(), "--detach", "c0ffee"})
    (cmdline += arg) += '\0';
  write(options.host_root / "proc/4242/cmdline", cmdline);

  SECTION("restoring: the plan lands where runc told CRIU to look") {
    auto outcome = hook::create_runtime(state.dump(), options, two_gpus, fake_numbers);
    REQUIRE(outcome.restore.ok());
    INFO(outcome.restore.value());
    CHECK(fs::exists(options.host_root / images.substr(1) / kPlanFileInImages));
    CHECK_FALSE(fs::exists(bundle / "checkpoint"));
    CHECK_FALSE(in_state_dir(options, plan));
  }
  SECTION("creating (runc create): no restore, the plan stays for the restore it was made for") {
    cmdline.clear();
    for (const char* arg : {"runc", "--root", "/run/containerd/runc/k8s.io", "create", "--bundle",
                                   bundle.c_str(), "c0ffee"})
      (cmdline += arg) += '\0';
    write(options.host_root / "proc/4242/cmdline", cmdline);
    auto outcome = hook::create_runtime(state.dump(), options, two_gpus, fake_numbers);
    REQUIRE(outcome.restore.ok());
    CHECK(outcome.restore->empty());
    CHECK_FALSE(fs::exists(options.host_root / images.substr(1) / kPlanFileInImages));
    CHECK(in_state_dir(options, plan));
  }
  SECTION("an images directory that is a symlink refuses the restore: the plan goes nowhere else") {
    fs::rename(options.host_root / images.substr(1), tmp.path / "moved");
    fs::create_directory_symlink(tmp.path / "moved", options.host_root / images.substr(1));
    auto outcome = hook::create_runtime(state.dump(), options, two_gpus, fake_numbers);
    REQUIRE_FALSE(outcome.restore.ok());
    CHECK(outcome.restore.error().message.find("symlink") != std::string::npos);
    CHECK_FALSE(fs::exists(tmp.path / "moved" / kPlanFileInImages));
    CHECK(in_state_dir(options, plan));
  }
}

TEST_CASE("createRuntime copies no file a container names: a plan annotation is an id in the state dir", "[unit]") {
  TempDir tmp;
  hook::HookOptions options;
  options.state_dir = tmp.path / "state";
  write(tmp.path / "secret", "root:$6$hash:19000:0:99999:7:::\n");
  criu_images(tmp.path / "bundle/checkpoint");
  const json state = {{"id", "thief1"}, {"bundle", (tmp.path / "bundle").string()}};
  const auto placed = tmp.path / "bundle/checkpoint" / kPlanFileInImages;
  for (const std::string& named : {(tmp.path / "secret").string(), std::string("../../secret"),
                                   std::string("rp-../../../secret")}) {
    auto config = gpu_config();
    config["annotations"]["io.gpuckpt.restore-plan"] = named;
    write(tmp.path / "bundle/config.json", config.dump());
    auto outcome = hook::create_runtime(state.dump(), options, two_gpus, fake_numbers);
    CHECK_FALSE(outcome.restore.ok());
    CHECK_FALSE(fs::exists(placed));
  }
  // A plan file that came inside the archive is removed: only the agent decides GPU mappings.
  write(placed, R"({"version": 1, "assignments": [{"source_id": "GPU-a", "target_id": "GPU-b"}]})");
  auto config = gpu_config();
  config["annotations"]["io.gpuckpt.checkpoint-id"] = "ck-archive";
  write(tmp.path / "bundle/config.json", config.dump());
  REQUIRE(hook::create_runtime(state.dump(), options, two_gpus, fake_numbers).restore.ok());
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
    config["annotations"]["io.gpuckpt.checkpoint-id"] = "ck-6";
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
    config["annotations"]["io.gpuckpt.checkpoint-id"] = "ck-3";
    plan.checkpoint_id = "ck-3";
    plan.expires_at = plan_clock_now() + 600;
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
    config["annotations"]["io.gpuckpt.checkpoint-id"] = "ck-4";
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
