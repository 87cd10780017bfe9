#include "criu-plugin/amd/render_file_audit.h"

#include <amdgpu_drm.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace gpuckpt::amd {
namespace {

constexpr std::size_t kObjectsNamed = 4;

std::string domain_text(std::uint64_t domains) {
  std::string text;
  const auto add = [&](std::uint64_t bit, const char* name) {
    if (domains & bit) text += (text.empty() ? "" : "|") + std::string(name);
  };
  add(AMDGPU_GEM_DOMAIN_VRAM, "VRAM");
  add(AMDGPU_GEM_DOMAIN_GTT, "GTT");
  add(AMDGPU_GEM_DOMAIN_CPU, "CPU");
  add(AMDGPU_GEM_DOMAIN_GDS | AMDGPU_GEM_DOMAIN_GWS | AMDGPU_GEM_DOMAIN_OA, "GDS/GWS/OA");
  return text.empty() ? "no domain" : text;
}

// "123 KiB" -> bytes; the unit is one of drm-usage-stats.rst's (none = bytes, KiB, MiB; GiB for good measure).
bool parse_size(const std::string& value, std::uint64_t* bytes) {
  char* end = nullptr;
  const unsigned long long number = std::strtoull(value.c_str(), &end, 10);
  if (end == value.c_str()) return false;
  std::string unit(end);
  unit.erase(0, unit.find_first_not_of(" \t"));
  unit.erase(unit.find_last_not_of(" \t\r") + 1);
  std::uint64_t scale = 1;
  if (unit == "KiB") {
    scale = 1ull << 10;
  } else if (unit == "MiB") {
    scale = 1ull << 20;
  } else if (unit == "GiB") {
    scale = 1ull << 30;
  } else if (!unit.empty()) {
    return false;
  }
  *bytes = number * scale;
  return true;
}

}  // namespace

Result<GemProbe> probe_gem_handles(AmdDevice& device, int render_fd, std::uint32_t bound) {
  GemProbe probe;
  for (std::uint32_t handle = 1; handle <= bound; ++handle) {
    drm_amdgpu_gem_create_in info{};
    drm_amdgpu_gem_op op{};
    op.handle = handle;
    op.op = AMDGPU_GEM_OP_GET_GEM_CREATE_INFO;
    op.value = reinterpret_cast<std::uintptr_t>(&info);
    const int err = device.ioctl(render_fd, DRM_IOCTL_AMDGPU_GEM_OP, &op);
    if (err == -ENOENT) continue;
    if (err < 0) {
      return make_error("DRM_IOCTL_AMDGPU_GEM_OP (GET_GEM_CREATE_INFO) on GEM handle " + std::to_string(handle) +
                            " failed: " + std::strerror(-err),
                        -err);
    }
    ++probe.count;
    if (probe.first.size() < kObjectsNamed) probe.first.push_back(GemObjectInfo{handle, info.bo_size, info.domains});
  }
  return probe;
}

std::string describe_gem_objects(const GemProbe& probe) {
  std::string text;
  for (const auto& object : probe.first) {
    text += (text.empty() ? "" : "; ") + std::string("handle ") + std::to_string(object.handle) + ": " +
            std::to_string(object.size) + " bytes, " + domain_text(object.domains);
  }
  if (probe.count > probe.first.size()) text += "; ...";
  return text;
}

DrmFileMemory parse_drm_fdinfo(const std::string& text) {
  DrmFileMemory legacy;
  DrmFileMemory total;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string key = line.substr(0, colon);
    std::string value = line.substr(colon + 1);
    value.erase(0, value.find_first_not_of(" \t"));
    if (key == "drm-client-id") {
      legacy.client_id = value;
      continue;
    }
    for (const char* region : {"vram", "gtt", "cpu"}) {
      std::uint64_t bytes = 0;
      if (key == std::string("drm-memory-") + region && parse_size(value, &bytes)) {
        legacy.has_memory = true;
        legacy.bytes += bytes;
      } else if (key == std::string("drm-total-") + region && parse_size(value, &bytes)) {
        total.has_memory = true;
        total.bytes += bytes;
      }
    }
  }
  if (total.has_memory) {   // counts BOs whether or not their backing store is instantiated
    legacy.has_memory = true;
    legacy.bytes = total.bytes;
  }
  return legacy;
}

}  // namespace gpuckpt::amd
