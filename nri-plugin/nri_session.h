// One NRI connection: register with the runtime (RegisterPlugin on the runtime's connection), then answer the
// runtime's calls on the plugin's connection until it closes the socket or asks the plugin to shut down.
#pragma once

#include <string>

#include "base/result.h"
#include "nri-plugin/nri_plugin.h"

namespace gpuckpt::nri {

struct SessionOptions {
  std::string plugin_name = "gpuckpt";
  std::string plugin_idx = "50";   // NRI orders plugins by index; gpuckpt only observes, so its place is free
};

// `fd` is a connected stream socket to the runtime's NRI socket (or the one the runtime passed a plugin it
// started). Returns when the runtime closes the connection; an error for a refused registration or a protocol
// violation. The fd stays open (the caller owns it).
Result<void> serve(int fd, NriPlugin& plugin, const SessionOptions& options);

// Connects to the NRI socket at `path`.
Result<int> connect_nri_socket(const std::string& path);

}  // namespace gpuckpt::nri
