// The CRIU plugin's node settings file (gpumem/plugin_settings.h): the rules a file must keep, the environment over
// the file, and bad files ignored (logged) so that the defaults apply.
#include <catch2/catch_test_macros.hpp>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "gpumem/gpu_image.h"
#include "base/log.h"
#include "gpumem/plugin_settings.h"

namespace fs = std::filesystem;
using namespace gpuckpt;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "gpuckpt-settings-XXXXXX").string();
    path = ::mkdtemp(tmpl.data());
  }
  ~TempDir() { fs::remove_all(path); }
};

void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

// Unsets the settings' variables for the test and restores nothing: every test here sets what it needs.
void clear_env() {
  for (const char* name : {"GPUCKPT_CUDA_MEMORY_IMAGE", "GPUCKPT_IMAGE_THREADS", "GPUCKPT_IMAGE_COMPRESSION",
                           "GPUCKPT_IMAGE_SPARSE"})
    ::unsetenv(name);
}

}  // namespace

TEST_CASE("plugin settings file: the lines it takes", "[unit]") {
  auto ok = parse_plugin_settings("# gpuckpt: managed file\n\n  GPUCKPT_IMAGE_THREADS = 8 \r\nGPUCKPT_IMAGE_COMPRESSION=zstd:3\n"
                                  "GPUCKPT_IMAGE_SPARSE=0", "f");
  REQUIRE(ok.ok());
  CHECK(ok.value() == std::map<std::string, std::string>{
                          {"GPUCKPT_IMAGE_THREADS", "8"}, {"GPUCKPT_IMAGE_COMPRESSION", "zstd:3"}, {"GPUCKPT_IMAGE_SPARSE", "0"}});
  CHECK(parse_plugin_settings("", "f")->empty());
}

TEST_CASE("plugin settings file: every broken rule is an error naming the file and line", "[unit]") {
  struct Case {
    std::string text;
    const char* says;
  };
  for (const auto& c : std::vector<Case>{
           {"GPUCKPT_IMAGE_THREAD=8\n", "f: line 1: unknown setting 'GPUCKPT_IMAGE_THREAD'"},
           {"# ok\nGPUCKPT_IMAGE_THREADS\n", "f: line 2: not NAME=VALUE"},
           {"GPUCKPT_IMAGE_THREADS=\n", "needs one value"},
           {"GPUCKPT_IMAGE_COMPRESSION=zstd 3\n", "without spaces"},
           {"GPUCKPT_IMAGE_THREADS=" + std::string(65, '1') + "\n", "needs one value of 1 to 64"},
           {"GPUCKPT_IMAGE_SPARSE=1\nGPUCKPT_IMAGE_SPARSE=0\n", "line 2: GPUCKPT_IMAGE_SPARSE is set twice"},
           {"GPUCKPT_IMAGE_SPARSE=1\x1b[2J\n", "control or non-ASCII"},
           {"GPUCKPT_IMAGE_SPARSE=\xc3\xa9\n", "control or non-ASCII"},
           {"PATH=/tmp\n", "unknown setting 'PATH'"},
           {"LD_PRELOAD=/tmp/x.so\n", "unknown setting 'LD_PRELOAD'"},
           {std::string(300, '\n'), "more than 256 lines"},
           {std::string(20000, '#'), "larger than 16384 bytes"},
       }) {
    INFO(c.text.substr(0, 80));
    auto parsed = parse_plugin_settings(c.text, "f");
    REQUIRE_FALSE(parsed.ok());
    CHECK(parsed.error().message.find(c.says) != std::string::npos);
  }
}

TEST_CASE("plugin settings file: absent is empty; a link, a directory or an oversized file is refused", "[unit]") {
  TempDir dir;
  CHECK(read_plugin_settings(dir.path / "none.env")->empty());
  write(dir.path / "real.env", "GPUCKPT_IMAGE_THREADS=3\n");
  CHECK(read_plugin_settings(dir.path / "real.env")->at("GPUCKPT_IMAGE_THREADS") == "3");
  fs::create_symlink(dir.path / "real.env", dir.path / "link.env");
  CHECK_FALSE(read_plugin_settings(dir.path / "link.env").ok());
  fs::create_directory(dir.path / "dir.env");
  auto directory = read_plugin_settings(dir.path / "dir.env");
  REQUIRE_FALSE(directory.ok());
  CHECK(directory.error().message.find("not a regular file") != std::string::npos);
  write(dir.path / "big.env", std::string(1 << 20, '#'));
  auto big = read_plugin_settings(dir.path / "big.env");
  REQUIRE_FALSE(big.ok());
  CHECK(big.error().message.find("larger than") != std::string::npos);
}

TEST_CASE("plugin settings: the environment over the file; a bad file is logged and the defaults apply", "[unit]") {
  clear_env();
  TempDir dir;
  write(dir.path / "node.env", "GPUCKPT_IMAGE_THREADS=3\nGPUCKPT_IMAGE_COMPRESSION=off\n");
  const auto node = PluginSettings::load(dir.path / "node.env");
  CHECK(node.get("GPUCKPT_IMAGE_THREADS") == "3");
  CHECK(node.get("GPUCKPT_IMAGE_SPARSE").empty());
  auto from_file = gpu_image::settings_from_env(node);
  REQUIRE(from_file.ok());
  CHECK(from_file->threads == 3);
  CHECK(from_file->compression.mode == gpu_image::CompressionMode::Off);
  ::setenv("GPUCKPT_IMAGE_THREADS", "5", 1);
  CHECK(gpu_image::settings_from_env(node)->threads == 5);   // the environment wins
  ::setenv("GPUCKPT_IMAGE_THREADS", "", 1);
  CHECK(gpu_image::settings_from_env(node)->threads == 3);   // set but empty: as unset
  clear_env();
  // A value its reader refuses is that reader's error, as from the environment (its caller then uses defaults).
  write(dir.path / "value.env", "GPUCKPT_IMAGE_THREADS=lots\n");
  auto refused = gpu_image::settings_from_env(PluginSettings::load(dir.path / "value.env"));
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("GPUCKPT_IMAGE_THREADS='lots'") == 0);
  // A file with a typo in a name: logged, ignored as a whole; the environment still applies.
  std::vector<std::string> errors;
  log::set_sink([&](log::Level level, std::string_view line) {
    if (level == log::Level::Error) errors.emplace_back(line);
  });
  write(dir.path / "typo.env", "GPUCKPT_IMAGE_THREADS=3\nGPUCKPT_IMAGE_COMPRESION=off\n");
  const auto typo = PluginSettings::load(dir.path / "typo.env");
  log::set_sink(nullptr);
  REQUIRE(errors.size() == 1);
  CHECK(errors[0].find("typo.env: line 2: unknown setting 'GPUCKPT_IMAGE_COMPRESION'") != std::string::npos);
  CHECK(errors[0].find("the plugin's defaults apply") != std::string::npos);
  CHECK(typo.get("GPUCKPT_IMAGE_THREADS").empty());
  auto defaults = gpu_image::settings_from_env(typo);
  REQUIRE(defaults.ok());
  CHECK(defaults->compression.mode == gpu_image::CompressionMode::Auto);
  ::setenv("GPUCKPT_IMAGE_SPARSE", "0", 1);
  CHECK_FALSE(gpu_image::settings_from_env(typo)->sparse);
  clear_env();
}

TEST_CASE("plugin settings: the file is found beside the object the code was loaded from", "[unit]") {
  TempDir dir;
  write(dir.path / "maps",
        "55d0c0000000-55d0c0100000 r-xp 00000000 08:01 1234   /usr/sbin/criu\n"
        "7f0000000000-7f0000200000 r-xp 00000000 08:01 5678   /usr/lib/criu/gpuckpt_plugin.so\n"
        "7f0000200000-7f0000300000 rw-p 00000000 00:00 0 \n");
  CHECK(object_dir_of(reinterpret_cast<const void*>(0x7f0000001000), dir.path / "maps") == "/usr/lib/criu");
  CHECK(object_dir_of(reinterpret_cast<const void*>(0x55d0c0000010), dir.path / "maps") == "/usr/sbin");
  CHECK(object_dir_of(reinterpret_cast<const void*>(0x7f0000200010), dir.path / "maps").empty());   // anonymous
  CHECK(object_dir_of(reinterpret_cast<const void*>(0x10), dir.path / "maps").empty());
  // This test binary's own code, through the real /proc/self/maps.
  CHECK(object_dir_of(reinterpret_cast<const void*>(&object_dir_of)) == fs::canonical("/proc/self/exe").parent_path());
}
