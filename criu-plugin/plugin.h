// The plugin's entry: CR_PLUGIN_DESC and the C hook functions CRIU calls (plugin.cpp). Exposed for tests.
#pragma once

#include "criu-plugin/criu_abi.h"
#include "criu-plugin/criu_host.h"

namespace gpuckpt::plugin {

inline constexpr const char* kPluginName = "gpuckpt";

// The descriptor for a host: max_hooks = host_abi.max_hooks() and the hook table with every slot below it that
// gpuckpt serves (RESTORE_EXT_FILE in the signature the host calls). Zero hooks on a host that is too old.
criu::PluginDesc make_descriptor(const criu::HostAbi& host);

}  // namespace gpuckpt::plugin
