// Whether GPU checkpoints can work on this node: CRIU and whether it loads gpuckpt's plugin, other GPU plugins beside
// it, the OCI hook and whether the runtime reads its hooks.d, hooks.d entries a runtime on the node would reject
// (one stops it from starting), the GPU driver and its checkpoint API, kernel features,
// the THP mode, SELinux, free space where archives go, and whether a restore lands in its container's cgroup (runc
// before 1.2 on cgroup v2). Each check ends pass, warn or fail with the fix.
// One implementation for `gpuckpt doctor` (on the node) and the agent's GET /v1/node (in its pod). gpuckpt reports
// host settings; it never changes them.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/host_root.h"
#include "base/result.h"

namespace gpuckpt {

enum class CheckStatus { Pass, Warn, Fail };
const char* to_string(CheckStatus status);

struct NodeCheck {
  std::string name;      // "criu", "criu-plugin", ...
  CheckStatus status = CheckStatus::Pass;
  std::string detail;    // what was found
  std::string fix;       // what to do (empty on pass)
};

// The node's CRIU, behind a seam: the real one runs the binary, tests use a fake.
class CriuProbe {
 public:
  virtual ~CriuProbe() = default;
  // CRIU's version ("4.1.1"), or why there is none.
  virtual Result<std::string> version() const = 0;
  // Whether CRIU loads the plugin file: a dump of a PID that cannot exist loads and initialises every plugin in
  // --libdir before it looks for the process (the chart's installer checks the same way). The error quotes CRIU.
  virtual Result<void> loads_plugin(const std::filesystem::path& plugin) const = 0;
};
// Runs `criu` (a path, or a name looked up in PATH).
std::unique_ptr<CriuProbe> make_criu_probe(std::string criu);

// The node's runc version ("1.1.5"), or why there is none.
using RuncVersion = std::function<Result<std::string>()>;
// Runs `runc --version` (a path, or a name looked up in PATH).
RuncVersion runc_version_of(std::string runc);

struct NodeReportOptions {
  HostRoot system{"/"};           // /proc, /sys, /boot, /etc of the node (the agent: /host)
  HostRoot files{"/"};            // where the directories below are seen (the agent mounts them at their paths)
  std::string criu_plugin_dir = "/usr/lib/criu";
  std::string hooks_dir = "/usr/share/containers/oci/hooks.d";
  std::string archive_dir = "/var/lib/gpuckpt/checkpoints";
  std::uint64_t gpu_memory_bytes = 0;   // all GPUs' memory: free space below it is a warning
  const CriuProbe* criu = nullptr;      // null: CRIU is not reachable from here (the agent's pod)
  RuncVersion runc_version;             // empty: runc is not reachable from here
};

std::vector<NodeCheck> check_node(const NodeReportOptions& options);

// {"status": worst, "checks": [{name, status, detail, fix}]}
nlohmann::json to_json(const std::vector<NodeCheck>& checks);
CheckStatus worst(const std::vector<NodeCheck>& checks);

}  // namespace gpuckpt
