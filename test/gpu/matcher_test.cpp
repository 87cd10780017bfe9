#include <catch2/catch_test_macros.hpp>

#include <algorithm>

#include "base/log.h"
#include "gpu/matcher.h"
#include "test/support/gpu_builders.h"

using namespace gpuckpt;
using namespace gpuckpt::test;

namespace {

struct Scenario {
  std::string name;
  std::vector<GpuDevice> source;
  std::vector<std::string> used;
  std::vector<GpuDevice> target;
  MatchPolicy policy;
  std::optional<std::vector<std::string>> allowed;
  // expected: a mapping "src->dst,src->dst" or, on failure, the (source, candidate, property) triples that must
  // appear among the rejections
  std::string mapping;
  std::vector<std::array<std::string, 3>> rejections;
  std::size_t relaxations = 0;
};

Scenario named(std::string name) {
  Scenario c;
  c.name = std::move(name);
  return c;
}

std::string render(const MatchPlan& plan) {
  std::string s;
  for (const auto& a : plan.assignments) s += (s.empty() ? "" : ",") + a.source_id + "->" + a.target_id;
  return s;
}

std::vector<GpuDevice> mi250x_node(const std::string& prefix, std::uint64_t hive_a, std::uint64_t hive_b) {
  // 8 GCDs, two hives of four (as on a 2-hive MI250X fixture), NUMA 0 for the first hive, 1 for the second
  std::vector<GpuDevice> g;
  for (int i = 0; i < 8; ++i)
    g.push_back(amd_gpu(prefix + std::to_string(i), 0x740c, 64, i < 4 ? 0 : 1, i < 4 ? hive_a : hive_b));
  link_all(g, {0, 1, 2, 3}, "xgmi");
  link_all(g, {4, 5, 6, 7}, "xgmi");
  return g;
}

std::vector<Scenario> scenarios() {
  std::vector<Scenario> s;
  auto relax = [](auto edit) {
    MatchPolicy p;
    edit(p);
    return p;
  };
  {
    auto c = named("same node restores onto the same GPUs");
    c.source = {amd_gpu("kfd-1", 0x740f, 64), amd_gpu("kfd-2", 0x740f, 64)};
    c.used = {"kfd-2"};
    c.target = c.source;
    c.mapping = "kfd-2->kfd-2";
    s.push_back(c);
  }
  {
    auto c = named("renumbered gpu_ids map by model, in inventory order");
    c.source = {amd_gpu("kfd-1", 0x740f, 64), amd_gpu("kfd-2", 0x740f, 64)};
    c.used = {"kfd-1", "kfd-2"};
    c.target = {amd_gpu("kfd-9", 0x740f, 64), amd_gpu("kfd-7", 0x740f, 64)};
    c.mapping = "kfd-1->kfd-9,kfd-2->kfd-7";
    s.push_back(c);
  }
  {
    auto c = named("another model is refused and named");
    c.source = {amd_gpu("kfd-1", 0x740f, 64)};
    c.used = {"kfd-1"};
    c.target = {amd_gpu("kfd-1", 0x738c, 32)};
    c.rejections = {{"kfd-1", "kfd-1", "model"}, {"kfd-1", "kfd-1", "memory"}};
    s.push_back(c);
  }
  {
    auto c = named("model check relaxed: accepted and reported");
    c.source = {amd_gpu("kfd-1", 0x740f, 64)};
    c.used = {"kfd-1"};
    c.target = {amd_gpu("kfd-5", 0x738c, 64)};
    c.policy = relax([](MatchPolicy& p) { p.check_model = false; });
    c.mapping = "kfd-1->kfd-5";
    c.relaxations = 1;
    s.push_back(c);
  }
  {
    auto c = named("larger VRAM is fine, smaller is not");
    c.source = {nvidia_gpu("GPU-a", "NVIDIA H100 80GB HBM3", 80)};
    c.used = {"GPU-a"};
    auto small = nvidia_gpu("GPU-s", "NVIDIA H100 80GB HBM3", 40);
    auto big = nvidia_gpu("GPU-b", "NVIDIA H100 80GB HBM3", 96);
    c.target = {small, big};
    c.mapping = "GPU-a->GPU-b";
    s.push_back(c);
  }
  {
    auto c = named("smaller VRAM only: memory named; relaxed: accepted");
    c.source = {nvidia_gpu("GPU-a", "NVIDIA H100 80GB HBM3", 80)};
    c.used = {"GPU-a"};
    c.target = {nvidia_gpu("GPU-s", "NVIDIA H100 80GB HBM3", 40)};
    c.rejections = {{"GPU-a", "GPU-s", "memory"}};
    s.push_back(c);
    c.name = "memory relaxed";
    c.policy = relax([](MatchPolicy& p) { p.check_memory = false; });
    c.rejections.clear();
    c.mapping = "GPU-a->GPU-s";
    c.relaxations = 1;
    s.push_back(c);
  }
  {
    auto c = named("older driver refused, newer accepted");
    c.source = {nvidia_gpu("GPU-a", "NVIDIA H200", 141, 0, "580.159.04")};
    c.used = {"GPU-a"};
    c.target = {nvidia_gpu("GPU-old", "NVIDIA H200", 141, 0, "580.95.05"),
                nvidia_gpu("GPU-new", "NVIDIA H200", 141, 0, "580.159.10")};
    c.mapping = "GPU-a->GPU-new";
    s.push_back(c);
  }
  {
    auto c = named("older AMD firmware refused");
    c.source = {amd_gpu("kfd-1", 0x740f, 64, 0, 0, 120)};
    c.used = {"kfd-1"};
    c.target = {amd_gpu("kfd-1", 0x740f, 64, 0, 0, 110)};
    c.rejections = {{"kfd-1", "kfd-1", "firmware"}};
    s.push_back(c);
  }
  {
    auto c = named("NVIDIA name differs: model");
    c.source = {nvidia_gpu("GPU-a", "NVIDIA H200", 141)};
    c.used = {"GPU-a"};
    c.target = {nvidia_gpu("GPU-b", "NVIDIA A100-SXM4-80GB", 160)};
    c.rejections = {{"GPU-a", "GPU-b", "model"}};
    s.push_back(c);
  }
  {
    auto c = named("another vendor is never a candidate, even with every check relaxed");
    c.source = {nvidia_gpu("GPU-a", "NVIDIA H200", 141)};
    c.used = {"GPU-a"};
    c.target = {amd_gpu("kfd-1", 0x74a1, 192)};
    c.policy = relax([](MatchPolicy& p) { p.check_model = p.check_memory = p.check_firmware = p.check_links = false; });
    c.rejections = {{"GPU-a", "kfd-1", "vendor"}};
    s.push_back(c);
  }
  {
    auto c = named("hive of two lands inside one hive, not across");
    c.source = mi250x_node("s", 11, 22);
    c.used = {"s0", "s1"};
    // target: GPUs 0-3 are in hive A except that t1..t3 are busy (scheduler gave 0 and 4..7)
    c.target = mi250x_node("t", 33, 44);
    c.allowed = std::vector<std::string>{"t0", "t4", "t5", "t6", "t7"};
    c.mapping = "s0->t4,s1->t5";
    s.push_back(c);
  }
  {
    auto c = named("hive split across the assigned GPUs: links named for every candidate");
    c.source = mi250x_node("s", 11, 22);
    c.used = {"s0", "s1"};
    c.target = mi250x_node("t", 33, 44);
    c.allowed = std::vector<std::string>{"t0", "t4"};
    c.rejections = {{"s0", "t0", "links"}, {"s0", "t4", "links"}, {"s1", "t0", "links"},
                    {"s0", "t1", "not-allowed"}};
    s.push_back(c);
    c.name = "link check relaxed: split hive accepted and reported";
    c.policy = relax([](MatchPolicy& p) { p.check_links = false; });
    c.rejections.clear();
    c.mapping = "s0->t0,s1->t4";
    c.relaxations = 2;  // the hive and the xgmi link
    s.push_back(c);
  }
  {
    auto c = named("NUMA preferred: GPUs of NUMA node 1 go to NUMA node 1 when possible");
    c.source = mi250x_node("s", 0, 0);
    for (auto& g : c.source) g.links.clear();
    c.used = {"s5"};
    c.target = c.source;
    for (auto& g : c.target) g.id = "t" + g.id.substr(1);
    c.mapping = "s5->t4";   // the first GPU on NUMA node 1
    s.push_back(c);
    c.name = "same NUMA node and same id: the identity wins";
    c.target = c.source;
    c.mapping = "s5->s5";
    s.push_back(c);
    for (auto& g : c.target) g.id = "t" + g.id.substr(1);
    c.name = "NUMA preference off: first GPU in inventory order";
    c.policy = relax([](MatchPolicy& p) { p.check_numa = false; });
    c.mapping = "s5->t0";
    s.push_back(c);
  }
  {
    auto c = named("unidirectional never replaces bidirectional");
    std::vector<GpuDevice> src = {amd_gpu("a", 0x740c, 64), amd_gpu("b", 0x740c, 64)};
    link(src, 0, 1, "xgmi", true);
    std::vector<GpuDevice> dst = {amd_gpu("x", 0x740c, 64), amd_gpu("y", 0x740c, 64)};
    link(dst, 0, 1, "xgmi", false);
    c.source = src;
    c.used = {"a", "b"};
    c.target = dst;
    c.rejections = {{"a", "x", "links"}, {"a", "y", "links"}, {"b", "x", "links"}, {"b", "y", "links"}};
    s.push_back(c);
    c.name = "bidirectional may replace unidirectional";
    c.source = dst;
    c.target = src;
    c.used = {"x", "y"};
    c.rejections.clear();
    c.mapping = "x->a,y->b";
    s.push_back(c);
  }
  {
    auto c = named("NVLink pairs need NVLink with at least as many links; backtracking past the greedy choice");
    // source: 0-1 linked by NV4. target: t0 has no NVLink; t1-t2 NV4. Greedy in order would pick t0 first.
    std::vector<GpuDevice> src = {nvidia_gpu("GPU-0", "NVIDIA H100 80GB HBM3", 80),
                                  nvidia_gpu("GPU-1", "NVIDIA H100 80GB HBM3", 80)};
    link(src, 0, 1, "nvlink", true, 4);
    std::vector<GpuDevice> dst = {nvidia_gpu("GPU-t0", "NVIDIA H100 80GB HBM3", 80),
                                  nvidia_gpu("GPU-t1", "NVIDIA H100 80GB HBM3", 80),
                                  nvidia_gpu("GPU-t2", "NVIDIA H100 80GB HBM3", 80),
                                  nvidia_gpu("GPU-t3", "NVIDIA H100 80GB HBM3", 80)};
    link(dst, 0, 3, "nvlink", true, 2);
    link(dst, 1, 2, "nvlink", true, 4);
    c.source = src;
    c.used = {"GPU-0", "GPU-1"};
    c.target = dst;
    c.mapping = "GPU-0->GPU-t1,GPU-1->GPU-t2";
    s.push_back(c);
  }
  {
    auto c = named("more GPUs used than the node has: every candidate 'taken'");
    c.source = {amd_gpu("a", 0x740c, 64), amd_gpu("b", 0x740c, 64), amd_gpu("c", 0x740c, 64)};
    c.used = {"a", "b", "c"};
    c.target = {amd_gpu("x", 0x740c, 64), amd_gpu("y", 0x740c, 64)};
    c.rejections = {{"a", "x", "taken"}, {"c", "y", "taken"}};
    s.push_back(c);
  }
  {
    auto c = named("one used GPU fits nowhere: the others' candidates say why the match is incomplete");
    c.source = {amd_gpu("a", 0x740c, 64), amd_gpu("big", 0x740c, 128)};
    c.used = {"a", "big"};
    c.target = {amd_gpu("x", 0x740c, 64), amd_gpu("y", 0x740c, 64)};
    c.rejections = {{"big", "x", "memory"}, {"big", "y", "memory"}, {"a", "x", "incomplete"}, {"a", "y", "incomplete"}};
    s.push_back(c);
  }
  {
    auto c = named("a workload that used no GPU needs none");
    c.source = {amd_gpu("a", 0x740c, 64)};
    c.target = {};
    c.mapping = "";
    s.push_back(c);
  }
  {
    auto c = named("scheduler names GPUs by UUID and by PCI address");
    c.source = {nvidia_gpu("GPU-a", "NVIDIA H200", 141)};
    c.used = {"GPU-a"};
    auto t0 = nvidia_gpu("GPU-t0", "NVIDIA H200", 141);
    auto t1 = nvidia_gpu("GPU-t1", "NVIDIA H200", 141);
    t1.pci_address = "0000:00:07.0";
    c.target = {t0, t1};
    c.allowed = std::vector<std::string>{"0000:00:07.0"};
    c.mapping = "GPU-a->GPU-t1";
    s.push_back(c);
  }
  return s;
}

}  // namespace

TEST_CASE("matching scenarios", "[unit]") {
  for (const auto& sc : scenarios()) {
    INFO(sc.name);
    const auto source = record_of(sc.source, sc.used);
    NodeInventory target;
    target.gpus = sc.target;
    MatchRequest request{&source, &target, sc.allowed, sc.policy};
    const auto result = match_gpus(request);
    if (sc.rejections.empty()) {
      REQUIRE(std::holds_alternative<MatchPlan>(result));
      const auto& plan = std::get<MatchPlan>(result);
      CHECK(render(plan) == sc.mapping);
      CHECK(plan.relaxations.size() == sc.relaxations);
      CHECK(render(std::get<MatchPlan>(match_gpus(request))) == render(plan));   // deterministic
    } else {
      REQUIRE(std::holds_alternative<MatchFailure>(result));
      const auto& failure = std::get<MatchFailure>(result);
      for (const auto& [src, cand, prop] : sc.rejections) {
        INFO(src + " / " + cand + " / " + prop);
        CHECK(std::any_of(failure.rejections.begin(), failure.rejections.end(), [&](const Rejection& r) {
          return r.source_id == src && r.candidate_id == cand && r.property == prop && !r.detail.empty();
        }));
      }
      // every source GPU has an explanation for every target GPU
      for (const auto& src : sc.used)
        for (const auto& cand : sc.target) {
          INFO("explained: " + src + " / " + cand.id);
          CHECK(std::any_of(failure.rejections.begin(), failure.rejections.end(),
                            [&](const Rejection& r) { return r.source_id == src && r.candidate_id == cand.id; }));
        }
    }
  }
}

TEST_CASE("an 8-GPU hive restores onto a node whose hive is renumbered", "[unit]") {
  std::vector<GpuDevice> src, dst;
  std::vector<std::string> used;
  for (int i = 0; i < 8; ++i) {
    src.push_back(amd_gpu("kfd-" + std::to_string(1000 + i), 0x74a1, 192, i / 4, 0x1111));
    dst.push_back(amd_gpu("kfd-" + std::to_string(9000 - i), 0x74a1, 192, i / 4, 0x2222));
    used.push_back(src.back().id);
  }
  link_all(src, {0, 1, 2, 3, 4, 5, 6, 7}, "xgmi");
  link_all(dst, {0, 1, 2, 3, 4, 5, 6, 7}, "xgmi");
  const auto source = record_of(src, used);
  NodeInventory target;
  target.gpus = dst;
  const auto result = match_gpus({&source, &target, std::nullopt, MatchPolicy{}});
  REQUIRE(std::holds_alternative<MatchPlan>(result));
  const auto& plan = std::get<MatchPlan>(result);
  REQUIRE(plan.assignments.size() == 8);
  for (std::size_t i = 0; i < 8; ++i) CHECK(plan.assignments[i].target_id == dst[i].id);
}

TEST_CASE("an 8-GPU hive cannot be split over two 4-GPU hives: every candidate is named for its links", "[unit]") {
  std::vector<GpuDevice> src, dst;
  std::vector<std::string> used;
  for (int i = 0; i < 8; ++i) {
    src.push_back(amd_gpu("s" + std::to_string(i), 0x74a1, 192, i / 4, 0x1111));
    dst.push_back(amd_gpu("t" + std::to_string(i), 0x74a1, 192, i / 4, i < 4 ? 0x2222 : 0x3333));
    used.push_back(src.back().id);
  }
  link_all(src, {0, 1, 2, 3, 4, 5, 6, 7}, "xgmi");
  link_all(dst, {0, 1, 2, 3}, "xgmi");
  link_all(dst, {4, 5, 6, 7}, "xgmi");
  const auto source = record_of(src, used);
  NodeInventory target;
  target.gpus = dst;
  const auto result = match_gpus({&source, &target, std::nullopt, MatchPolicy{}});
  REQUIRE(std::holds_alternative<MatchFailure>(result));
  const auto& failure = std::get<MatchFailure>(result);
  for (const auto& s : used)
    for (const auto& t : dst) {
      INFO(s + " / " + t.id);
      CHECK(std::any_of(failure.rejections.begin(), failure.rejections.end(), [&](const Rejection& r) {
        return r.source_id == s && r.candidate_id == t.id && r.property == "links";
      }));
    }
}

TEST_CASE("relaxations come from the environment and are logged", "[unit]") {
  std::vector<std::string> lines;
  log::set_sink([&](log::Level, std::string_view line) { lines.emplace_back(line); });
  ::setenv("GPUCKPT_MEMORY_CHECK", "0", 1);
  ::setenv("GPUCKPT_LINK_CHECK", "bogus", 1);
  const auto policy = MatchPolicy::from_env();
  ::unsetenv("GPUCKPT_MEMORY_CHECK");
  ::unsetenv("GPUCKPT_LINK_CHECK");
  CHECK_FALSE(policy.check_memory);
  CHECK(policy.check_links);
  CHECK(policy.check_model);
  CHECK(std::count(lines.begin(), lines.end(), "param: GPUCKPT_MEMORY_CHECK:0") == 1);
  CHECK(std::any_of(lines.begin(), lines.end(),
                    [](const std::string& l) { return l.find("GPUCKPT_LINK_CHECK=bogus") != std::string::npos; }));

  MatchPolicy config;
  config.check_numa = false;
  config.check_links = false;
  ::setenv("GPUCKPT_LINK_CHECK", "1", 1);
  const auto layered = MatchPolicy::from_env(config);   // env over a config file
  ::unsetenv("GPUCKPT_LINK_CHECK");
  CHECK_FALSE(layered.check_numa);
  CHECK(layered.check_links);

  const auto source = record_of({nvidia_gpu("GPU-a", "NVIDIA H200", 141)}, {"GPU-a"});
  NodeInventory target;
  target.gpus = {nvidia_gpu("GPU-b", "NVIDIA H200", 80)};
  lines.clear();
  const auto result = match_gpus({&source, &target, std::nullopt, policy});
  log::set_sink(nullptr);
  REQUIRE(std::holds_alternative<MatchPlan>(result));
  REQUIRE(std::get<MatchPlan>(result).relaxations.size() == 1);
  CHECK(std::get<MatchPlan>(result).relaxations[0].find("GPUCKPT_MEMORY_CHECK=0") != std::string::npos);
  CHECK(std::any_of(lines.begin(), lines.end(),
                    [](const std::string& l) { return l.find("relaxed check used: memory") != std::string::npos; }));
}

TEST_CASE("version comparison orders driver and VBIOS strings", "[unit]") {
  CHECK(compare_versions("580.159.04", "580.95.05") > 0);
  CHECK(compare_versions("96.00.a5.00.1a", "96.00.a5.00.1a") == 0);
  CHECK(compare_versions("96.00.a5.00.1a", "96.00.b0.00.01") < 0);
  CHECK(compare_versions("550.54", "550.54.15") < 0);
}
