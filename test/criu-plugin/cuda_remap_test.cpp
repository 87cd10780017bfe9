// The CUDA backend's pure parts: GPU UUIDs, the mapping file, the restore pair list (every seen GPU covered),
// the mapping choice, gpuckpt's record files in the image directory, and /proc process discovery.
#include <catch2/catch_test_macros.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "criu-plugin/cuda/process_info.h"
#include "criu-plugin/cuda/record_files.h"
#include "criu-plugin/cuda/remap.h"
#include "criu-plugin/cuda/uuid.h"
#include "test/criu-plugin/h200_gpus.h"

using namespace gpuckpt;
using namespace gpuckpt::cuda;

namespace {

using test::h200;
const std::string& A = test::kGpuA;
const std::string& B = test::kGpuB;
const std::string& C = test::kGpuC;
const std::string& D = test::kGpuD;

std::vector<std::pair<std::string, std::string>> as_text(const std::vector<UuidPair>& pairs) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& p : pairs) out.emplace_back(format_uuid(p.source), format_uuid(p.target));
  return out;
}


}  // namespace

TEST_CASE("GPU UUIDs parse from nvidia-smi's text and print back the same", "[unit]") {
  auto uuid = parse_uuid(A, "test");
  REQUIRE(uuid);
  CHECK((*uuid)[0] == 0x3d);
  CHECK((*uuid)[15] == 0xad);
  CHECK(format_uuid(*uuid) == A);
  CHECK(format_uuid(*parse_uuid("GPU-3DF50D36-548A-08C1-7CD5-41FF6E7B3CAD", "t")) == A);   // upper case
  CHECK(format_uuid(*parse_uuid("3df50d36548a08c17cd541ff6e7b3cad", "t")) == A);           // bare hex
  auto short_one = parse_uuid("GPU-3df50d36", "mapping file x pair 0 source_uuid");
  REQUIRE_FALSE(short_one);
  CHECK(short_one.error().message.find("mapping file x pair 0 source_uuid") != std::string::npos);
  CHECK(short_one.error().message.find("8 hex digits, need 32") != std::string::npos);
  CHECK_FALSE(parse_uuid("GPU-3df50d36-548a-08c1-7cd5-41ff6e7b3caz", "t"));
  CHECK_FALSE(parse_uuid(A + "00", "t"));
  CHECK_FALSE(parse_uuid("", "t"));
}

TEST_CASE("restore pairs cover every GPU the process saw", "[unit]") {
  SECTION("same node, same GPUs: no pairs (the driver keeps each GPU)") {
    auto pairs = build_restore_pairs({A, B}, {{A, A}, {B, B}}, {A, B});
    REQUIRE(pairs);
    CHECK(pairs->empty());
  }
  SECTION("moving GPU0 to GPU1 also moves GPU1 somewhere: both pairs (the verified rule)") {
    auto pairs = build_restore_pairs({A, B}, {{A, B}}, {A, B});
    REQUIRE(pairs);
    CHECK(as_text(*pairs) == std::vector<std::pair<std::string, std::string>>{{A, B}, {B, A}});
  }
  SECTION("a one-GPU process moved to the other GPU of the node") {
    auto pairs = build_restore_pairs({A}, {{A, B}}, {A, B});
    REQUIRE(pairs);
    CHECK(as_text(*pairs) == std::vector<std::pair<std::string, std::string>>{{A, B}});
  }
  SECTION("another node: unmapped GPUs take free GPUs in node order") {
    auto pairs = build_restore_pairs({A, B}, {{B, D}}, {C, D});
    REQUIRE(pairs);
    CHECK(as_text(*pairs) == std::vector<std::pair<std::string, std::string>>{{A, C}, {B, D}});
  }
  SECTION("a GPU listed twice counts once") {
    auto pairs = build_restore_pairs({A, A}, {{A, C}}, {C});
    REQUIRE(pairs);
    CHECK(pairs->size() == 1);
  }
  SECTION("fewer GPUs here than the process saw: a clear error") {
    auto pairs = build_restore_pairs({A, B}, {{A, C}}, {C});
    REQUIRE_FALSE(pairs);
    CHECK(pairs.error().message.find("saw 2 GPU(s)") != std::string::npos);
    CHECK(pairs.error().message.find("has only 1") != std::string::npos);
  }
  SECTION("a mapping to a GPU this node does not have") {
    auto pairs = build_restore_pairs({A}, {{A, D}}, {A, B});
    REQUIRE_FALSE(pairs);
    CHECK(pairs.error().message.find("not a GPU of this node") != std::string::npos);
  }
}

TEST_CASE("the mapping file is read strictly", "[unit]") {
  const std::string good = R"({"version": 1, "pairs": [{"source_uuid": ")" + A + R"(", "target_uuid": ")" + B +
                           R"("}, {"source_uuid": ")" + B + R"(", "target_uuid": ")" + A + R"("}]})";
  auto mapping = parse_mapping(good, "/img/gpuckpt-gpu-map.json");
  REQUIRE(mapping);
  CHECK(mapping->size() == 2);
  CHECK(mapping->at(A) == B);
  CHECK(mapping->at(B) == A);
  auto again = parse_mapping(mapping_to_json(*mapping), "round trip");
  REQUIRE(again);
  CHECK(*again == *mapping);

  auto error_of = [](const std::string& text) {
    auto m = parse_mapping(text, "/img/gpuckpt-gpu-map.json");
    REQUIRE_FALSE(m);
    CHECK(m.error().message.find("/img/gpuckpt-gpu-map.json") != std::string::npos);
    return m.error().message;
  };
  CHECK(error_of("{not json").find("not valid JSON") != std::string::npos);
  CHECK(error_of("[]").find("not an object") != std::string::npos);
  CHECK(error_of(R"({"pairs": []})").find("no integer \"version\"") != std::string::npos);
  CHECK(error_of(R"({"version": 2, "pairs": []})").find("version 2 is not supported") != std::string::npos);
  CHECK(error_of(R"({"version": 1})").find("no \"pairs\" array") != std::string::npos);
  CHECK(error_of(R"({"version": 1, "pairs": [{"source_uuid": ")" + A + R"("}]})").find("target_uuid") !=
        std::string::npos);
  CHECK(error_of(R"({"version": 1, "pairs": [{"source_uuid": "GPU-12", "target_uuid": ")" + A + R"("}]})")
            .find("pair 0 source_uuid") != std::string::npos);
  CHECK(error_of(R"({"version": 1, "pairs": [{"source_uuid": ")" + A + R"(", "target_uuid": ")" + B +
                 R"("}, {"source_uuid": ")" + A + R"(", "target_uuid": ")" + C + R"("}]})")
            .find("listed twice") != std::string::npos);
  CHECK(error_of(R"({"version": 1, "pairs": [{"source_uuid": ")" + A + R"(", "target_uuid": ")" + C +
                 R"("}, {"source_uuid": ")" + B + R"(", "target_uuid": ")" + C + R"("}]})")
            .find("two source GPUs") != std::string::npos);
}

TEST_CASE("the OCI hook's restore plan gives the NVIDIA part of the mapping", "[unit]") {
  const std::string plan = R"({"version": 1, "checkpoint_id": "c1", "assignments": [{"source_id": ")" + A +
                           R"(", "target_id": ")" + B + R"("}, {"source_id": "kfd-1234", "target_id": "kfd-99"}],
                           "devices": [], "env": {}})";
  auto mapping = parse_restore_plan(plan, "gpuckpt-restore-plan.json");
  REQUIRE(mapping);
  CHECK(*mapping == GpuMapping{{A, B}});
  auto newer = parse_restore_plan(R"({"version": 2, "assignments": []})", "gpuckpt-restore-plan.json");
  REQUIRE_FALSE(newer);
  CHECK(newer.error().message.find("gpuckpt-restore-plan.json") != std::string::npos);
  CHECK_FALSE(parse_restore_plan(R"({"version": 1, "assignments": [{"source_id": 1}]})", "p"));
}

TEST_CASE("without a mapping file: identity on the same node, the matcher elsewhere", "[unit]") {
  GpuPropertiesRecord record;
  record.node.hostname = "node-a";
  record.node.gpus = {h200(A, 0), h200(B, 1)};
  record.used_gpu_ids = {A};
  SECTION("this node has the GPU: it stays") {
    NodeInventory here = record.node;
    auto mapping = choose_mapping(record, here);
    REQUIRE(mapping);
    CHECK(*mapping == GpuMapping{{A, A}});
  }
  SECTION("another node with an identical GPU: the matcher places it there") {
    NodeInventory other;
    other.hostname = "node-b";
    other.gpus = {h200(C, 0)};
    auto mapping = choose_mapping(record, other);
    REQUIRE(mapping);
    CHECK(*mapping == GpuMapping{{A, C}});
  }
  SECTION("another node whose GPU is a different model: an error naming why") {
    NodeInventory other;
    GpuDevice small = h200(C, 0);
    small.name = "NVIDIA H100 80GB HBM3";
    small.device_id = 0x2330;
    small.memory_bytes = 80ULL << 30;
    other.gpus = {small};
    auto mapping = choose_mapping(record, other);
    REQUIRE_FALSE(mapping);
    CHECK(mapping.error().message.find("no GPU of this node can take") != std::string::npos);
  }
}

TEST_CASE("with no plan or mapping by the driver's restore, GPUs only stay where they are", "[unit]") {
  GpuPropertiesRecord record;
  record.node.gpus = {h200(A, 0), h200(B, 1)};
  record.used_gpu_ids = {A, B};
  SECTION("same node: every GPU stays itself, nothing to refuse") {
    auto mapping = choose_mapping(record, record.node);
    REQUIRE(mapping);
    CHECK(require_plan_for_moves(*mapping).ok());
  }
  SECTION("a node without the checkpoint's GPU: stopped, naming the GPU, the missing plan and what to check") {
    NodeInventory other;
    other.gpus = {h200(C, 0), h200(D, 1)};
    auto chosen = choose_mapping(record, other);   // what init falls back to: the matcher's guess
    REQUIRE(chosen);
    CHECK_FALSE(require_plan_for_moves(*chosen).ok());
    // A stays (this node has it), B would go to C: only B is named.
    auto refused = require_plan_for_moves(GpuMapping{{A, A}, {B, C}});
    REQUIRE_FALSE(refused.ok());
    const std::string& message = refused.error().message;
    INFO(message);
    CHECK(refused.error().errno_value == ENODEV);
    CHECK(message.find(B) != std::string::npos);
    CHECK(message.find("GPU " + A) == std::string::npos);   // A stays: not named as moved
    CHECK(message.find("no gpuckpt restore plan reached CRIU's images directory") != std::string::npos);
    CHECK(message.find(kRestorePlanFileName) != std::string::npos);
    CHECK(message.find("gpuckpt-nri") != std::string::npos);
    CHECK(message.find("OCI hook") != std::string::npos);
  }
  SECTION("an empty mapping (no GPU recorded) has nothing to move") {
    CHECK(require_plan_for_moves(GpuMapping{}).ok());
  }
}

TEST_CASE("GPU records round-trip through the image directory", "[unit]") {
  const auto dir = std::filesystem::temp_directory_path() / ("gpuckpt-records-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  REQUIRE(fd >= 0);
  GpuPropertiesRecord record;
  record.node.gpus = {h200(A, 0), h200(B, 1)};
  record.used_gpu_ids = {A, B};
  REQUIRE(write_process_record(fd, 4242, record));
  std::ofstream(dir / "pages-1.img") << "not ours";
  std::ofstream(dir / "gpuckpt-cuda-x.img") << "not a record name";
  auto records = read_process_records(fd);
  REQUIRE(records);
  REQUIRE(records->by_pid.size() == 1);
  CHECK(records->by_pid.count(4242) == 1);
  CHECK(record_uuids(records->by_pid.at(4242)) == std::vector<std::string>{A, B});
  CHECK(records->merged.used_gpu_ids.size() == 2);
  CHECK(describe_needed_gpus(*records).find("pid 4242 used " + A) != std::string::npos);
  auto missing = read_image_file(fd, "gpuckpt-gpu-map.json");
  REQUIRE_FALSE(missing);
  CHECK(missing.error().errno_value == ENOENT);

  std::ofstream(dir / "gpuckpt-cuda-7.img") << "garbage that is no protobuf record \xff\xff";
  auto broken = read_process_records(fd);
  REQUIRE_FALSE(broken);
  CHECK(broken.error().message.find("gpuckpt-cuda-7.img") != std::string::npos);
  ::close(fd);
  std::filesystem::remove_all(dir);
}

TEST_CASE("process discovery: descendants, and no NVIDIA device in a plain process", "[unit]") {
  pid_t child = ::fork();
  if (child == 0) {
    ::pause();
    _exit(0);
  }
  REQUIRE(child > 0);
  auto found = descendants(::getpid());
  CHECK(std::find(found.begin(), found.end(), child) != found.end());
  CHECK(process_alive(child));
  NvidiaFiles files = nvidia_files(::getpid());
  CHECK_FALSE(files.any);
  CHECK(files.gpu_minors.empty());
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  CHECK_FALSE(process_alive(child));
}

TEST_CASE("a target GPU's device minor comes from this node's inventory", "[unit]") {
  NodeInventory node;
  node.gpus = {h200(A, 3), h200(B, 0)};
  CHECK(nvidia_minor(node, parse_uuid(B, "test").value()) == 0);
  CHECK(nvidia_minor(node, parse_uuid(A, "test").value()) == 3);
  CHECK(nvidia_minor(node, parse_uuid(C, "test").value()) == -1);   // not on this node
}
