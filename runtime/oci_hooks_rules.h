// How container runtimes judge the hooks.d entries on a node, and which runtimes read which hooks.d directories.
// CRI-O and podman both read hooks.d through containers' hooks library (go.podman.io/common/pkg/hooks, formerly
// github.com/containers/common/pkg/hooks; oci-hooks(5)); the rules below were read in its source as CRI-O v1.36.3
// vendors it (facts only, no code copied):
//   - an entry is a *.json file; other names are skipped;
//   - "version" selects the reader: "1.0.0", or "0.1.0"/absent (the old format: "hook" is the path, "stage" or
//     "stages", never both); any other version is an error;
//   - 1.0.0 needs hook.path, and the file it names must exist; every when.annotations key and value and every
//     when.commands entry must compile as a regular expression; "stages" must be present;
//   - every stage must be one of the OCI runtime-spec hooks (prestart createRuntime createContainer startContainer
//     poststart poststop) or an extension stage the runtime declares: podman declares precreate (and poststop),
//     CRI-O declares none (internal/lib/container_server.go: hooks.New(ctx, dirs, []string{})).
// A rejected entry stops the runtime from starting (CRI-O: `level=fatal msg="unknown stage \"precreate\""`),
// except a missing hook binary, which only drops that entry.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/host_root.h"

namespace gpuckpt {

// The OCI runtime-spec hook stages: every runtime that reads hooks.d accepts these.
const std::vector<std::string>& oci_hook_stages();

struct HooksEntryRejection {
  std::string reason;            // as the hooks library words it where it has words ("unknown stage \"precreate\"")
  bool missing_binary = false;   // the only rejection that does not stop the runtime: the entry is just dropped
};

// Why a runtime that declares `extension_stages` rejects a hooks.d entry with this content; nullopt: it accepts it.
// `binary_exists` answers for hook.path (a path on the node).
std::optional<HooksEntryRejection> judge_hooks_entry(std::string_view content,
                                                     const std::vector<std::string>& extension_stages,
                                                     const std::function<bool(const std::string&)>& binary_exists);

// A runtime on the node that reads hooks.d, where it reads it, and what it accepts there.
struct HooksRuntime {
  std::string name;                           // "CRI-O", "podman"
  std::string evidence;                       // what on the node says it is there ("/etc/crio")
  std::vector<std::string> dirs;              // its hooks.d directories (node paths), in the order it reads them
  std::string dirs_source;                    // where the list comes from ("hooks_dir in /etc/crio/crio.conf.d/...")
  std::vector<std::string> extension_stages;  // what it accepts beyond oci_hook_stages()
};

// The hooks.d readers this node has, from what they leave on it (config, socket, binary) under `system`.
// CRI-O: /etc/crio, /run/crio/crio.sock (or /var/run/... where /var/run is a directory), a crio binary; its
// directories are hooks_dir from /etc/crio/crio.conf and its drop-ins (the last one setting it wins), else its
// default /usr/share/containers/oci/hooks.d. podman: a podman binary; /usr/share/containers/oci/hooks.d then
// /etc/containers/oci/hooks.d (containers.conf hooks_dir is not read here).
std::vector<HooksRuntime> node_hooks_runtimes(const HostRoot& system);

}  // namespace gpuckpt
