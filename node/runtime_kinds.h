// The container runtimes the agent drives (its runtime.kind), and what a restore is on each: a container the agent
// restores by itself, or a pod kubelet creates from a checkpoint image (POST /v1/images). One table: the agent's
// config check, its GET /v1/runtime answer and `gpuckpt runtime --help` read it, and test/cli/docs_code_test.sh holds
// the kubectl plugin's help against that help.
#pragma once

#include <array>
#include <string_view>

namespace gpuckpt::node {

enum class RestoreUnit { container, pod };

struct RuntimeKind {
  std::string_view name;        // runtime.kind
  RestoreUnit restores;
  std::string_view runtimes;    // what it drives, for people
};

inline constexpr std::array<RuntimeKind, 4> kRuntimeKinds = {{
    {"podman", RestoreUnit::container, "podman on the node"},
    {"containerd", RestoreUnit::container, "containerd's task API (1.7): kubelet does not see the restored container"},
    {"cri", RestoreUnit::pod, "CRI: CRI-O, containerd >= 2.0 (restores: CRI-O, containerd 2.1 to 2.3)"},
    {"kubelet", RestoreUnit::pod, "the kubelet's checkpoint API, over any CRI runtime"},
}};

// The entry named `name`; nullptr for a kind the agent does not know.
constexpr const RuntimeKind* find_runtime_kind(std::string_view name) {
  for (const auto& kind : kRuntimeKinds)
    if (kind.name == name) return &kind;
  return nullptr;
}

constexpr std::string_view to_string(RestoreUnit unit) { return unit == RestoreUnit::container ? "container" : "pod"; }

}  // namespace gpuckpt::node
