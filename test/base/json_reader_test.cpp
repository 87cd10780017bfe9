// The bounded JSON reader every untrusted document goes through: limits hold while parsing, typed access names
// the wrong field, integers are strict.
#include <catch2/catch_test_macros.hpp>

#include <chrono>
#include <future>
#include <memory>
#include <thread>

#include "archive/checkpoint_archive.h"
#include "base/json_reader.h"
#include "restore/restore_plan.h"

using namespace gpuckpt;
using nlohmann::json;

TEST_CASE("parse_json refuses deep, huge and many-valued documents before building them", "[unit]") {
  const std::string deep = std::string(200000, '[') + std::string(200000, ']');
  auto r = parse_json(deep, "deep.json");
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().message.find("deep.json: JSON nested deeper than 64 levels") == 0);
  const std::string deep_objects = [] {
    std::string s;
    for (int i = 0; i < 100000; ++i) s += "{\"a\":";
    return s + "1" + std::string(100000, '}');
  }();
  CHECK_FALSE(parse_json(deep_objects, "x").ok());
  CHECK(parse_json(std::string(64, '[') + std::string(64, ']'), "x").ok());
  CHECK_FALSE(parse_json(std::string(65, '[') + std::string(65, ']'), "x").ok());

  JsonLimits small;
  small.max_values = 100;
  std::string many = "[";
  for (int i = 0; i < 200; ++i) many += (i ? ",0" : "0");
  many += "]";
  auto counted = parse_json(many, "many.json", small);
  REQUIRE_FALSE(counted.ok());
  CHECK(counted.error().message.find("more than 100 values") != std::string::npos);
  small.max_bytes = 10;
  CHECK(parse_json(std::string(11, ' '), "big", small).error().errno_value == EFBIG);
  auto broken = parse_json("{\"a\": ", "broken.json");
  REQUIRE_FALSE(broken.ok());
  CHECK(broken.error().message.find("broken.json: malformed JSON") == 0);
}

TEST_CASE("typed fields name the wrong field and never echo the value", "[unit]") {
  const json doc = {{"version", 1}, {"name", {{"nested", std::string(1000, 'Z')}}}, {"list", {1, "two"}},
                    {"count", -5}, {"map", {{"k", 3}}}};
  JsonFields fields("doc.json");
  std::string name;
  fields.get(doc, "", "name", name);
  REQUIRE(fields.failed());
  CHECK(fields.error().message == "doc.json: .name: expected a string, found object");
  JsonFields list_fields("doc.json");
  std::vector<std::string> list;
  list_fields.get(doc, "", "list", list);
  CHECK(list_fields.error().message.find(".list[0]: expected a string, found integer") != std::string::npos);
  JsonFields count_fields("doc.json");
  std::uint32_t count = 7;
  count_fields.get_integer(doc, "", "count", count);
  CHECK(count_fields.failed());
  CHECK(count == 7);
  JsonFields map_fields("doc.json");
  std::map<std::string, std::string> map;
  map_fields.get(doc, "", "map", map);
  CHECK(map_fields.error().message.find(".map.k: expected a string") != std::string::npos);
}

TEST_CASE("versions are strict integers: 4294967297, -5, 1.9 and \"1\" are not version 1", "[unit]") {
  CheckpointGpuRecord record;
  record.checkpoint_id = "ck";
  json good = to_json(record);
  REQUIRE(checkpoint_record_from_json(good, "rec").ok());
  RestorePlan plan;
  plan.id = new_restore_plan_id();
  plan.checkpoint_id = "ck";
  json good_plan = to_json(plan);
  REQUIRE(restore_plan_from_json(good_plan, "plan").ok());
  for (const json& version : {json(4294967297ULL), json(-5), json(1.9), json("1"), json(0), json(2),
                              json::array({1})}) {
    INFO(version.dump());
    json bad = good;
    bad["version"] = version;
    auto r = checkpoint_record_from_json(bad, "rec");
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("rec: version") == 0);
    json bad_plan = good_plan;
    bad_plan["version"] = version;
    CHECK_FALSE(restore_plan_from_json(bad_plan, "plan").ok());
    json bad_record = good;
    bad_record["record"]["version"] = version;
    CHECK_FALSE(checkpoint_record_from_json(bad_record, "rec").ok());
  }
  json big_major = good;
  big_major["devices"] = {{{"container_path", "/dev/nvidia0"}, {"major", 4294967297ULL}}};
  CHECK_FALSE(checkpoint_record_from_json(big_major, "rec").ok());
  big_major["devices"] = {{{"container_path", "/dev/nvidia0"}, {"major", "195"}}};
  auto typed = checkpoint_record_from_json(big_major, "rec");
  REQUIRE_FALSE(typed.ok());
  CHECK(typed.error().message == "rec: devices[0].major: expected a non-negative integer, found string");
}

TEST_CASE("parse_json builds what nlohmann's own parser builds, limits at the same places", "[unit]") {
  for (const char* text : {R"({"a":[1,{"b":null},[[]],{}],"c":"x","a2":-5,"u":18446744073709551615,"f":1.5})",
                           R"([{},{},{"k":[{}]}])", R"("top")", "7", "null", R"({"dup":1,"dup":2})"}) {
    INFO(text);
    auto parsed = parse_json(text, "t");
    REQUIRE(parsed.ok());
    CHECK(parsed.value() == json::parse(text));
  }
  JsonLimits two;
  two.max_depth = 2;
  CHECK(parse_json("[[1]]", "t", two).ok());
  CHECK(parse_json("[[[1]]]", "t", two).error().message == "t: JSON nested deeper than 2 levels; refused");
  JsonLimits three;
  three.max_values = 3;
  CHECK(parse_json(R"({"a":1})", "t", three).ok());   // the object, the key, the value
  CHECK(parse_json(R"({"a":1,"b":2})", "t", three).error().errno_value == EFBIG);
  CHECK(parse_json("1e999", "t").error().message == "t: malformed JSON (a number is out of range)");
  CHECK(parse_json("[1,", "t").error().message.find("t: malformed JSON (syntax error at byte") == 0);
}

TEST_CASE("an array of a million empty objects parses in one linear pass", "[unit]") {
  // nlohmann's callback parser rescanned the parent array after each object it closed: O(n^2), 300k objects in a
  // few KB of an archive cost 18 s. No time is asserted; the wait is a hang guard far above the linear cost (well
  // under a second) and far below the quadratic one (minutes).
  std::string text = "[";
  for (int i = 0; i < 999990; ++i) text += i ? ",{}" : "{}";
  text += "]";
  auto result = std::make_shared<std::promise<Result<json>>>();
  auto done = result->get_future();
  std::thread([result, text] { result->set_value(parse_json(text, "many.json")); }).detach();
  REQUIRE(done.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  auto parsed = done.get();
  REQUIRE(parsed.ok());
  CHECK(parsed->size() == 999990);
}
