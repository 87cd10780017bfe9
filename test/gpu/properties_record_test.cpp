#include <catch2/catch_test_macros.hpp>

#include <random>

#include "gpu/properties_record.h"
#include "test/support/gpu_builders.h"

using namespace gpuckpt;
using namespace gpuckpt::test;

namespace {
GpuPropertiesRecord sample() {
  std::vector<GpuDevice> gpus = {amd_gpu("kfd-100", 0x740c, 64, 0, 0xabcdef0123456789ull),
                                 amd_gpu("kfd-200", 0x740c, 64, 1, 0xabcdef0123456789ull),
                                 nvidia_gpu("GPU-1", "NVIDIA H200", 141)};
  link(gpus, 0, 1, "xgmi", true, 1);
  gpus[0].links[0].weight = 15;
  gpus[0].links[0].max_bandwidth = 50000;
  gpus[0].render_minor = 128;
  gpus[0].gpu_id = 100;
  gpus[0].kfd_node = 1;
  gpus[0].device_paths = {"/dev/kfd", "/dev/dri/renderD128"};
  gpus[2].mig_mode = "Disabled";
  gpus[2].device_minor = 0;
  gpus[2].firmware_version = "96.00.a5.00.1a";
  auto r = record_of(gpus, {"kfd-100", "kfd-200"});
  r.node.system = {{"platform_oem", "1234"}};
  return r;
}

void check_equal(const GpuPropertiesRecord& a, const GpuPropertiesRecord& b) {
  // to_json covers every field, so equal JSON means equal records.
  CHECK(to_json(a) == to_json(b));
}
}  // namespace

TEST_CASE("the record round-trips through JSON text and protobuf", "[unit]") {
  const auto record = sample();
  auto from_text = parse_record(to_json(record).dump(), "test");
  REQUIRE(from_text.ok());
  check_equal(record, *from_text);
  CHECK(from_text->node.gpus[0].hive_id == 0xabcdef0123456789ull);   // 64-bit ids survive JSON exactly
  CHECK(from_text->node.gpus[0].links[0].max_bandwidth == 50000);

  auto from_pb = record_from_protobuf(to_protobuf(record), "test.img");
  REQUIRE(from_pb.ok());
  check_equal(record, *from_pb);
  CHECK(from_pb->node.gpus[2].numa_node == 0);
  CHECK(from_pb->node.gpus[1].render_minor == -1);
}

TEST_CASE("an inventory serialises as a record that uses every GPU", "[unit]") {
  auto json = to_json(sample().node);
  CHECK(json["version"] == GpuPropertiesRecord::kVersion);
  CHECK(json["used_gpu_ids"] == nlohmann::json({"kfd-100", "kfd-200", "GPU-1"}));
}

TEST_CASE("bad records are refused with a message naming the source and the problem", "[unit]") {
  struct Case {
    std::string text;
    std::string expect;
  };
  auto good = to_json(sample());
  auto with = [&](auto edit) {
    auto j = good;
    edit(j);
    return j.dump();
  };
  const std::vector<Case> cases = {
      {"{\"version\": 1, ", "malformed JSON"},
      {"[1,2]", "expected a JSON object"},
      {"{}", "missing 'version'"},
      {with([](auto& j) { j["version"] = 2; }), "record version 2 is newer"},
      {with([](auto& j) { j["version"] = 0; }), "not a valid record version"},
      {with([](auto& j) { j["version"] = "1"; }), "'version' must be an integer"},
      {with([](auto& j) { j.erase("node"); }), "missing required field 'node'"},
      {with([](auto& j) { j["node"]["gpus"][1]["memory_bytes"] = -5; }), "node.gpus[1].memory_bytes"},
      {with([](auto& j) { j["node"]["gpus"][0]["vendor"] = "intel"; }), "unknown vendor 'intel'"},
      {with([](auto& j) { j["node"]["gpus"][0].erase("id"); }), "node.gpus[0]: missing required field 'id'"},
      {with([](auto& j) { j["node"]["gpus"][1]["id"] = "kfd-100"; }), "appears twice"},
      {with([](auto& j) { j["used_gpu_ids"] = {"kfd-999"}; }), "'kfd-999', which is not in node.gpus"},
      {with([](auto& j) { j["node"]["gpus"][0]["links"][0]["peer_id"] = "nope"; }), "link to 'nope'"},
      {with([](auto& j) { j["node"]["gpus"][0]["properties"]["simd_count"] = "many"; }), "properties.simd_count"},
  };
  for (const auto& c : cases) {
    INFO(c.text.substr(0, 120));
    auto r = parse_record(c.text, "/tmp/source.json");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.rfind("/tmp/source.json: ", 0) == 0);
    CHECK(r.error().message.find(c.expect) != std::string::npos);
  }
}

TEST_CASE("protobuf records from a newer writer or cut short are refused", "[unit]") {
  auto record = sample();
  record.version = GpuPropertiesRecord::kVersion + 1;
  auto newer = record_from_protobuf(to_protobuf(record), "gpus.img");
  REQUIRE_FALSE(newer.ok());
  CHECK(newer.error().message.find("gpus.img: record version 2 is newer") != std::string::npos);

  const std::string bytes = to_protobuf(sample());
  auto cut = record_from_protobuf(std::string_view(bytes).substr(0, bytes.size() / 2), "gpus.img");
  REQUIRE_FALSE(cut.ok());
  CHECK(cut.error().message.find("gpus.img") == 0);
}

TEST_CASE("read_record takes either form and names the source when it is neither", "[unit]") {
  const auto record = sample();
  auto from_json = read_record("\n  " + to_json(record).dump(), "a.json");
  REQUIRE(from_json.ok());
  CHECK(to_json(*from_json) == to_json(record));
  auto from_pb = read_record(to_protobuf(record), "gpuckpt-cuda-42.img");
  REQUIRE(from_pb.ok());
  CHECK(to_json(*from_pb) == to_json(record));
  for (const std::string bad : {"", "garbage", "\xff\xff\xff"}) {
    auto r = read_record(bad, "x.img");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.rfind("x.img: ", 0) == 0);
  }
  CHECK(read_record("{\"version\": 3", "x.json").error().message.find("malformed JSON") != std::string::npos);
}

TEST_CASE("damaged records never throw or crash: every read is a value or an error", "[unit]") {
  // Fixed seed: the same 3000 damaged inputs on every run.
  std::mt19937 rng(20261121);
  const std::string json_text = to_json(sample()).dump();
  const std::string pb = to_protobuf(sample());
  std::size_t refused = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text = i % 2 ? json_text : pb;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = rng() % text.size();
      switch (rng() % 3) {
        case 0: text[at] = static_cast<char>(rng() & 0xff); break;
        case 1: text.erase(at, 1 + rng() % 8); break;
        default: text.resize(at); break;
      }
      if (text.empty()) break;
    }
    Result<GpuPropertiesRecord> r = make_error("unset");
    REQUIRE_NOTHROW(r = read_record(text, "fuzz"));
    if (!r.ok()) {
      ++refused;
      CHECK(r.error().message.rfind("fuzz: ", 0) == 0);
    }
  }
  CHECK(refused > 1000);   // most damage is caught, and what parses is a consistent record (validate() ran)
}
