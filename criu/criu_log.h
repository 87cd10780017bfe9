// What a failed CRIU run said, for the error a runtime returns: a checkpoint that runc (under podman or containerd)
// or CRI-O ran fails with "criu failed" or "exit status 1", and the reason is only in CRIU's own log (dump.log,
// restore.log), which the runtime may delete with the failed container's work directory.
#pragma once

#include <filesystem>
#include <string>

namespace gpuckpt {

// The reasons in a CRIU log: gpuckpt's plugin's refusals ("gpuckpt: ... refusing ...", which CRIU logs without an
// "Error" mark) and CRIU's last "Error" lines, without the ones every run on a host without CAP_SYS_RESOURCE has
// (RLIMIT_NOFILE); at most four, each cut at 600 characters, joined by " | ". Empty when the log is unreadable or
// says nothing of the kind. Reads at most the first 8 MiB.
std::string criu_log_reasons(const std::filesystem::path& log);

}  // namespace gpuckpt
