// The production wiring of the AMD backend: the real kernel, the host's root, CRIU's image directory and
// inventory (through criu-plugin/criu_host.h).
#include "criu-plugin/amd/amd_backend.h"
#include "criu-plugin/criu_host.h"
#include "criu-plugin/plugin.h"

namespace gpuckpt::plugin {

std::unique_ptr<Backend> make_amd_backend() {
  amd::AmdBackendDeps deps;
  deps.device = amd::make_system_amd_device();
  deps.host = HostRoot("/");
  deps.image_dir_fd = [] { return criu::image_dir_fd(); };
  deps.add_to_inventory = [] { return criu::add_to_inventory(kPluginName); };
  return amd::make_amd_backend(std::move(deps));
}

}  // namespace gpuckpt::plugin
