#include <catch2/catch_test_macros.hpp>

#include "restore/restore_plan.h"
#include "test/support/archive_builder.h"

using namespace gpuckpt;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

GpuDevice nvidia(int minor) {
  GpuDevice g;
  g.id = "GPU-" + std::to_string(minor);
  g.uuid = g.id;
  g.vendor = GpuVendor::Nvidia;
  g.device_minor = minor;
  g.device_paths = {"/dev/nvidia" + std::to_string(minor), "/dev/nvidiactl", "/dev/nvidia-uvm"};
  return g;
}

GpuDevice amd(int render) {
  GpuDevice g;
  g.id = "kfd-" + std::to_string(render);
  g.vendor = GpuVendor::Amd;
  g.render_minor = render;
  g.device_paths = {"/dev/kfd", "/dev/dri/renderD" + std::to_string(render)};
  return g;
}

CheckpointGpuRecord checkpoint_on(std::vector<GpuDevice> gpus, std::vector<ContainerGpuDevice> devices,
                                  std::vector<std::string> used) {
  CheckpointGpuRecord c;
  c.checkpoint_id = "ck-9";
  c.record.node.gpus = std::move(gpus);
  c.record.used_gpu_ids = std::move(used);
  c.devices = std::move(devices);
  return c;
}

}  // namespace

TEST_CASE("restore plans move per-GPU nodes and keep shared ones", "[unit]") {
  struct Row {
    const char* name;
    CheckpointGpuRecord checkpoint;
    NodeInventory target;
    MatchPlan match;
    std::vector<std::pair<std::string, std::string>> expected_devices;   // container path -> host path
    std::map<std::string, std::string> expected_env;
  };
  NodeInventory nv_node;
  nv_node.gpus = {nvidia(0), nvidia(1), nvidia(2)};
  NodeInventory amd_node;
  amd_node.gpus = {amd(128), amd(129)};

  auto nv_ck = checkpoint_on({nvidia(0), nvidia(1)},
                             {{"/dev/nvidia0", 195, 0, "GPU-0"}, {"/dev/nvidia1", 195, 1, "GPU-1"},
                              {"/dev/nvidiactl", 195, 255, ""}},
                             {"GPU-0", "GPU-1"});
  nv_ck.gpu_env = {{"NVIDIA_VISIBLE_DEVICES", "GPU-0,GPU-1"}, {"CUDA_VISIBLE_DEVICES", "0,1"}};
  const Row rows[] = {
      {"same GPUs: identity", nv_ck, nv_node, MatchPlan{{{"GPU-0", "GPU-0"}, {"GPU-1", "GPU-1"}}, {}},
       {{"/dev/nvidia0", "/dev/nvidia0"}, {"/dev/nvidia1", "/dev/nvidia1"}}, {}},
      {"swapped and shifted", nv_ck, nv_node, MatchPlan{{{"GPU-0", "GPU-2"}, {"GPU-1", "GPU-0"}}, {}},
       {{"/dev/nvidia0", "/dev/nvidia2"}, {"/dev/nvidia1", "/dev/nvidia0"}},
       {{"NVIDIA_VISIBLE_DEVICES", "GPU-2,GPU-0"}, {"CUDA_VISIBLE_DEVICES", "2,0"}}},
      {"AMD render node, /dev/kfd shared",
       checkpoint_on({amd(128)}, {{"/dev/kfd", 0, 0, ""}, {"/dev/dri/renderD128", 226, 128, "kfd-128"}}, {"kfd-128"}),
       amd_node, MatchPlan{{{"kfd-128", "kfd-129"}}, {}}, {{"/dev/dri/renderD128", "/dev/dri/renderD129"}}, {}},
  };
  for (const auto& row : rows) {
    INFO(row.name);
    auto plan = make_restore_plan(row.checkpoint, row.target, row.match);
    REQUIRE(plan.ok());
    CHECK(plan->checkpoint_id == "ck-9");
    std::vector<std::pair<std::string, std::string>> devices;
    for (const auto& d : plan->devices) {
      devices.emplace_back(d.container_path, d.host_path);
      // NVIDIA nodes take the target's own name (the driver opens /dev/nvidia<minor>); AMD's keep theirs.
      CHECK(d.path_after_restore() == (d.container_path.rfind("/dev/nvidia", 0) == 0 ? d.host_path : d.container_path));
    }
    CHECK(devices == row.expected_devices);
    CHECK(plan->env == row.expected_env);
  }
}

TEST_CASE("a restore plan that cannot place a device is an error naming it", "[unit]") {
  NodeInventory target;
  GpuDevice no_nodes = nvidia(3);
  no_nodes.device_paths = {"/dev/nvidiactl"};
  target.gpus = {no_nodes};
  auto ck = checkpoint_on({nvidia(0)}, {{"/dev/nvidia0", 195, 0, "GPU-0"}}, {"GPU-0"});
  auto plan = make_restore_plan(ck, target, MatchPlan{{{"GPU-0", "GPU-3"}}, {}});
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().message.find("/dev/nvidia0") != std::string::npos);
  CHECK(plan.error().message.find("GPU-3") != std::string::npos);
  auto unassigned = make_restore_plan(ck, target, MatchPlan{});
  CHECK_FALSE(unassigned.ok());
}

TEST_CASE("restore plans round-trip through the state directory", "[unit]") {
  test::TempDir tmp;
  RestorePlan plan;
  plan.id = new_restore_plan_id();
  plan.checkpoint_id = "ck-rt";
  plan.assignments = {{"GPU-0", "GPU-1"}};
  plan.devices = {{"/dev/nvidia0", "/dev/nvidia1", "GPU-0", "GPU-1", "/dev/nvidia1"}};
  plan.env = {{"NVIDIA_VISIBLE_DEVICES", "1"}};
  plan.relaxations = {"firmware"};
  REQUIRE(write_restore_plan(tmp.path, plan).ok());
  CHECK(fs::exists(tmp.path / "restore-plans" / (plan.id + ".json")));
  auto read = read_restore_plan(tmp.path, plan.id);
  REQUIRE(read.ok());
  REQUIRE(read.value().has_value());
  CHECK(to_json(*read.value()) == to_json(plan));
  CHECK_FALSE(read_restore_plan(tmp.path, new_restore_plan_id()).value().has_value());
}

TEST_CASE("restore plans are named only by ids the agent makes, never by a checkpoint's id or a path", "[unit]") {
  test::TempDir tmp;
  const std::string id = new_restore_plan_id();
  CHECK(is_restore_plan_id(id));
  CHECK(id != new_restore_plan_id());
  for (const char* bad : {"ck-rt", "../etc", "/etc/shadow", "rp-../../../../etc/shadow", "rp-0123", ""})
    CHECK_FALSE(is_restore_plan_id(bad));
  CHECK_FALSE(read_restore_plan(tmp.path, "../etc").ok());
  CHECK_FALSE(read_restore_plan(tmp.path, "ck-rt").ok());
  RestorePlan plan;
  plan.checkpoint_id = "ck-from-an-archive";   // an archive's id is not a plan id
  CHECK_FALSE(write_restore_plan(tmp.path, plan).ok());
  plan.id = "../../x";
  CHECK_FALSE(write_restore_plan(tmp.path, plan).ok());
  CHECK_FALSE(fs::exists(tmp.path / "restore-plans"));
}

TEST_CASE("device paths in plans are canonical GPU device nodes", "[unit]") {
  for (const char* good : {"/dev/nvidia0", "/dev/nvidia12", "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-caps/nvidia-cap1",
                           "/dev/kfd", "/dev/dri/renderD128", "/dev/dri/card0"})
    CHECK(is_gpu_device_path(good));
  for (const char* bad : {"/dev/../../etc/x", "/dev/nvidia0/../../etc/shadow", "/dev/./nvidia0", "/dev//nvidia0",
                          "dev/nvidia0", "/etc/shadow", "/dev/sda", "/dev/dri/renderDx", "/dev/dri/card0/..",
                          "/dev/nvidia-caps/../sda", "/dev/nvidia0/", "/dev/kfd2", ""})
    CHECK_FALSE(is_gpu_device_path(bad));
  // A record whose device path climbs out is refused before it reaches a plan.
  NodeInventory target;
  target.gpus = {nvidia(1)};
  auto ck = checkpoint_on({nvidia(0)}, {{"/dev/../../etc/x", 195, 0, "GPU-0"}}, {"GPU-0"});
  auto plan = make_restore_plan(ck, target, MatchPlan{{{"GPU-0", "GPU-1"}}, {}});
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.error().message.find("not a canonical GPU device node") != std::string::npos);
  // And so is a plan file that names one.
  json doc = {{"version", 1}, {"id", new_restore_plan_id()}, {"checkpoint_id", "ck"},
              {"devices", {{{"container_path", "/dev/nvidia0"}, {"host_path", "/dev/../etc/shadow"}}}}};
  CHECK_FALSE(restore_plan_from_json(doc, "plan").ok());
}

namespace {

// The device numbers of the fake node: /dev/nvidiaN is 195:N, /dev/nvidiactl 195:255, /dev/dri/renderDN 226:N.
Result<std::pair<std::uint32_t, std::uint32_t>> fake_numbers(const std::string& path) {
  if (path == "/dev/nvidiactl") return std::make_pair(195u, 255u);
  for (const auto& [prefix, major] : {std::pair<std::string, std::uint32_t>{"/dev/nvidia", 195}, {"/dev/dri/renderD", 226}})
    if (path.rfind(prefix, 0) == 0) return std::make_pair(major, static_cast<std::uint32_t>(std::stoul(path.substr(prefix.size()))));
  return make_error("no such node " + path, ENOENT);
}

json spec_with(std::vector<std::pair<std::string, unsigned>> nodes) {   // path -> minor, major from fake_numbers
  json devices = json::array();
  for (const auto& [path, minor] : nodes)
    devices.push_back({{"path", path}, {"type", "c"}, {"major", fake_numbers(path)->first}, {"minor", minor}});
  return {{"linux", {{"devices", devices}}}};
}

std::map<std::string, std::pair<unsigned, unsigned>> devices_of(const json& spec) {
  std::map<std::string, std::pair<unsigned, unsigned>> out;
  for (const auto& d : spec["linux"]["devices"]) out[d["path"]] = {d["major"].get<unsigned>(), d["minor"].get<unsigned>()};
  return out;
}

RestorePlan plan_moving(std::vector<std::pair<int, int>> moves) {   // NVIDIA minors source -> target
  NodeInventory node;
  std::vector<GpuDevice> source_gpus;
  std::vector<ContainerGpuDevice> devices;
  std::vector<std::string> used;
  MatchPlan match;
  for (const auto& [from, to] : moves) {
    source_gpus.push_back(nvidia(from));
    node.gpus.push_back(nvidia(to));
    devices.push_back({"/dev/nvidia" + std::to_string(from), 195, static_cast<std::uint32_t>(from), "GPU-" + std::to_string(from)});
    used.push_back("GPU-" + std::to_string(from));
    match.assignments.push_back({"GPU-" + std::to_string(from), "GPU-" + std::to_string(to)});
  }
  auto plan = make_restore_plan(checkpoint_on(source_gpus, devices, used), node, match);
  REQUIRE(plan.ok());
  plan->id = new_restore_plan_id();
  return plan.value();
}

}  // namespace

TEST_CASE("applied to a spec, a plan gives moved NVIDIA GPUs their own node names", "[unit]") {
  using Nodes = std::map<std::string, std::pair<unsigned, unsigned>>;
  SECTION("GPU 1 -> GPU 0: the container's /dev/nvidia1 becomes /dev/nvidia0 (195:0), allowed in the cgroup") {
    json spec = spec_with({{"/dev/nvidia1", 1}, {"/dev/nvidiactl", 255}});
    auto changed = apply_restore_plan(spec, plan_moving({{1, 0}}), fake_numbers);
    REQUIRE(changed.ok());
    CHECK(changed.value() == 1);
    CHECK(devices_of(spec) == Nodes{{"/dev/nvidia0", {195, 0}}, {"/dev/nvidiactl", {195, 255}}});
    CHECK(spec["linux"]["resources"]["devices"][0]["minor"] == 0);
  }
  SECTION("swapped GPUs swap (each rewrite matches the spec as it came)") {
    json spec = spec_with({{"/dev/nvidia0", 0}, {"/dev/nvidia1", 1}});
    auto changed = apply_restore_plan(spec, plan_moving({{0, 1}, {1, 0}}), fake_numbers);
    REQUIRE(changed.ok());
    CHECK(devices_of(spec) == Nodes{{"/dev/nvidia0", {195, 0}}, {"/dev/nvidia1", {195, 1}}});
    CHECK(spec["linux"]["devices"].size() == 2);
  }
  SECTION("a node left at the name a GPU moves to is dropped, not kept beside it") {
    json spec = spec_with({{"/dev/nvidia0", 0}, {"/dev/nvidia1", 1}});   // nvidia0: a GPU the record does not know
    auto changed = apply_restore_plan(spec, plan_moving({{1, 0}}), fake_numbers);
    REQUIRE(changed.ok());
    CHECK(changed.value() == 2);
    CHECK(devices_of(spec) == Nodes{{"/dev/nvidia0", {195, 0}}});
    CHECK(spec["linux"]["devices"].size() == 1);
  }
  SECTION("a node the spec lacks is added under its own name") {
    json spec = spec_with({});
    REQUIRE(apply_restore_plan(spec, plan_moving({{3, 2}}), fake_numbers).ok());
    CHECK(devices_of(spec) == Nodes{{"/dev/nvidia2", {195, 2}}});
  }
  SECTION("a plan written before restored_path keeps the checkpoint's name") {
    RestorePlan plan = plan_moving({{1, 0}});
    plan.devices[0].restored_path.clear();
    json spec = spec_with({{"/dev/nvidia1", 1}});
    REQUIRE(apply_restore_plan(spec, plan, fake_numbers).ok());
    CHECK(devices_of(spec) == Nodes{{"/dev/nvidia1", {195, 0}}});
  }
  SECTION("the restored path round-trips through the plan file, and is held to the device-path rule") {
    const RestorePlan plan = plan_moving({{1, 0}});
    auto back = restore_plan_from_json(to_json(plan), "plan");
    REQUIRE(back.ok());
    CHECK(back->devices[0].path_after_restore() == "/dev/nvidia0");
    json doc = to_json(plan);
    doc["devices"][0]["restored_path"] = "/dev/../etc/shadow";
    CHECK_FALSE(restore_plan_from_json(doc, "plan").ok());
  }
  SECTION("the target's numbers round-trip, come as a pair, and are absent from plans that never had them") {
    RestorePlan plan = plan_moving({{1, 0}});
    auto without = restore_plan_from_json(to_json(plan), "plan");
    REQUIRE(without.ok());
    CHECK_FALSE(without->devices[0].target_numbers.has_value());
    CHECK_FALSE(to_json(plan)["devices"][0].contains("target_major"));
    plan.devices[0].target_numbers = std::make_pair(195u, 0u);
    auto with = restore_plan_from_json(to_json(plan), "plan");
    REQUIRE(with.ok());
    CHECK(with->devices[0].target_numbers == std::make_pair(195u, 0u));
    json half = to_json(plan);
    half["devices"][0].erase("target_minor");
    auto refused = restore_plan_from_json(half, "plan");
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message.find("target_major and target_minor come together") != std::string::npos);
    json huge = to_json(plan);
    huge["devices"][0]["target_minor"] = 4294967296ULL;
    CHECK_FALSE(restore_plan_from_json(huge, "plan").ok());
  }
}

TEST_CASE("a plan's binding: one checkpoint, one container where named, until it expires", "[unit]") {
  const std::int64_t now = 1'800'000'000;
  RestorePlan plan;
  plan.id = new_restore_plan_id();
  plan.checkpoint_id = "ck-1";
  plan.expires_at = now + 60;
  struct Case {
    std::string container_id;   // the plan's
    std::int64_t expires_at;
    PlanUser user;
    int refused_with;           // 0: allowed
  };
  const Case cases[] = {
      {"", now + 60, {"any-container", "ck-1"}, 0},
      {"", now + 60, {std::nullopt, "ck-1"}, 0},            // precreate: the checkpoint decides
      {"", now + 60, {"c1", "ck-2"}, EACCES},
      {"", now + 60, {"c1", ""}, EACCES},
      {"c1", now + 60, {"c1", "ck-other"}, 0},              // bound to the container: that decides
      {"c1", now + 60, {"c2", "ck-1"}, EACCES},
      {"c1", now + 60, {std::nullopt, "ck-1"}, EACCES},     // precreate cannot tell which container it is
      {"", now, {"c1", "ck-1"}, ETIME},                     // expires_at is the first second it is refused
      {"", now - 3600, {"c1", "ck-1"}, ETIME},
      {"", 0, {"c1", "ck-1"}, ETIME},                       // made before plans were bound
  };
  for (const auto& c : cases) {
    plan.container_id = c.container_id;
    plan.expires_at = c.expires_at;
    auto bound = check_plan_binding(plan, c.user, now);
    INFO("plan container '" << c.container_id << "' expires " << c.expires_at << ", user "
                            << c.user.container_id.value_or("(unknown)") << "/" << c.user.checkpoint_id);
    if (c.refused_with == 0) {
      CHECK(bound.ok());
    } else {
      REQUIRE_FALSE(bound.ok());
      CHECK(bound.error().errno_value == c.refused_with);
      CHECK(bound.error().message.find(plan.id) != std::string::npos);
    }
  }
}

TEST_CASE("removing a plan is its one use: the second removal finds nothing", "[unit]") {
  test::TempDir tmp;
  RestorePlan plan;
  plan.id = new_restore_plan_id();
  plan.checkpoint_id = "ck-1";
  REQUIRE(write_restore_plan(tmp.path, plan).ok());
  CHECK(remove_restore_plan(tmp.path, plan.id).value());
  CHECK_FALSE(remove_restore_plan(tmp.path, plan.id).value());
  CHECK_FALSE(remove_restore_plan(tmp.path, "../../etc/passwd").ok());
}

TEST_CASE("sweeping removes expired, unbounded and unreadable plans and old temporary files, within its budget",
          "[unit]") {
  test::TempDir tmp;
  const std::int64_t now = plan_clock_now();
  auto stored = [&](std::int64_t expires_at) {
    RestorePlan plan;
    plan.id = new_restore_plan_id();
    plan.checkpoint_id = "ck-1";
    plan.expires_at = expires_at;
    REQUIRE(write_restore_plan(tmp.path, plan).ok());
    return restore_plan_path(tmp.path, plan.id);
  };
  const auto live = stored(now + 600);
  const auto expired = stored(now - 1);
  const auto unbounded = stored(0);
  const fs::path dir = tmp.path / "restore-plans";
  const auto unreadable = restore_plan_path(tmp.path, new_restore_plan_id());
  test::write_file(unreadable, "{\"version\": 1,");
  const auto old_temp = dir / ".rp-0.json.tmp-1-0";
  const auto new_temp = dir / ".rp-1.json.tmp-1-1";
  const auto other = dir / "README";
  for (const auto& p : {old_temp, new_temp, other}) test::write_file(p, "x");
  fs::last_write_time(old_temp, fs::file_time_type::clock::now() - std::chrono::hours(2));

  SECTION("a budget bounds the work of one sweep") {
    const auto swept = sweep_restore_plans(tmp.path, now, 2);
    CHECK(swept.examined == 2);
    CHECK(swept.removed <= 2);
  }
  SECTION("a whole sweep") {
    const auto swept = sweep_restore_plans(tmp.path, now, 100);
    CHECK(swept.examined == 7);
    CHECK(swept.removed == 4);
    CHECK(fs::exists(live));
    CHECK(fs::exists(new_temp));   // a writer may hold it right now
    CHECK(fs::exists(other));
    for (const auto& gone : {expired, unbounded, unreadable, old_temp}) CHECK_FALSE(fs::exists(gone));
  }
  SECTION("no directory: nothing to do") {
    CHECK(sweep_restore_plans(tmp.path / "none", now, 100).examined == 0);
  }
}
