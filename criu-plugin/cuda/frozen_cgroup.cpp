#include "criu-plugin/cuda/frozen_cgroup.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

namespace gpuckpt::cuda {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string first_line(const fs::path& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

fs::path control_file(const FreezerControl& c) { return c.dir / (c.v2 ? "cgroup.freeze" : "freezer.state"); }
const char* thaw_value(const FreezerControl& c) { return c.v2 ? "0" : "THAWED"; }
const char* freeze_value(const FreezerControl& c) { return c.v2 ? "1" : "FROZEN"; }
std::string name(const FreezerControl& c) { return c.dir.string() + (c.v2 ? " (cgroup v2)" : " (cgroup v1 freezer)"); }

// 0 or the errno of one write of the new state to the kernel's control file.
int write_state(const FreezerControl& c, const char* state) {
  const int fd = ::open(control_file(c).c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return errno;
  const auto length = static_cast<ssize_t>(std::strlen(state));
  const int error = ::write(fd, state, static_cast<std::size_t>(length)) == length ? 0 : (errno != 0 ? errno : EIO);
  ::close(fd);
  return error;
}

// Whether the kernel reports the cgroup thawed: v2 cgroup.events "frozen 0", v1 freezer.state THAWED.
bool reports_thawed(const FreezerControl& c) {
  if (!c.v2) return first_line(c.dir / "freezer.state") == "THAWED";
  std::ifstream events(c.dir / "cgroup.events");
  for (std::string line; std::getline(events, line);)
    if (line.rfind("frozen ", 0) == 0) return line == "frozen 0";
  return true;   // no "frozen" key: a kernel without the v2 freezer, which cannot have frozen it
}

// A cgroup path as /proc/PID/cgroup gives it, usable under the cgroupfs root: absolute, no "..", which the
// kernel writes when the cgroup lies outside the reader's cgroup namespace.
bool usable(const std::string& path) {
  if (path.empty() || path.front() != '/' || path.size() > 4096) return false;
  for (const auto& part : fs::path(path)) if (part == "..") return false;
  return true;
}

}  // namespace

Result<std::optional<ProcessFreezer>> process_freezer(int pid, const std::string& proc, const std::string& cgroup_root) {
  std::ifstream in(fs::path(proc) / std::to_string(pid) / "cgroup");
  std::optional<std::string> v1_path, v2_path;
  std::string line;
  for (int count = 0; count < 64 && std::getline(in, line); ++count) {   // "ID:controllers:path", one per hierarchy
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string id = line.substr(0, first), controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (id == "0" && controllers.empty()) v2_path = path;
    std::istringstream names(controllers);
    for (std::string controller; std::getline(names, controller, ',');)
      if (controller == "freezer") v1_path = path;
  }
  // A v1 freezer hierarchy is the one runc freezes where both exist (hybrid mode keeps v2 elsewhere).
  const bool v2 = !v1_path;
  const std::optional<std::string>& path = v2 ? v2_path : v1_path;
  if (!path) return std::optional<ProcessFreezer>{};
  if (!usable(*path))
    return make_error("the cgroup of pid " + std::to_string(pid) + " (" + path->substr(0, 256) + ") lies outside "
                      "this cgroup namespace", EXDEV);
  const fs::path relative = fs::path(*path).relative_path();
  ProcessFreezer freezer;
  freezer.own = {fs::path(cgroup_root) / (v2 ? fs::path() : fs::path("freezer")) / relative, v2};
  const std::string own_state = first_line(control_file(freezer.own));
  if (own_state.empty()) return std::optional<ProcessFreezer>{};   // the root cgroup, or no freezer mounted there
  if (!v2) {
    if (own_state == "FROZEN" || own_state == "FREEZING") freezer.holding.push_back(freezer.own);
    return std::optional<ProcessFreezer>{std::move(freezer)};
  }
  for (fs::path dir = relative; !dir.empty(); dir = dir.parent_path()) {
    FreezerControl control{fs::path(cgroup_root) / dir, true};
    if (first_line(control_file(control)) == "1") freezer.holding.push_back(std::move(control));
  }
  return std::optional<ProcessFreezer>{std::move(freezer)};
}

std::vector<std::string> thaw_frozen_cgroups(int pid, const std::string& proc, const std::string& cgroup_root) {
  std::vector<std::string> lines;
  auto freezer = process_freezer(pid, proc, cgroup_root);
  if (!freezer) return {"cannot thaw: " + freezer.error().message};
  if (!*freezer) return lines;
  for (const FreezerControl& control : (*freezer)->holding) {
    const int error = write_state(control, thaw_value(control));
    lines.push_back(error == 0 ? "thawed " + control.dir.string()
                               : "cannot thaw " + control.dir.string() + ": " + std::strerror(error));
  }
  return lines;
}

Result<TemporaryThaw> TemporaryThaw::begin(int pid, std::chrono::milliseconds settle, const std::string& proc,
                                           const std::string& cgroup_root) {
  GPUCKPT_TRY(const std::optional<ProcessFreezer> freezer, process_freezer(pid, proc, cgroup_root));
  if (!freezer || freezer->holding.empty()) return TemporaryThaw({});
  TemporaryThaw thaw({});
  for (const FreezerControl& control : freezer->holding) {
    if (const int error = write_state(control, thaw_value(control)); error != 0) {
      const auto refrozen = thaw.refreeze();
      return make_error("cannot thaw " + name(control) + ", which holds pid " + std::to_string(pid) + " frozen: " +
                        std::strerror(error) + (refrozen ? "" : "; " + refrozen.error().message), error);
    }
    thaw.thawed_.push_back(control);
  }
  const auto deadline = Clock::now() + settle;
  while (!reports_thawed(freezer->own)) {
    if (Clock::now() >= deadline) {
      const std::string thawed = thaw.describe();
      const auto refrozen = thaw.refreeze();
      return make_error("pid " + std::to_string(pid) + " stays frozen " + std::to_string(settle.count()) +
                        " ms after " + thawed + " was thawed (a frozen cgroup above it that the plugin does not "
                        "thaw?)" + (refrozen ? "" : "; " + refrozen.error().message), EBUSY);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return thaw;
}

TemporaryThaw::TemporaryThaw(TemporaryThaw&& other) noexcept : thawed_(std::move(other.thawed_)) {
  other.thawed_.clear();
}

TemporaryThaw::~TemporaryThaw() { (void)refreeze(); }

Result<void> TemporaryThaw::refreeze() {
  std::string failures;
  int last_error = 0;
  for (const FreezerControl& control : thawed_) {
    if (const int error = write_state(control, freeze_value(control)); error != 0) {
      failures += (failures.empty() ? "" : "; ") + name(control) + ": " + std::strerror(error);
      last_error = error;
    }
  }
  thawed_.clear();
  if (failures.empty()) return {};
  return make_error("cannot freeze again what was thawed for the driver: " + failures, last_error);
}

std::string TemporaryThaw::describe() const {
  std::string text;
  for (const FreezerControl& control : thawed_) text += (text.empty() ? "" : ", ") + name(control);
  return text;
}

}  // namespace gpuckpt::cuda
