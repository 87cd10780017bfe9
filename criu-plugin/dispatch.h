// Offering one CRIU hook to every backend in turn: the first answer other than -ENOTSUP wins, like CRIU's own
// run_plugins() between plugins. Nothing escapes as an exception: a throwing backend is logged and its hook
// fails with -EIO (the C ABI cannot carry exceptions).
#pragma once

#include <cerrno>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "base/log.h"
#include "criu-plugin/backend.h"

namespace gpuckpt::plugin {

class Dispatcher {
 public:
  void set_backends(std::vector<std::unique_ptr<Backend>> backends) { backends_ = std::move(backends); }
  std::vector<std::unique_ptr<Backend>>& backends() { return backends_; }
  void clear() { backends_.clear(); }

  template <class Call>
  int offer(const char* hook, Call&& call) noexcept {
    for (auto& backend : backends_) {
      int ret = guarded(hook, backend->name(), [&] { return call(*backend); });
      if (ret != -ENOTSUP) return ret;
    }
    return -ENOTSUP;
  }

  template <class Call>
  static int guarded(const char* what, const char* backend, Call&& call) noexcept {
    try {
      return call();
    } catch (const std::exception& e) {
      report(what, backend, e.what());
    } catch (...) {
      report(what, backend, "unknown exception");
    }
    return -EIO;
  }

 private:
  static void report(const char* what, const char* backend, const char* message) noexcept {
    try {
      log::error(std::string(backend) + ": " + what + " failed: " + message);
    } catch (...) {
    }
  }

  std::vector<std::unique_ptr<Backend>> backends_;
};

}  // namespace gpuckpt::plugin
