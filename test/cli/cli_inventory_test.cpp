// The CLI contract scripts rely on, checked by running the built `gpuckpt` on the fixture trees:
// `gpus [--host-root DIR] [--json]` and `match --source FILE [--host-root DIR] [--target-gpus ...] [--json]` with
// exit 0 (mapping), 3 (no match, reasons) and 2 (bad input, message naming the input).
#include <catch2/catch_test_macros.hpp>

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "gpu/properties_record.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Run {
  int rc = -1;
  std::string out, err;
};

// One scratch directory per test process, removed when it exits.
struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("gpuckpt-cli-test-" + std::to_string(::getpid()));
  Scratch() { fs::create_directories(dir); }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

fs::path scratch() {
  static const Scratch s;
  return s.dir;
}

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

fs::path write_file(const std::string& name, const std::string& text) {
  const fs::path p = scratch() / name;
  std::ofstream(p, std::ios::trunc) << text;
  return p;
}

// Runs gpuckpt with `args` (shell words, already quoted where needed) and optional VAR=value prefixes.
Run run_cli(const std::string& args, const std::string& env = "") {
  static std::atomic<int> n{0};
  const int id = n++;
  const fs::path out = scratch() / ("out" + std::to_string(id)), err = scratch() / ("err" + std::to_string(id));
  const std::string cmd = "env -u GPUCKPT_MODEL_CHECK -u GPUCKPT_MEMORY_CHECK -u GPUCKPT_FIRMWARE_CHECK "
                          "-u GPUCKPT_LINK_CHECK -u GPUCKPT_NUMA_CHECK " + env + " " + GPUCKPT_CLI + " " + args +
                          " >" + out.string() + " 2>" + err.string() + " </dev/null";
  const int status = std::system(cmd.c_str());
  Run r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

std::string fixture(const std::string& name) { return std::string(GPUCKPT_TEST_FIXTURES) + "/" + name; }

std::string root_args(const std::string& name) {
  std::string args = "--host-root " + fixture(name);
  if (fs::exists(fixture(name) + "/nvml-snapshot.json")) args += " --nvml-snapshot " + fixture(name) + "/nvml-snapshot.json";
  return args;
}

// `gpus --json` of a fixture, optionally narrowed to some used GPUs, saved as a source record file.
fs::path record_of(const std::string& name, const std::vector<std::size_t>& used = {}) {
  Run r = run_cli("gpus --json " + root_args(name));
  REQUIRE(r.rc == 0);
  json record = json::parse(r.out);
  if (!used.empty()) {
    json ids = json::array();
    for (auto i : used) ids.push_back(record["node"]["gpus"][i]["id"]);
    record["used_gpu_ids"] = ids;
  }
  std::string file = name;
  for (auto i : used) file += "-" + std::to_string(i);
  return write_file(file + ".json", record.dump());
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("gpuckpt gpus lists every fixture and --json is a version-1 record of all its GPUs", "[unit]") {
  const std::vector<std::pair<std::string, std::size_t>> fixtures = {
      {"amd-mi100", 2}, {"amd-mi210", 4}, {"amd-mi250x", 8}, {"amd-mi300x", 8},
      {"cpu-only", 1},  {"nvidia-h200", 1}, {"nvidia-h100-8gpu", 8}, {"nvidia-h200-x2", 2}};
  for (const auto& [name, count] : fixtures) {
    INFO(name);
    Run text = run_cli("gpus " + root_args(name));
    CHECK(text.rc == 0);
    Run r = run_cli("gpus --json " + root_args(name));
    REQUIRE(r.rc == 0);
    const json record = json::parse(r.out);
    CHECK(record["version"] == 1);
    REQUIRE(record["node"]["gpus"].size() == count);
    CHECK(record["used_gpu_ids"].size() == count);
    for (const auto& gpu : record["node"]["gpus"]) CHECK(contains(text.out, gpu["id"].get<std::string>()));
  }
  const json h200 = json::parse(run_cli("gpus --json " + root_args("nvidia-h200")).out);
  CHECK(h200["node"]["gpus"][0]["uuid"] == "GPU-a2ce77ac-c70f-b672-0aa0-f871c0787910");
  CHECK(h200["node"]["gpus"][0]["memory_bytes"] == 150754820096ull);
}

TEST_CASE("gpuckpt gpus refuses an unreadable host root and unknown arguments with exit 2", "[unit]") {
  Run r = run_cli("gpus --host-root /nonexistent/root");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "/nonexistent/root"));
  r = run_cli("gpus --frobnicate");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "--frobnicate"));
  r = run_cli("gpus --host-root");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "--host-root needs a value"));
}

TEST_CASE("gpuckpt match maps a node onto itself, text and JSON", "[unit]") {
  for (const char* name : {"amd-mi250x", "nvidia-h100-8gpu", "nvidia-h200", "amd-mi100", "nvidia-h200-x2"}) {
    INFO(name);
    const fs::path source = record_of(name);
    Run r = run_cli("match --json --source " + source.string() + " " + root_args(name));
    REQUIRE(r.rc == 0);
    const json plan = json::parse(r.out);
    CHECK(plan["matched"] == true);
    const json record = json::parse(slurp(source));
    REQUIRE(plan["mappings"].size() == record["used_gpu_ids"].size());
    for (const auto& m : plan["mappings"]) {
      CHECK(m["source"]["id"] == m["target"]["id"]);
      CHECK_FALSE(m["target"]["device_paths"].empty());
    }
    Run text = run_cli("match --source " + source.string() + " " + root_args(name));
    CHECK(text.rc == 0);
    CHECK(contains(text.out, "SOURCE"));
  }
}

TEST_CASE("gpuckpt match keeps a hive together on renumbered GPUs with new render minors", "[unit]") {
  // The target: the MI300X tree with every gpu_id changed and render minors shifted by 8.
  const fs::path target = scratch() / "mi300x-renumbered";
  fs::remove_all(target);
  fs::copy(fixture("amd-mi300x"), target, fs::copy_options::recursive | fs::copy_options::copy_symlinks);
  const fs::path nodes = target / "sys/class/kfd/kfd/topology/nodes";
  for (int node = 2; node < 10; ++node) {
    std::ofstream(nodes / std::to_string(node) / "gpu_id", std::ios::trunc) << 7000 + node << "\n";
    const fs::path props = nodes / std::to_string(node) / "properties";
    std::string text = slurp(props);
    const std::regex minor("drm_render_minor (\\d+)");
    std::smatch m;
    REQUIRE(std::regex_search(text, m, minor));
    text = std::regex_replace(text, minor, "drm_render_minor " + std::to_string(std::stoi(m[1]) + 8));
    std::ofstream(props, std::ios::trunc) << text;
  }
  const fs::path source = record_of("amd-mi300x", {2, 3});
  Run r = run_cli("match --json --source " + source.string() + " --host-root " + target.string());
  REQUIRE(r.rc == 0);
  const json plan = json::parse(r.out);
  REQUIRE(plan["mappings"].size() == 2);
  CHECK(plan["mappings"][0]["target"]["id"] == "kfd-7004");
  CHECK(plan["mappings"][0]["target"]["render_minor"] == 138);
  CHECK(plan["mappings"][0]["source"]["render_minor"] == 130);
  CHECK(plan["mappings"][1]["target"]["id"] == "kfd-7005");
  CHECK(plan["mappings"][1]["target"]["device_paths"] == json({"/dev/kfd", "/dev/dri/renderD139"}));
  fs::remove_all(target);
}

TEST_CASE("gpuckpt match honours the scheduler's GPUs and keeps hives within them", "[unit]") {
  // Two GCDs of the second MI250X hive, onto the same node where the scheduler gave one GPU of the second hive
  // and three of the first: both must land in the first hive.
  const fs::path source = record_of("amd-mi250x", {4, 5});
  const json record = json::parse(slurp(source));
  const auto id = [&](int i) { return record["node"]["gpus"][i]["id"].get<std::string>(); };
  Run r = run_cli("match --json --source " + source.string() + " " + root_args("amd-mi250x") + " --target-gpus " +
                  id(7) + "," + id(1) + "," + id(2) + "," + id(3));
  REQUIRE(r.rc == 0);
  const json plan = json::parse(r.out);
  CHECK(plan["mappings"][0]["target"]["id"] == id(1));
  CHECK(plan["mappings"][1]["target"]["id"] == id(2));

  // Only GPUs of different hives assigned: exit 3, the hive named for every candidate
  r = run_cli("match --source " + source.string() + " " + root_args("amd-mi250x") + " --target-gpus " + id(0) + "," + id(7));
  CHECK(r.rc == 3);
  CHECK(contains(r.out, "links"));
  CHECK(contains(r.out, "not-allowed"));
  CHECK(contains(r.out, "XGMI hive"));

  // The old spelling still works, and says which one to use.
  r = run_cli("match --source " + source.string() + " " + root_args("amd-mi250x") + " --assigned kfd-1,kfd-2");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "'kfd-1'"));
  CHECK(contains(r.err, "--assigned is deprecated, use --target-gpus"));
}

TEST_CASE("gpuckpt match on another model exits 3 and names the property for every candidate", "[unit]") {
  Run r = run_cli("match --json --source " + record_of("nvidia-h200").string() + " " + root_args("nvidia-h100-8gpu"));
  REQUIRE(r.rc == 3);
  const json failure = json::parse(r.out);
  CHECK(failure["matched"] == false);
  std::set<std::string> ruled_out_by_model;
  for (const auto& rej : failure["rejections"]) {
    if (rej["property"] != "model") continue;
    CHECK(contains(rej["detail"].get<std::string>(), "NVIDIA H200"));
    ruled_out_by_model.insert(rej["candidate_id"].get<std::string>());
  }
  CHECK(ruled_out_by_model.size() == 8);   // every H100, by name (memory and the older driver are named too)
  CHECK(contains(r.out, "\"memory\""));
  CHECK(contains(r.out, "older than the source's 580.159.04"));
  r = run_cli("match --source " + record_of("amd-mi250x").string() + " " + root_args("amd-mi300x"));
  CHECK(r.rc == 3);
  CHECK(contains(r.out, "model"));
}

TEST_CASE("gpuckpt match: one H200 onto the captured NVLink pair; the pair needs NVLink on the target", "[unit]") {
  // The single-GPU H200 node's record fits either GPU of the pair; the first is chosen.
  Run r = run_cli("match --json --source " + record_of("nvidia-h200").string() + " " + root_args("nvidia-h200-x2"));
  REQUIRE(r.rc == 0);
  CHECK(json::parse(r.out)["mappings"][0]["target"]["device_paths"][0] == "/dev/nvidia0");
  // The NV18 pair onto the same node with NVLink gone from the NVML snapshot: links named, exit 3.
  json snapshot = json::parse(slurp(fixture("nvidia-h200-x2") + "/nvml-snapshot.json"));
  for (auto& d : snapshot["devices"]) d["nvlink_peers"] = json::array();
  const fs::path no_nvlink = write_file("h200-x2-no-nvlink.json", snapshot.dump());
  const fs::path pair = record_of("nvidia-h200-x2");
  r = run_cli("match --source " + pair.string() + " --host-root " + fixture("nvidia-h200-x2") + " --nvml-snapshot " +
              no_nvlink.string());
  CHECK(r.rc == 3);
  CHECK(contains(r.out, "linked by 18 nvlink"));
  r = run_cli("match --source " + pair.string() + " --host-root " + fixture("nvidia-h200-x2") + " --nvml-snapshot " +
                  no_nvlink.string(), "GPUCKPT_LINK_CHECK=0");
  CHECK(r.rc == 0);
  CHECK(contains(r.out, "relaxed: links"));
}

TEST_CASE("gpuckpt match relaxations come from the environment and are reported", "[unit]") {
  // MI210 (64 GiB) onto MI100 (32 GiB): model and memory both fail; relaxing only one is not enough.
  const fs::path source = record_of("amd-mi210", {0});
  Run r = run_cli("match --source " + source.string() + " " + root_args("amd-mi100"), "GPUCKPT_MODEL_CHECK=0");
  CHECK(r.rc == 3);
  CHECK(contains(r.out, "memory"));
  r = run_cli("match --source " + source.string() + " " + root_args("amd-mi100"),
              "GPUCKPT_MODEL_CHECK=0 GPUCKPT_MEMORY_CHECK=0 GPUCKPT_FIRMWARE_CHECK=0");
  REQUIRE(r.rc == 0);
  CHECK(contains(r.out, "relaxed: model"));
  CHECK(contains(r.out, "relaxed: memory"));
  CHECK(contains(r.err, "relaxed check used: model"));   // logged as a warning too
}

TEST_CASE("gpuckpt match rejects bad input with exit 2 and a message naming the file", "[unit]") {
  const std::string root = " " + root_args("amd-mi100");
  const fs::path malformed = write_file("malformed.json", "{\"version\": 1, \"node\": ");
  Run r = run_cli("match --source " + malformed.string() + root);
  CHECK(r.rc == 2);
  CHECK(contains(r.err, malformed.string()));
  CHECK(contains(r.err, "malformed JSON"));

  json newer = json::parse(slurp(record_of("amd-mi100")));
  newer["version"] = 99;
  const fs::path future = write_file("future.json", newer.dump());
  r = run_cli("match --source " + future.string() + root);
  CHECK(r.rc == 2);
  CHECK(contains(r.err, future.string()));
  CHECK(contains(r.err, "version 99 is newer"));

  r = run_cli("match --source /nonexistent/record.json" + root);
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "/nonexistent/record.json"));

  r = run_cli("match --source " + record_of("amd-mi100").string() + " --host-root /nonexistent/root");
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "/nonexistent/root"));

  r = run_cli("match" + root);
  CHECK(r.rc == 2);
  CHECK(contains(r.err, "--source"));
}

TEST_CASE("gpuckpt match takes the protobuf record a CRIU plugin stores in the checkpoint", "[unit]") {
  auto record = gpuckpt::parse_record(slurp(record_of("amd-mi250x", {0, 1})), "mi250x");
  REQUIRE(record.ok());
  const fs::path image = write_file("gpuckpt-cuda-1234.img", gpuckpt::to_protobuf(*record));
  Run r = run_cli("match --json --source " + image.string() + " " + root_args("amd-mi250x"));
  REQUIRE(r.rc == 0);
  CHECK(json::parse(r.out)["mappings"].size() == 2);
  const fs::path corrupt = write_file("corrupt.img", gpuckpt::to_protobuf(*record).substr(0, 17));
  r = run_cli("match --source " + corrupt.string() + " " + root_args("amd-mi250x"));
  CHECK(r.rc == 2);
  CHECK(contains(r.err, corrupt.string()));
}

TEST_CASE("gpuckpt match reads the record from stdin with --source -", "[unit]") {
  const fs::path source = record_of("nvidia-h200");
  const std::string cmd = std::string(GPUCKPT_CLI) + " match --source - " + root_args("nvidia-h200") + " < " +
                          source.string() + " > " + (scratch() / "stdin.out").string();
  const int status = std::system(cmd.c_str());
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(contains(slurp(scratch() / "stdin.out"), "GPU-a2ce77ac-c70f-b672-0aa0-f871c0787910"));
}
