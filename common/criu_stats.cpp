#include "common/criu_stats.h"

#include <algorithm>
#include <cstddef>

#include "common/byte_io.h"
#include "criu_stats.pb.h"

namespace gpuckpt {
namespace {

// CRIU's magics for a service image and for the stats image (its criu/include/magic.h names them).
constexpr std::uint32_t kServiceImageMagic = 0x55105940;
constexpr std::uint32_t kStatsMagic = 0x57093306;
constexpr std::size_t kHeaderBytes = 12;   // two magics, the entry's size

double seconds(std::uint32_t microseconds) { return static_cast<double>(microseconds) / 1e6; }

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

std::map<std::string, double> checkpoint_runtime_phases(const CriuDumpStats& stats, double runtime_seconds) {
  double left = std::max(runtime_seconds, 0.0);
  auto take = [&left](double want) {
    const double got = std::clamp(want, 0.0, left);
    left -= got;
    return got;
  };
  const double cpu_pages = stats.memdump_seconds + stats.memwrite_seconds;
  std::map<std::string, double> phases;
  phases["criu-freezing"] = take(stats.freezing_seconds);
  phases["criu-cpu-pages"] = take(cpu_pages);
  phases["criu-frozen-other"] = take(stats.frozen_seconds - cpu_pages);
  phases["runtime-other"] = left;
  return phases;
}

}  // namespace gpuckpt
