// The CRIU plugin ABI as gpuckpt declares it, the host detection that picks max_hooks and the RESTORE_EXT_FILE
// signature per CRIU release, the hook table, and the dispatch between backends.
#include <catch2/catch_test_macros.hpp>

#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <map>
#include <stdexcept>
#include <string>

#include "criu-plugin/criu_abi.h"
#include "criu-plugin/criu_host.h"
#include "criu-plugin/dispatch.h"
#include "criu-plugin/plugin.h"

using namespace gpuckpt;
using criu::HostAbi;
using criu::SymbolInfo;

extern "C" criu::PluginDesc CR_PLUGIN_DESC;

namespace {

int g_dummy;

// A fake symbol table: name -> size (the address is irrelevant to detection).
criu::SymbolLookup table(std::map<std::string, std::size_t> symbols) {
  return [symbols](const char* name) -> std::optional<SymbolInfo> {
    auto it = symbols.find(name);
    if (it == symbols.end()) return std::nullopt;
    return SymbolInfo{&g_dummy, it->second};
  };
}

constexpr std::size_t ctl_size(unsigned hooks) { return 16 + 16 * hooks; }

}  // namespace

TEST_CASE("the plugin descriptor has CRIU's layout", "[unit]") {
  CHECK(offsetof(criu::PluginDesc, name) == 0);
  CHECK(offsetof(criu::PluginDesc, init) == 8);
  CHECK(offsetof(criu::PluginDesc, exit) == 16);
  CHECK(offsetof(criu::PluginDesc, version) == 24);
  CHECK(offsetof(criu::PluginDesc, max_hooks) == 28);
  CHECK(offsetof(criu::PluginDesc, hooks) == 32);
  CHECK(sizeof(criu::PluginDesc) == 32 + 8 * 15);
  CHECK(criu::kPluginVersion == 0x200);   // 0.2.0: what CRIU 3.17 - 4.2 accept
  CHECK(criu::kPauseDevices == 10);
  CHECK(criu::kCheckpointDevices == 11);
  CHECK(criu::kResumeDevicesLate == 9);
  CHECK(criu::kRestoreExtFile == 3);
  CHECK(std::string(criu::hook_name(criu::kPauseDevices)) == "PAUSE_DEVICES");
  CHECK(std::string(criu::hook_name(99)) == "?");
}

TEST_CASE("the host CRIU's hook count comes from the size of cr_plugin_ctl", "[unit]") {
  SECTION("CRIU 4.0 / 4.1: 12 hooks, one-argument RESTORE_EXT_FILE") {
    HostAbi abi = criu::detect_host_abi(table({{"cr_plugin_ctl", ctl_size(12)}}));
    CHECK(abi.hook_count == 12);
    CHECK(abi.supported());
    CHECK(abi.max_hooks() == 12);
    CHECK_FALSE(abi.restore_ext_file_has_retry);
    CHECK(abi.evidence == "cr_plugin_ctl is 208 bytes");
  }
  SECTION("CRIU 4.2.1: 13 hooks (POST_FORKING), still the one-argument RESTORE_EXT_FILE") {
    HostAbi abi = criu::detect_host_abi(table({{"cr_plugin_ctl", ctl_size(13)}}));
    CHECK(abi.max_hooks() == 13);
    CHECK_FALSE(abi.restore_ext_file_has_retry);
  }
  SECTION("criu-dev with RESTORE_INIT: 14 hooks, RESTORE_EXT_FILE with retry_needed (criu-dev leaves it unset)") {
    HostAbi abi = criu::detect_host_abi(table({{"cr_plugin_ctl", ctl_size(14)}}));
    CHECK(abi.max_hooks() == 14);
    CHECK(abi.restore_ext_file_has_retry);
  }
  SECTION("a 17-hook plugin API: announce only the 15 we know, RESTORE_EXT_FILE with retry_needed") {
    HostAbi abi = criu::detect_host_abi(table({{"cr_plugin_ctl", ctl_size(17)}}));
    CHECK(abi.hook_count == 17);
    CHECK(abi.max_hooks() == 15);
    CHECK(abi.restore_ext_file_has_retry);
  }
  SECTION("CRIU 3.17: 10 hooks, too old, nothing announced") {
    HostAbi abi = criu::detect_host_abi(table({{"cr_plugin_ctl", ctl_size(10)}, {"criu_get_image_dir", 0}}));
    CHECK(abi.hook_count == 10);
    CHECK_FALSE(abi.supported());
    CHECK(abi.max_hooks() == 0);
  }
  SECTION("no symbol sizes: CRIU >= 4.0 recognised by its inventory plugin list, 12 is safe for all of them") {
    HostAbi abi = criu::detect_host_abi(table({{"cr_plugin_ctl", 0}, {"check_and_remove_inventory_plugin", 0}}));
    CHECK(abi.hook_count == 12);
    CHECK(abi.max_hooks() == 12);
    CHECK_FALSE(abi.restore_ext_file_has_retry);
  }
  SECTION("no symbol sizes and no inventory list: older than 4.0") {
    HostAbi abi = criu::detect_host_abi(table({{"criu_get_image_dir", 0}}));
    CHECK(abi.hook_count == 10);
    CHECK_FALSE(abi.supported());
  }
  SECTION("a size that is no list of list heads is not trusted") {
    HostAbi abi = criu::detect_host_abi(table({{"cr_plugin_ctl", 100}, {"check_and_remove_inventory_plugin", 0}}));
    CHECK(abi.hook_count == 12);
  }
  SECTION("CRIU's fdstore is usable at init(RESTORE) from 13 hooks (4.2) on, where CRIU exports it") {
    const auto with_store = [](unsigned hooks) {
      return criu::detect_host_abi(
          table({{"cr_plugin_ctl", ctl_size(hooks)}, {"fdstore_add", 0}, {"fdstore_get", 0}}));
    };
    CHECK_FALSE(with_store(12).fd_store_at_init);   // 4.0 / 4.1: plugins' init runs before fdstore_init
    CHECK(with_store(13).fd_store_at_init);
    CHECK(with_store(15).fd_store_at_init);
    CHECK_FALSE(criu::detect_host_abi(table({{"cr_plugin_ctl", ctl_size(15)}, {"fdstore_add", 0}})).fd_store_at_init);
  }
  SECTION("not inside CRIU") {
    HostAbi abi = criu::detect_host_abi(table({}));
    CHECK(abi.hook_count == 0);
    CHECK(abi.max_hooks() == 0);
    CHECK(abi.evidence.find("not loaded by CRIU") != std::string::npos);
  }
}

TEST_CASE("process_symbols reads sizes from the ELF symbol table", "[unit]") {
  auto lookup = criu::process_symbols();
  auto environ_symbol = lookup("environ");   // libc's data symbol: a char**
  REQUIRE(environ_symbol);
  CHECK(environ_symbol->size == sizeof(char**));
  CHECK_FALSE(lookup("cr_plugin_ctl"));   // this test is no CRIU
}

TEST_CASE("the hook table follows the host", "[unit]") {
  auto on = [](unsigned hooks) { return criu::detect_host_abi(table({{"cr_plugin_ctl", ctl_size(hooks)}})); };
  SECTION("12 hooks: device hooks present, nothing at or beyond slot 12") {
    criu::PluginDesc d = plugin::make_descriptor(on(12));
    CHECK(std::string(d.name) == "gpuckpt");
    CHECK(d.version == 0x200);
    CHECK(d.max_hooks == 12);
    CHECK(d.init != nullptr);
    CHECK(d.exit != nullptr);
    for (unsigned h : {criu::kDumpExtFile, criu::kRestoreExtFile, criu::kHandleDeviceVma, criu::kUpdateVmaMap,
                       criu::kResumeDevicesLate, criu::kPauseDevices, criu::kCheckpointDevices})
      CHECK(d.hooks[h] != nullptr);
    for (unsigned h : {criu::kDumpUnixSk, criu::kRestoreUnixSk, criu::kDumpExtMount, criu::kRestoreExtMount,
                       criu::kDumpExtLink})
      CHECK(d.hooks[h] == nullptr);
    CHECK(d.hooks[criu::kPostForking] == nullptr);
  }
  SECTION("13 hooks (4.2.1): POST_FORKING too, same one-argument RESTORE_EXT_FILE") {
    criu::PluginDesc d12 = plugin::make_descriptor(on(12));
    criu::PluginDesc d13 = plugin::make_descriptor(on(13));
    CHECK(d13.max_hooks == 13);
    CHECK(d13.hooks[criu::kPostForking] != nullptr);
    CHECK(d13.hooks[criu::kRestoreExtFile] == d12.hooks[criu::kRestoreExtFile]);
    CHECK(d13.hooks[criu::kPauseDevices] == d12.hooks[criu::kPauseDevices]);
  }
  SECTION("14 hooks (criu-dev): the two-argument RESTORE_EXT_FILE entry, no DUMP_DEVICES_LATE slot yet") {
    criu::PluginDesc d13 = plugin::make_descriptor(on(13));
    criu::PluginDesc d14 = plugin::make_descriptor(on(14));
    CHECK(d14.max_hooks == 14);
    CHECK(d14.hooks[criu::kRestoreExtFile] != nullptr);
    CHECK(d14.hooks[criu::kRestoreExtFile] != d13.hooks[criu::kRestoreExtFile]);
    CHECK(d14.hooks[criu::kRestoreInit] == nullptr);
    // criu-dev does not initialise the flag: the entry point clears it before any backend runs.
    bool retry_needed = true;
    auto restore_ext_file = reinterpret_cast<criu::RestoreExtFileV2Fn>(d14.hooks[criu::kRestoreExtFile]);
    CHECK(restore_ext_file(7, &retry_needed) == -ENOTSUP);   // not initialised by CRIU here: every hook declines
    CHECK_FALSE(retry_needed);
  }
  SECTION("15 and more hooks: DUMP_DEVICES_LATE registered, nothing beyond the slots gpuckpt knows") {
    criu::PluginDesc d13 = plugin::make_descriptor(on(13));
    criu::PluginDesc d15 = plugin::make_descriptor(on(15));
    criu::PluginDesc d17 = plugin::make_descriptor(on(17));
    CHECK(d13.hooks[criu::kDumpDevicesLate] == nullptr);
    CHECK(d15.max_hooks == 15);
    CHECK(d15.hooks[criu::kDumpDevicesLate] != nullptr);
    CHECK(d17.max_hooks == 15);
    CHECK(d17.hooks[criu::kDumpDevicesLate] == d15.hooks[criu::kDumpDevicesLate]);
    CHECK(std::string(criu::hook_name(criu::kDumpDevicesLate)) == "DUMP_DEVICES_LATE");
  }
  SECTION("too old: no hooks at all, so CRIU loads the plugin and never calls it") {
    criu::PluginDesc d = plugin::make_descriptor(on(10));
    CHECK(d.max_hooks == 0);
    for (void* hook : d.hooks) CHECK(hook == nullptr);
  }
}

TEST_CASE("the exported descriptor was filled for this (non-CRIU) process when the code was loaded", "[unit]") {
  CHECK(std::string(CR_PLUGIN_DESC.name) == "gpuckpt");
  CHECK(CR_PLUGIN_DESC.max_hooks == 0);
  CHECK(CR_PLUGIN_DESC.version == 0x200);
  // init on a host that is not CRIU (too few hooks) succeeds and stays inactive: CRIU would carry on. It says the
  // CRIU is too old, and never "plugin loaded", which the installer's verification and the e2e tests take as proof
  // of a usable CRIU: a too-old one must never pass for one. Without CRIU's logger the lines go to stderr, captured
  // here.
  std::fflush(stderr);
  std::FILE* captured = std::tmpfile();
  REQUIRE(captured != nullptr);
  const int saved = ::dup(STDERR_FILENO);
  ::dup2(::fileno(captured), STDERR_FILENO);
  const int rc = CR_PLUGIN_DESC.init(criu::kStageDump);
  CR_PLUGIN_DESC.exit(criu::kStageDump, 0);
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  std::rewind(captured);
  std::string said;
  for (int c; (c = std::fgetc(captured)) != EOF;) said += static_cast<char>(c);
  std::fclose(captured);
  INFO(said);
  CHECK(rc == 0);
  CHECK(said.find("this CRIU is too old for GPU checkpointing") != std::string::npos);
  CHECK(said.find("plugin loaded") == std::string::npos);
}

namespace {
class FakeBackend final : public plugin::Backend {
 public:
  FakeBackend(const char* name, int answer, int* calls, bool throws = false)
      : name_(name), answer_(answer), calls_(calls), throws_(throws) {}
  const char* name() const override { return name_; }
  int init(int) override { return 0; }
  void fini(int, int) override {}
  int pause_devices(int) override {
    ++*calls_;
    if (throws_) throw std::runtime_error("boom");
    return answer_;
  }

 private:
  const char* name_;
  int answer_;
  int* calls_;
  bool throws_;
};
}  // namespace

TEST_CASE("a hook goes to each backend until one answers other than -ENOTSUP", "[unit]") {
  int a = 0, b = 0;
  plugin::Dispatcher d;
  auto call = [](plugin::Backend& backend) { return backend.pause_devices(42); };
  SECTION("first declines, second answers") {
    std::vector<std::unique_ptr<plugin::Backend>> v;
    v.push_back(std::make_unique<FakeBackend>("one", -ENOTSUP, &a));
    v.push_back(std::make_unique<FakeBackend>("two", -EIO, &b));
    d.set_backends(std::move(v));
    CHECK(d.offer("PAUSE_DEVICES", call) == -EIO);
    CHECK(a == 1);
    CHECK(b == 1);
  }
  SECTION("the first answer wins: the second is not asked") {
    std::vector<std::unique_ptr<plugin::Backend>> v;
    v.push_back(std::make_unique<FakeBackend>("one", 0, &a));
    v.push_back(std::make_unique<FakeBackend>("two", 0, &b));
    d.set_backends(std::move(v));
    CHECK(d.offer("PAUSE_DEVICES", call) == 0);
    CHECK(b == 0);
  }
  SECTION("all decline: -ENOTSUP goes back to CRIU, which asks the next plugin") {
    std::vector<std::unique_ptr<plugin::Backend>> v;
    v.push_back(std::make_unique<FakeBackend>("one", -ENOTSUP, &a));
    d.set_backends(std::move(v));
    CHECK(d.offer("PAUSE_DEVICES", call) == -ENOTSUP);
  }
  SECTION("a throwing backend fails the hook with -EIO, nothing crosses the C ABI") {
    std::vector<std::unique_ptr<plugin::Backend>> v;
    v.push_back(std::make_unique<FakeBackend>("one", 0, &a, /*throws=*/true));
    v.push_back(std::make_unique<FakeBackend>("two", 0, &b));
    d.set_backends(std::move(v));
    CHECK(d.offer("PAUSE_DEVICES", call) == -EIO);
    CHECK(b == 0);
  }
}
