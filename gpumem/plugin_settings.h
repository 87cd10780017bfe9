// The CRIU plugin's settings (GPU memory: GPUCKPT_CUDA_MEMORY_IMAGE, GPUCKPT_IMAGE_THREADS,
// GPUCKPT_IMAGE_COMPRESSION, GPUCKPT_IMAGE_SPARSE, GPUCKPT_GPU_STORE): from the process environment, else from the
// node's settings file gpuckpt_plugin.env beside the plugin. When containerd or CRI-O start runc -> CRIU, the
// environment is the runtime's, not the agent's: only the file reaches the plugin there. The chart's installer
// writes it from the agent's gpu_memory values next to gpuckpt_plugin.so (CRIU loads only *.so from that directory).
//
// The file: NAME=VALUE lines, '#' comments, blank lines; only the names above, each at most once, values of at
// most 64 printable characters; at most 16 KiB and 256 lines; a regular file (not followed through a symlink).
// A file that breaks any rule is logged and ignored as a whole: the defaults apply, and a typo never stops a dump.
// Values are checked by their readers (gpu_image::settings_from_env, cuda::switch_from_env), as from
// the environment.
#pragma once

#include <filesystem>
#include <map>
#include <string>
#include <string_view>

#include "base/result.h"

namespace gpuckpt {

inline constexpr const char* kPluginSettingsFile = "gpuckpt_plugin.env";
inline constexpr std::size_t kMaxPluginSettingsBytes = 16 << 10;

// The names the file may set.
bool is_plugin_setting(std::string_view name);

// NAME -> VALUE; an error names `source` and the line.
Result<std::map<std::string, std::string>> parse_plugin_settings(std::string_view text, std::string_view source);
// The file at `path`: empty when there is none; an error when it cannot be read or breaks the rules.
Result<std::map<std::string, std::string>> read_plugin_settings(const std::filesystem::path& path);

class PluginSettings {
 public:
  PluginSettings() = default;
  explicit PluginSettings(std::map<std::string, std::string> file) : file_(std::move(file)) {}
  // The file at `path`; one that cannot be used is logged (error, with why) and contributes nothing.
  static PluginSettings load(const std::filesystem::path& path);
  // NAME from the environment when set and not empty, else from the file, else "".
  std::string get(std::string_view name) const;

 private:
  std::map<std::string, std::string> file_;
};

// The directory of the loaded object (executable or shared library) that holds `address`, from `maps`
// (/proc/self/maps); empty when no mapping with a path holds it.
std::filesystem::path object_dir_of(const void* address, const std::filesystem::path& maps = "/proc/self/maps");

// This process's settings: the file beside the object this code is linked into (in CRIU: the plugin's directory,
// CRIU's --libdir), or the file GPUCKPT_PLUGIN_SETTINGS names; read and logged once.
const PluginSettings& plugin_settings();

}  // namespace gpuckpt
