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
  if (criu::host_abi().fd_store_at_init) deps.fd_store = amd::FdStore{criu::fd_store_add, criu::fd_store_get};
  return amd::make_amd_backend(std::move(deps));
}

}  // namespace gpuckpt::plugin
