#include "criu/criu_stats.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <optional>

#include <nlohmann/json.hpp>

#include "base/byte_io.h"
#include "criu_stats.pb.h"

namespace gpuckpt {
namespace {

// CRIU's magics for a service image and for the stats image (its criu/include/magic.h names them).
constexpr std::uint32_t kServiceImageMagic = 0x55105940;
constexpr std::uint32_t kStatsMagic = 0x57093306;
constexpr std::size_t kHeaderBytes = 12;   // two magics, the entry's size

double seconds(std::uint32_t microseconds) { return static_cast<double>(microseconds) / 1e6; }

// Takes what is asked from what is left, never below 0.
class Budget {
 public:
  explicit Budget(double seconds) : left_(std::max(seconds, 0.0)) {}
  double take(double want) {
    const double got = std::clamp(want, 0.0, left_);
    left_ -= got;
    return got;
  }
  double rest() const { return left_; }

 private:
  double left_;
};

}  // namespace

Result<CriuDumpStats> parse_criu_dump_stats(std::string_view image, std::string_view source) {
  const std::string where(source);
  if (image.size() < kHeaderBytes || image.size() > kMaxCriuStatsBytes)
    return make_error(where + ": " + std::to_string(image.size()) + " bytes is not a CRIU statistics image (" +
                      std::to_string(kHeaderBytes) + " to " + std::to_string(kMaxCriuStatsBytes) + ")", EBADMSG);
  const auto* bytes = reinterpret_cast<const std::byte*>(image.data());
  if (byte_io::get_le<std::uint32_t>(bytes, 0) != kServiceImageMagic || byte_io::get_le<std::uint32_t>(bytes, 4) != kStatsMagic)
    return make_error(where + " does not start with CRIU's statistics image magic", EBADMSG);
  const std::uint32_t size = byte_io::get_le<std::uint32_t>(bytes, 8);
  if (size != image.size() - kHeaderBytes)
    return make_error(where + ": its entry says " + std::to_string(size) + " bytes, the image holds " +
                      std::to_string(image.size() - kHeaderBytes), EBADMSG);
  pb::CriuStats stats;
  if (!stats.ParseFromArray(image.data() + kHeaderBytes, static_cast<int>(size)))
    return make_error(where + ": its entry is not a CRIU statistics entry", EBADMSG);
  if (!stats.has_dump()) return make_error(where + " holds no dump statistics (a restore's image?)", EBADMSG);
  const auto& d = stats.dump();
  CriuDumpStats out;
  out.freezing_seconds = seconds(d.freezing_time());
  out.frozen_seconds = seconds(d.frozen_time());
  out.memdump_seconds = seconds(d.memdump_time());
  out.memwrite_seconds = seconds(d.memwrite_time());
  out.pages_scanned = d.pages_scanned();
  out.pages_written = d.pages_written();
  return out;
}

namespace {

template <class Timings>
struct PluginTimingKey {
  const char* name;
  double Timings::*field;
};
constexpr PluginTimingKey<PluginDumpTimings> kPluginDumpTimingKeys[] = {
    {"gpu-lock", &PluginDumpTimings::gpu_lock_seconds},
    {"gpu-checkpoint", &PluginDumpTimings::gpu_checkpoint_seconds},
    {"gpu-memory-images", &PluginDumpTimings::gpu_memory_seconds},
    {"cpu-pages-store", &PluginDumpTimings::cpu_pages_seconds},
};
constexpr PluginTimingKey<PluginRestoreTimings> kPluginRestoreTimingKeys[] = {
    {"cpu-pages", &PluginRestoreTimings::cpu_pages_seconds},
    {"gpu-memory", &PluginRestoreTimings::gpu_memory_seconds},
    {"gpu-restore", &PluginRestoreTimings::gpu_restore_seconds},
};
constexpr double kMaxStepSeconds = 86400;

template <class Timings, std::size_t N>
std::string serialize_timings(const Timings& timings, const PluginTimingKey<Timings> (&keys)[N]) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& key : keys) j[key.name] = timings.*key.field;
  return j.dump() + "\n";
}

template <class Timings, std::size_t N>
Result<Timings> parse_timings(std::string_view text, std::string_view source, const PluginTimingKey<Timings> (&keys)[N]) {
  const auto refused = [&](const std::string& why) {
    return make_error(std::string(source) + ": " + why, EBADMSG);
  };
  if (text.size() > kMaxPluginDumpTimingsBytes)
    return refused(std::to_string(text.size()) + " bytes is more than a plugin's timings (" +
                   std::to_string(kMaxPluginDumpTimingsBytes) + ")");
  const auto doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return refused("not a JSON object");
  Timings out;
  for (const auto& key : keys) {
    const nlohmann::json::const_iterator it = doc.find(std::string_view(key.name));
    if (it == doc.end()) continue;
    if (!it->is_number() || !std::isfinite(it->get<double>()) || it->get<double>() < 0 ||
        it->get<double>() > kMaxStepSeconds)
      return refused(std::string(key.name) + " is not a number of seconds from 0 to " +
                     std::to_string(static_cast<int>(kMaxStepSeconds)));
    out.*key.field = it->get<double>();
  }
  return out;
}

}  // namespace

std::string serialize_plugin_dump_timings(const PluginDumpTimings& timings) {
  return serialize_timings(timings, kPluginDumpTimingKeys);
}

Result<PluginDumpTimings> parse_plugin_dump_timings(std::string_view text, std::string_view source) {
  return parse_timings(text, source, kPluginDumpTimingKeys);
}

std::string serialize_plugin_restore_timings(const PluginRestoreTimings& timings) {
  return serialize_timings(timings, kPluginRestoreTimingKeys);
}

Result<PluginRestoreTimings> parse_plugin_restore_timings(std::string_view text, std::string_view source) {
  return parse_timings(text, source, kPluginRestoreTimingKeys);
}

std::map<std::string, double> restore_steps(const PluginRestoreTimings& timings) {
  std::map<std::string, double> steps;
  for (const auto& key : kPluginRestoreTimingKeys) steps[key.name] = timings.*key.field;
  return steps;
}

std::map<std::string, double> checkpoint_runtime_phases(const CriuDumpStats& stats, double runtime_seconds,
                                                        const std::optional<PluginDumpTimings>& plugin) {
  Budget budget(runtime_seconds);
  const double cpu_pages = stats.memdump_seconds + stats.memwrite_seconds;
  std::map<std::string, double> phases;
  // Each CRIU part is first cut to what the call's own clock leaves, then shared with the plugin's steps inside it.
  Budget freezing(budget.take(stats.freezing_seconds));
  phases["criu-cpu-pages"] = budget.take(cpu_pages);
  Budget frozen_other(budget.take(stats.frozen_seconds - cpu_pages));
  if (plugin) {
    phases["gpuckpt-gpu-lock"] = freezing.take(plugin->gpu_lock_seconds);
    phases["gpuckpt-gpu-checkpoint"] = frozen_other.take(plugin->gpu_checkpoint_seconds);
    phases["gpuckpt-gpu-memory-images"] = frozen_other.take(plugin->gpu_memory_seconds);
    phases["gpuckpt-cpu-pages-store"] = frozen_other.take(plugin->cpu_pages_seconds);
  }
  phases["criu-freezing"] = freezing.rest();
  phases["criu-frozen-other"] = frozen_other.rest();
  phases["runtime-other"] = budget.rest();
  return phases;
}

Result<PodmanRestoreStats> parse_podman_restore_stats(std::string_view text, std::size_t max_bytes) {
  const auto refused = [](const std::string& why) {
    return make_error("podman's restore statistics (--print-stats): " + why, EBADMSG);
  };
  if (text.size() > max_bytes) return refused("more than " + std::to_string(max_bytes) + " bytes");
  const auto doc = nlohmann::json::parse(text, nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) return refused("not a JSON object");
  const auto microseconds = [](const nlohmann::json& object, const char* key) -> std::optional<double> {
    const auto it = object.find(key);
    if (it == object.end() || !it->is_number() || it->get<double>() < 0) return std::nullopt;
    return it->get<double>() / 1e6;
  };
  const auto containers = doc.find("container_statistics");
  if (containers == doc.end() || !containers->is_array() || containers->size() != 1 || !(*containers)[0].is_object())
    return refused("container_statistics does not hold exactly one container");
  const auto& c = (*containers)[0];
  const auto id = c.find("Id");
  if (id == c.end() || !id->is_string() || id->get<std::string>().empty()) return refused("the container has no Id");
  const auto criu = c.find("criu_statistics");
  const auto podman = microseconds(doc, "podman_restore_duration");
  const auto runtime = microseconds(c, "runtime_restore_duration");
  const auto restore = criu != c.end() && criu->is_object() ? microseconds(*criu, "restore_time") : std::nullopt;
  if (!podman || !runtime || !restore)
    return refused("podman_restore_duration, runtime_restore_duration or criu_statistics.restore_time is missing "
                   "or not a number of microseconds");
  return PodmanRestoreStats{id->get<std::string>(), *podman, *runtime, *restore};
}

std::map<std::string, double> restore_runtime_phases(const PodmanRestoreStats& stats, double call_seconds,
                                                     const std::optional<PluginRestoreTimings>& plugin) {
  Budget budget(call_seconds);
  std::map<std::string, double> phases;
  Budget criu(budget.take(stats.criu_restore_seconds));
  Budget runtime_other(budget.take(stats.runtime_seconds - stats.criu_restore_seconds));
  phases["podman-other"] = budget.take(stats.podman_seconds - stats.runtime_seconds);
  if (plugin) {
    phases["gpuckpt-cpu-pages"] = runtime_other.take(plugin->cpu_pages_seconds);
    phases["gpuckpt-gpu-memory"] = criu.take(plugin->gpu_memory_seconds);
    phases["gpuckpt-gpu-restore"] = criu.take(plugin->gpu_restore_seconds);
  }
  phases["criu-restore"] = criu.rest();
  phases["runtime-other"] = runtime_other.rest();
  return phases;
}

std::map<std::string, double> restore_runtime_phases(double call_seconds, const PluginRestoreTimings& plugin) {
  Budget call(call_seconds);
  std::map<std::string, double> phases;
  for (const auto& key : kPluginRestoreTimingKeys) phases[std::string("gpuckpt-") + key.name] = call.take(plugin.*key.field);
  phases["runtime-other"] = call.rest();
  return phases;
}

}  // namespace gpuckpt
