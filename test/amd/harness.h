// Shared setup for the AMD backend tests: a temporary host root (KFD topology, /proc, /dev/shm), an image
// directory, the simulated device, a log capture, and the CRIU sequence of hook calls for a dump and a restore.
#pragma once

#include <fcntl.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include <linux/kfd_ioctl.h>

#include "base/log.h"
#include "criu-plugin/amd/amd_backend.h"
#include "criu-plugin/criu_abi.h"
#include "test/amd/sim/host_tree.h"
#include "test/amd/sim/sim_kfd.h"

namespace gpuckpt::amd::test {

namespace fs = std::filesystem;
using sim::SimGpu;
using sim::SimKfd;

inline constexpr int kCriuPid = 1;
inline constexpr std::uint32_t kVram = KFD_IOC_ALLOC_MEM_FLAGS_VRAM | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;
inline constexpr std::uint32_t kGtt = KFD_IOC_ALLOC_MEM_FLAGS_GTT | KFD_IOC_ALLOC_MEM_FLAGS_WRITABLE;
inline constexpr std::uint32_t kDoorbell = KFD_IOC_ALLOC_MEM_FLAGS_DOORBELL;

class TempDir {
 public:
  TempDir() {
    char templ[] = "/tmp/gpuckpt-amd-XXXXXX";
    path_ = ::mkdtemp(templ);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Collects log lines while alive.
class LogCapture {
 public:
  LogCapture() {
    log::set_level(log::Level::Debug);
    log::set_sink([this](log::Level level, std::string_view line) {
      std::lock_guard lock(mutex_);
      lines_.emplace_back(line);
      levels_.push_back(level);
    });
  }
  ~LogCapture() {
    log::set_sink(nullptr);
    log::set_level(log::Level::Info);
  }
  bool contains(const std::string& needle) const {
    std::lock_guard lock(mutex_);
    for (const auto& l : lines_) {
      if (l.find(needle) != std::string::npos) return true;
    }
    return false;
  }
  // Whether a line logged at `level` contains `needle`.
  bool contains_at(log::Level level, const std::string& needle) const {
    std::lock_guard lock(mutex_);
    for (std::size_t i = 0; i < lines_.size(); ++i) {
      if (levels_[i] == level && lines_[i].find(needle) != std::string::npos) return true;
    }
    return false;
  }
  std::string all() const {
    std::lock_guard lock(mutex_);
    std::string out;
    for (const auto& l : lines_) out += l + "\n";
    return out;
  }

 private:
  mutable std::mutex mutex_;
  std::vector<std::string> lines_;
  std::vector<log::Level> levels_;
};

// One node: its host tree and its KFD.
struct Node {
  Node(const fs::path& root, std::vector<SimGpu> gpus_in, std::uint32_t kfd_minor = 11)
      : host_root(root), gpus(std::move(gpus_in)), kfd(std::make_shared<SimKfd>(gpus, 1, kfd_minor)) {
    sim::write_kfd_host_tree(root, gpus);
    kfd->set_calling_pid(kCriuPid);
  }
  fs::path host_root;
  std::vector<SimGpu> gpus;
  std::shared_ptr<SimKfd> kfd;
};

inline std::vector<SimGpu> make_gpus(std::size_t count, std::uint32_t first_id = 0x1000, int first_minor = 128) {
  std::vector<SimGpu> gpus;
  for (std::size_t i = 0; i < count; ++i) {
    gpus.push_back(SimGpu{first_id + static_cast<std::uint32_t>(i) * 0x111, first_minor + static_cast<int>(i)});
  }
  return gpus;
}

struct AppBo {
  std::uint32_t gpu_id;
  std::uint64_t va;
  std::uint64_t size;
  std::uint32_t flags;
};

// An application that uses every GPU of `node`: per GPU one VRAM and one GTT BO of the given sizes, a
// doorbell page, one queue; plus a few events. Returns what it allocated.
struct App {
  int pid = 0;
  int kfd_fd = -1;
  std::vector<int> render_fds;
  std::vector<AppBo> bos;
  std::map<std::uint64_t, std::vector<std::uint8_t>> contents;   // by VA, VRAM/GTT only
};

inline App start_app(Node& node, int pid, std::uint64_t vram_size, std::uint64_t gtt_size) {
  App app;
  app.pid = pid;
  app.kfd_fd = node.kfd->app_open_kfd(pid);
  std::uint64_t va = 0x7f0000000000ull;
  std::uint32_t seed = 1;
  for (const auto& g : node.gpus) {
    app.render_fds.push_back(node.kfd->app_open_render(pid, g.render_minor));
    for (auto [size, flags] : {std::pair{vram_size, kVram}, std::pair{gtt_size, kGtt},
                               std::pair{SimKfd::doorbell_size(), kDoorbell}}) {
      node.kfd->app_alloc_bo(pid, g.gpu_id, va, size, flags);
      app.bos.push_back(AppBo{g.gpu_id, va, size, flags});
      if (flags != kDoorbell) {
        node.kfd->app_fill_bo(pid, va, seed++);
        app.contents[va] = node.kfd->app_read_bo(pid, va);
      }
      va += (size + 0x1fffff) & ~0x1fffffull;
    }
    node.kfd->app_create_queue(pid, g.gpu_id);
  }
  node.kfd->app_create_events(pid, 3);
  return app;
}

inline AmdConfig config_with(std::uint64_t max_buffer, bool parallel) {
  AmdConfig c;
  c.max_buffer_size = max_buffer;
  c.parallel_restore = parallel;
  c.use_sdma = true;   // the simulated device has no SDMA engine: the backend must fall back to the CPU path
  return c;
}

class Images {
 public:
  explicit Images(const fs::path& dir) : dir_(dir) {
    fs::create_directories(dir);
    fd_ = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  }
  ~Images() { ::close(fd_); }
  int fd() const { return fd_; }
  const fs::path& dir() const { return dir_; }

 private:
  fs::path dir_;
  int fd_ = -1;
};

// The tasks the backend asked to stop (pid, signal), in order: tests never signal a real process.
inline std::vector<std::pair<int, int>>& kills_requested() {
  static std::vector<std::pair<int, int>> kills;
  return kills;
}

inline std::unique_ptr<plugin::Backend> make_backend(Node& node, const Images& images, const AmdConfig& config,
                                                     int* inventory_calls = nullptr,
                                                     std::optional<FdStore> fd_store = std::nullopt) {
  AmdBackendDeps deps;
  deps.fd_store = std::move(fd_store);
  deps.kill_task = [](int pid, int signal) {
    kills_requested().emplace_back(pid, signal);
    return 0;
  };
  deps.device = node.kfd;
  deps.host = HostRoot(node.host_root);
  const int fd = images.fd();
  deps.image_dir_fd = [fd] { return fd; };
  deps.add_to_inventory = [inventory_calls]() -> Result<void> {
    if (inventory_calls) ++*inventory_calls;
    return {};
  };
  deps.config = config;
  return make_amd_backend(std::move(deps));
}

inline constexpr int kKfdImageId = 7;
inline int render_image_id(std::size_t i) { return 20 + static_cast<int>(i); }

// CRIU's dump sequence for one process: HANDLE_DEVICE_VMA for its device mappings, DUMP_EXT_FILE for its
// /dev/kfd fd and each render-node fd, then fini with the outcome (as cr_dump_finish does, failed or not).
// Returns the first non-zero hook result.
// `host_pid`: the pid CRIU seizes (PAUSE_DEVICES) when the process lives in its own PID namespace.
inline int dump_app(Node& node, const Images& images, const App& app, const AmdConfig& config,
                    int* inventory_calls = nullptr, int host_pid = 0) {
  auto backend = make_backend(node, images, config, inventory_calls);
  node.kfd->set_calling_pid(kCriuPid);
  node.kfd->seize(app.pid, kCriuPid);
  if (int r = backend->init(criu::kStageDump)) return r;
  if (backend->pause_devices(host_pid > 0 ? host_pid : app.pid) != -ENOTSUP) return -EINVAL;
  const auto hooks = [&]() -> int {
    struct stat st {};
    node.kfd->fstat(app.kfd_fd, &st);
    if (int r = backend->handle_device_vma(app.kfd_fd, &st)) return r;
    if (int r = backend->dump_ext_file(app.kfd_fd, kKfdImageId)) return r;
    for (std::size_t i = 0; i < app.render_fds.size(); ++i) {
      node.kfd->fstat(app.render_fds[i], &st);
      if (int r = backend->handle_device_vma(app.render_fds[i], &st)) return r;
      if (int r = backend->dump_ext_file(app.render_fds[i], render_image_id(i))) return r;
    }
    return 0;
  };
  const int result = hooks();
  backend->fini(criu::kStageDump, result);
  return result;
}

struct RestoreOutcome {
  int kfd_fd = -1;                 // what RESTORE_EXT_FILE returned for the /dev/kfd image
  std::vector<int> render_fds;     // what it returned for the render-node images
  int resume = 0;                  // RESUME_DEVICES_LATE's result
};

// CRIU's restore sequence: init in the main process, POST_FORKING there, RESTORE_EXT_FILE in the restored
// process `pid`, RESUME_DEVICES_LATE back in the main process.
inline RestoreOutcome restore_app(Node& node, const Images& images, int pid, std::size_t render_images,
                                  const AmdConfig& config) {
  RestoreOutcome out;
  auto backend = make_backend(node, images, config);
  node.kfd->set_calling_pid(kCriuPid);
  REQUIRE(backend->init(criu::kStageRestore) == 0);
  REQUIRE(backend->post_forking() == 0);
  node.kfd->set_calling_pid(pid);
  bool retry = true;
  out.kfd_fd = backend->restore_ext_file(kKfdImageId, &retry);
  CHECK_FALSE(retry);
  for (std::size_t i = 0; i < render_images && out.kfd_fd >= 0; ++i) {
    out.render_fds.push_back(backend->restore_ext_file(render_image_id(i), &retry));
  }
  node.kfd->set_calling_pid(kCriuPid);
  out.resume = backend->resume_devices_late(pid);
  backend->fini(criu::kStageRestore, 0);
  return out;
}

// A node with an application on all its GPUs, checkpointed through the hooks and then (unless told otherwise)
// killed, as CRIU does after a dump. `before_dump` prepares the host tree (/proc, /dev/shm) first.
struct Scenario {
  Scenario(std::vector<SimGpu> gpus, int pid_in, std::uint64_t vram, std::uint64_t gtt, const AmdConfig& config_in,
           const std::function<void(Node&)>& before_dump = {}, bool kill_after_dump = true)
      : node(tmp.path() / "host", std::move(gpus)), images(tmp.path() / "images"), config(config_in), pid(pid_in) {
    if (before_dump) before_dump(node);
    app = start_app(node, pid, vram, gtt);
    dumped = dump_app(node, images, app, config, &inventory_calls);
    if (kill_after_dump) node.kfd->kill(pid);
  }
  RestoreOutcome restore(std::size_t render_images) { return restore_app(node, images, pid, render_images, config); }
  // A backend initialised for restore, with the restored process as the caller.
  std::unique_ptr<plugin::Backend> restore_backend() {
    auto backend = make_backend(node, images, config);
    REQUIRE(backend->init(criu::kStageRestore) == 0);
    node.kfd->set_calling_pid(pid);
    return backend;
  }

  TempDir tmp;
  LogCapture logs;
  Node node;
  Images images;
  AmdConfig config;
  int pid;
  App app;
  int dumped = -1;
  int inventory_calls = 0;
};

inline void close_all(const RestoreOutcome& out) {
  if (out.kfd_fd >= 0) ::close(out.kfd_fd);
  for (int fd : out.render_fds) {
    if (fd >= 0) ::close(fd);
  }
}

}  // namespace gpuckpt::amd::test
