// The OCI hook's inputs: the precreate config on stdin, the OCI state on stdin, and the bundle's config.json
// (which the container's author wrote). The first byte picks which; a restore plan waits in the state dir.
// The hook's stdin bound and time limit are in its main (tested in test/oci-hook).
#include <limits>

#include "fuzz/fuzz_support.h"
#include "oci-hook/hook.h"

using namespace gpuckpt;

namespace {

hook::HookOptions options() {
  hook::HookOptions o;
  o.state_dir = fuzz::scratch() / "state";
  static const bool planned = [&] {
    RestorePlan plan = fuzz::fixed_plan();
    plan.expires_at = std::numeric_limits<std::int64_t>::max();   // usable by inputs that name ck-fuzz
    return write_restore_plan(o.state_dir, plan).ok();
  }();
  if (!planned) __builtin_trap();
  return o;
}

Result<NodeInventory> inventory() { return fuzz::two_gpus(); }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const auto o = options();
  switch (data[0] % 3) {
    case 0:
      (void)hook::precreate(text, o, fuzz::fixed_numbers());
      break;
    case 1: {
      const auto bundle = fuzz::scratch() / "bundle";
      fuzz::write_file(bundle / "config.json", text);
      std::filesystem::create_directories(bundle / "checkpoint");
      const std::string state = R"({"ociVersion": "1.0.2", "id": "fuzzed", "status": "creating", "pid": 1, "bundle": ")" +
                                bundle.string() + "\"}";
      (void)hook::create_runtime(state, o, inventory, fuzz::fixed_numbers());
      break;
    }
    default:
      // The state itself (not fed to create_runtime: its bundle path would let the fuzzer write anywhere).
      (void)hook::forget_container(text, o);
      break;
  }
  return 0;
}
