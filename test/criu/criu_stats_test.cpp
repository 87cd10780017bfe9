#include <catch2/catch_approx.hpp>
#include <catch2/catch_test_macros.hpp>

#include <cerrno>
#include <map>
#include <numeric>
#include <string>

#include "criu/criu_stats.h"
#include "test/support/archive_builder.h"

using Catch::Approx;
using gpuckpt::checkpoint_runtime_phases;
using gpuckpt::CriuDumpStats;
using gpuckpt::parse_criu_dump_stats;

namespace {

// Every part at least 0, all of them together at most `total` (+ `slack` for the sums' rounding).
void check_parts_fit(const std::map<std::string, double>& parts, double total, double slack) {
  double sum = 0;
  for (const auto& [name, seconds] : parts) {
    INFO(name);
    CHECK(seconds >= 0);
    sum += seconds;
  }
  CHECK(sum <= total + slack);
}

}  // namespace

TEST_CASE("CRIU's stats-dump image: the times and page counts a real dump wrote", "[unit]") {
  auto stats = parse_criu_dump_stats(gpuckpt::test::criu_dump_stats_image(), "stats-dump");
  REQUIRE(stats);
  CHECK(stats->freezing_seconds == Approx(0.123527));
  CHECK(stats->frozen_seconds == Approx(0.539814));
  CHECK(stats->memdump_seconds == Approx(0.000557));
  CHECK(stats->memwrite_seconds == Approx(0.000119));
  CHECK(stats->pages_scanned == 48);
  CHECK(stats->pages_written == 33);
}

TEST_CASE("CRIU's stats-dump image: anything else is refused, naming the source", "[unit]") {
  const std::string good = gpuckpt::test::criu_dump_stats_image();
  std::string wrong_magic = good;
  wrong_magic[4] = 0x07;
  std::string wrong_size = good;
  wrong_size[8] = 0x22;
  // A restore's statistics only (field 2), framed like a dump's.
  const std::string restore_only = good.substr(0, 8) + std::string("\x04\x00\x00\x00", 4) + std::string("\x12\x02\x08\x01", 4);
  for (const std::string& bad : {std::string(), good.substr(0, 11), good.substr(0, good.size() - 1), wrong_magic,
                                 wrong_size, restore_only, good + std::string(5000, '\0')}) {
    auto refused = parse_criu_dump_stats(bad, "the archive's stats-dump");
    REQUIRE_FALSE(refused);
    CHECK(refused.error().errno_value == EBADMSG);
    CHECK(refused.error().message.find("the archive's stats-dump") == 0);
  }
}

TEST_CASE("the runtime's checkpoint call in parts that do not overlap and fit in it", "[unit]") {
  struct Case {
    const char* what;
    CriuDumpStats stats;
    double runtime;
    double freezing, cpu_pages, frozen_other, runtime_other;
  };
  const Case cases[] = {
      // The issue's second checkpoint on the GPU machine: runtime 4.91 s, frozen 4.77 s, pages 0.72 + 0.49 s.
      {"as measured", {0.05, 4.77, 0.72, 0.49, 0, 0}, 4.91, 0.05, 1.21, 3.56, 0.09},
      {"CRIU's clock ahead of the caller's", {0.5, 3.0, 1.0, 0.5, 0, 0}, 2.0, 0.5, 1.5, 0.0, 0.0},
      {"pages written after the thaw", {0.1, 0.2, 0.15, 0.3, 0, 0}, 1.0, 0.1, 0.45, 0.0, 0.45},
      {"no time at all", {}, 0.0, 0, 0, 0, 0},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    const auto phases = checkpoint_runtime_phases(c.stats, c.runtime);
    REQUIRE(phases.size() == 4);
    CHECK(phases.at("criu-freezing") == Approx(c.freezing));
    CHECK(phases.at("criu-cpu-pages") == Approx(c.cpu_pages));
    CHECK(phases.at("criu-frozen-other") == Approx(c.frozen_other).margin(1e-9));
    CHECK(phases.at("runtime-other") == Approx(c.runtime_other).margin(1e-9));
    check_parts_fit(phases, c.runtime, 1e-12);
  }
}

TEST_CASE("the plugin's own steps are carved out of the CRIU part that holds them", "[unit]") {
  // As on the GPU machine: freezing 0.30 s holds the GPU lock, frozen 4.77 s holds the driver's checkpoint, the
  // memory images and the CPU pages' move into the store.
  const CriuDumpStats stats{0.30, 4.77, 0.72, 0.49, 0, 0};
  const gpuckpt::PluginDumpTimings plugin{0.25, 2.10, 0.80, 0.40};
  const auto phases = checkpoint_runtime_phases(stats, 5.5, plugin);
  REQUIRE(phases.size() == 8);
  CHECK(phases.at("gpuckpt-gpu-lock") == Approx(0.25));
  CHECK(phases.at("criu-freezing") == Approx(0.05));
  CHECK(phases.at("criu-cpu-pages") == Approx(1.21));
  CHECK(phases.at("gpuckpt-gpu-checkpoint") == Approx(2.10));
  CHECK(phases.at("gpuckpt-gpu-memory-images") == Approx(0.80));
  CHECK(phases.at("gpuckpt-cpu-pages-store") == Approx(0.40));
  CHECK(phases.at("criu-frozen-other") == Approx(4.77 - 1.21 - 3.30));
  CHECK(phases.at("runtime-other") == Approx(5.5 - 0.30 - 4.77));

  // A plugin's clock ahead of CRIU's: its steps get what the CRIU part holds, in order, never more.
  const gpuckpt::PluginDumpTimings greedy{1.0, 3.0, 3.0, 3.0};
  const auto cut = checkpoint_runtime_phases(stats, 5.5, greedy);
  CHECK(cut.at("gpuckpt-gpu-lock") == Approx(0.30));
  CHECK(cut.at("criu-freezing") == Approx(0).margin(1e-9));
  CHECK(cut.at("gpuckpt-gpu-checkpoint") == Approx(3.0));
  CHECK(cut.at("gpuckpt-gpu-memory-images") == Approx(4.77 - 1.21 - 3.0));
  CHECK(cut.at("gpuckpt-cpu-pages-store") == Approx(0).margin(1e-9));
  CHECK(cut.at("criu-frozen-other") == Approx(0).margin(1e-9));
  for (const auto& parts : {phases, cut}) check_parts_fit(parts, 5.5, 1e-9);
}

TEST_CASE("the plugin's dump timings file: written, read back, anything else refused naming the file", "[unit]") {
  const gpuckpt::PluginDumpTimings written{0.25, 2.5, 0.75, 0.125};
  auto back = gpuckpt::parse_plugin_dump_timings(gpuckpt::serialize_plugin_dump_timings(written), "timings");
  REQUIRE(back);
  CHECK(back->gpu_lock_seconds == 0.25);
  CHECK(back->gpu_checkpoint_seconds == 2.5);
  CHECK(back->gpu_memory_seconds == 0.75);
  CHECK(back->cpu_pages_seconds == 0.125);
  // A newer plugin's extra step and a missing one: the known ones, 0 for the missing.
  auto newer = gpuckpt::parse_plugin_dump_timings(R"({"gpu-lock": 1.5, "first-instruction": 3})", "timings");
  REQUIRE(newer);
  CHECK(newer->gpu_lock_seconds == 1.5);
  CHECK(newer->gpu_checkpoint_seconds == 0);
  for (const std::string& bad : {std::string(), std::string("[1]"), std::string("{\"gpu-lock\": -1}"),
                                 std::string("{\"gpu-lock\": \"1\"}"), std::string("{\"gpu-checkpoint\": 1e300}"),
                                 std::string("{\"cpu-pages-store\": 86401}"), std::string("{\"gpu-lock\": 1"),
                                 "{\"x\": \"" + std::string(5000, 'a') + "\"}"}) {
    INFO(bad.substr(0, 40));
    auto refused = gpuckpt::parse_plugin_dump_timings(bad, "the archive's gpuckpt-dump-timings.json");
    REQUIRE_FALSE(refused);
    CHECK(refused.error().errno_value == EBADMSG);
    CHECK(refused.error().message.find("the archive's gpuckpt-dump-timings.json") == 0);
  }
}

TEST_CASE("podman's restore statistics: the container and its nested times; anything else is refused", "[unit]") {
  // What podman 4.3.1 printed here for `podman container restore --import ARCHIVE --name N --print-stats` (runc
  // 1.1.5, CRIU 4.1.1, a busybox shell loop).
  const std::string real = R"({
    "podman_restore_duration": 550032,
    "container_statistics": [
        {
            "Id": "9869169ad06ca1e9d19a13906925c4ee589ffe98cc6708ec227463b35a66f839",
            "RawInput": "",
            "runtime_restore_duration": 177004,
            "criu_statistics": {
                "pages_compared": 9,
                "pages_skipped_cow": 2,
                "forking_time": 228,
                "restore_time": 104568,
                "pages_restored": 31
            }
        }
    ]
}
)";
  auto stats = gpuckpt::parse_podman_restore_stats(real);
  REQUIRE(stats);
  CHECK(stats->container_id == "9869169ad06ca1e9d19a13906925c4ee589ffe98cc6708ec227463b35a66f839");
  CHECK(stats->podman_seconds == Approx(0.550032));
  CHECK(stats->runtime_seconds == Approx(0.177004));
  CHECK(stats->criu_restore_seconds == Approx(0.104568));

  const auto phases = gpuckpt::restore_runtime_phases(*stats, 0.6);
  CHECK(phases.at("criu-restore") == Approx(0.104568));
  CHECK(phases.at("runtime-other") == Approx(0.072436));
  CHECK(phases.at("podman-other") == Approx(0.373028));
  // The caller's clock behind podman's: cut to fit, in order.
  const auto cut = gpuckpt::restore_runtime_phases(*stats, 0.15);
  CHECK(cut.at("criu-restore") == Approx(0.104568));
  CHECK(cut.at("runtime-other") == Approx(0.045432));
  CHECK(cut.at("podman-other") == 0);

  // An old podman's (or a wrapper's) bare id, two containers, a negative or missing time: refused, naming podman.
  for (const std::string& bad :
       {std::string("9869169ad06c\n"), std::string(R"({"container_statistics": []})"),
        std::string(R"({"podman_restore_duration": 1, "container_statistics": [{"Id": "a", "runtime_restore_duration": 1,
                       "criu_statistics": {"restore_time": -5}}]})"),
        std::string(R"({"podman_restore_duration": 1, "container_statistics": [{"Id": "a", "criu_statistics": {}}]})"),
        std::string(R"({"podman_restore_duration": 1, "container_statistics": [{"Id": "a", "runtime_restore_duration": 1,
                       "criu_statistics": {"restore_time": 1}}, {"Id": "b"}]})"),
        real + std::string(1 << 16, ' ')}) {
    auto refused = gpuckpt::parse_podman_restore_stats(bad);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message.find("podman's restore statistics") == 0);
  }
}

TEST_CASE("the plugin's restore steps are carved out of the part of the restore that holds them", "[unit]") {
  // As on the GPU machine, warm: podman 4.99 s, runtime 4.34 s, CRIU's restore 2.74 s; the plugin's init rebuilt
  // the CPU pages (outside CRIU's clock), its fill and the driver's restore ran inside it.
  const gpuckpt::PodmanRestoreStats stats{"id", 4.99, 4.34, 2.74};
  const gpuckpt::PluginRestoreTimings plugin{1.20, 0.70, 1.05};
  const auto phases = gpuckpt::restore_runtime_phases(stats, 5.0, plugin);
  REQUIRE(phases.size() == 6);
  CHECK(phases.at("gpuckpt-cpu-pages") == Approx(1.20));
  CHECK(phases.at("runtime-other") == Approx(4.34 - 2.74 - 1.20));
  CHECK(phases.at("gpuckpt-gpu-memory") == Approx(0.70));
  CHECK(phases.at("gpuckpt-gpu-restore") == Approx(1.05));
  CHECK(phases.at("criu-restore") == Approx(2.74 - 0.70 - 1.05));
  CHECK(phases.at("podman-other") == Approx(4.99 - 4.34));
  // A plugin clock ahead of the runtime's: each step gets at most what its part holds.
  const auto cut = gpuckpt::restore_runtime_phases(stats, 5.0, gpuckpt::PluginRestoreTimings{3.0, 2.0, 2.0});
  CHECK(cut.at("gpuckpt-cpu-pages") == Approx(4.34 - 2.74));
  CHECK(cut.at("runtime-other") == Approx(0).margin(1e-9));
  CHECK(cut.at("gpuckpt-gpu-memory") == Approx(2.0));
  CHECK(cut.at("gpuckpt-gpu-restore") == Approx(0.74));
  CHECK(cut.at("criu-restore") == Approx(0).margin(1e-9));
  for (const auto& parts : {phases, cut}) check_parts_fit(parts, 5.0, 1e-9);
  // Without the plugin's file: the three parts as before.
  CHECK(gpuckpt::restore_runtime_phases(stats, 5.0).size() == 3);

  // A runtime that reports no times of its own (containerd): the plugin's steps out of the call, the rest runtime's.
  const auto bare = gpuckpt::restore_runtime_phases(4.0, plugin);
  REQUIRE(bare.size() == 4);
  CHECK(bare.at("gpuckpt-cpu-pages") == Approx(1.20));
  CHECK(bare.at("gpuckpt-gpu-memory") == Approx(0.70));
  CHECK(bare.at("gpuckpt-gpu-restore") == Approx(1.05));
  CHECK(bare.at("runtime-other") == Approx(4.0 - 2.95));
  const auto short_call = gpuckpt::restore_runtime_phases(1.5, plugin);
  CHECK(short_call.at("gpuckpt-gpu-memory") == Approx(0.30));
  CHECK(short_call.at("gpuckpt-gpu-restore") == Approx(0).margin(1e-9));
  CHECK(short_call.at("runtime-other") == Approx(0).margin(1e-9));
}

TEST_CASE("the plugin's restore timings file: written, read back, anything else refused naming the file", "[unit]") {
  const gpuckpt::PluginRestoreTimings written{1.25, 0.5, 0.75};
  auto back = gpuckpt::parse_plugin_restore_timings(gpuckpt::serialize_plugin_restore_timings(written), "timings");
  REQUIRE(back);
  CHECK(back->cpu_pages_seconds == 1.25);
  CHECK(back->gpu_memory_seconds == 0.5);
  CHECK(back->gpu_restore_seconds == 0.75);
  // The dump's keys mean nothing here.
  auto other = gpuckpt::parse_plugin_restore_timings(R"({"gpu-lock": 2, "gpu-restore": 1})", "timings");
  REQUIRE(other);
  CHECK(other->gpu_restore_seconds == 1);
  CHECK(other->cpu_pages_seconds == 0);
  for (const std::string& bad : {std::string("{\"cpu-pages\": -0.5}"), std::string("{\"gpu-memory\": null}"),
                                 std::string("{\"gpu-restore\": 90000}"), std::string("7")}) {
    INFO(bad);
    auto refused = gpuckpt::parse_plugin_restore_timings(bad, "restore-timings/41.json");
    REQUIRE_FALSE(refused);
    CHECK(refused.error().message.find("restore-timings/41.json") == 0);
  }
}
