// Hook entry points of the AMD backend. This first version only probes for KFD and declines every hook.
#include <fcntl.h>

#include <cstring>
#include <string>

#include "common/log.h"
#include "criu-plugin/amd/amd_device.h"
#include "criu-plugin/backend.h"

namespace gpuckpt::plugin {
namespace {

class AmdBackend final : public Backend {
 public:
  explicit AmdBackend(std::unique_ptr<amd::AmdDevice> device) : device_(std::move(device)) {}
  const char* name() const override { return "amd"; }

  int init(int /*stage*/) override {
    int fd = device_->open("/dev/kfd", O_RDWR);
    if (fd < 0) {
      log::info(std::string("amd: /dev/kfd not usable (") + std::strerror(-fd) +
                "); the AMD backend declines every hook");
      return 0;
    }
    device_->close(fd);
    log::info("amd: /dev/kfd found, but checkpoint support is not built yet; declining every hook");
    return 0;
  }
  void fini(int /*stage*/, int /*ret*/) override {}

 private:
  std::unique_ptr<amd::AmdDevice> device_;
};

}  // namespace

std::unique_ptr<Backend> make_amd_backend() {
  return std::make_unique<AmdBackend>(amd::make_system_amd_device());
}

}  // namespace gpuckpt::plugin
