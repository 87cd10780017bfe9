// gpuckpt-oci-hook: installed through a hooks.d JSON file (oci-hook/gpuckpt-hook.json). Thin main over
// gpuckpt_hook_lib: arguments, bounded stdin, a hard time limit, and the fail-safe exit policy:
//   createRuntime/poststop: exit 0 whatever the bookkeeping does (its failure must never stop a container), log
//   why; createRuntime of a restore whose restore plan is refused: exit 1 with the reason (no restore without it);
//   precreate: pass the config through unchanged unless a restore plan exists and cannot be applied, in which
//   case exit 1 with the reason (the runtime refuses the restore instead of restoring onto the wrong GPU). The
//   config on stdout is all or nothing: when the hook cannot finish it (the time limit, a failed write) it exits 1,
//   since a runtime takes exit 0 as "this is the whole config" and would get truncated JSON.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <ctime>
#include <filesystem>
#include <cstring>
#include <exception>
#include <cerrno>
#include <string>

#include <nlohmann/json.hpp>

#include "gpu/device_nodes.h"
#include "gpu/inventory.h"
#include "base/json_reader.h"
#include "base/log.h"
#include "oci-hook/hook.h"

namespace {

constexpr std::size_t kMaxStdin = 16 << 20;
volatile sig_atomic_t g_precreate = 0;   // stdout carries a config: the time limit fails the hook

void on_timeout(int) {
  // Only async-signal-safe calls here: the state-dir log does not get this line.
  if (g_precreate) {
    // Part of the config may be on stdout already: only a failure tells the runtime not to use it.
    static const char kRefused[] = "gpuckpt-oci-hook: error: time limit reached before the config was written; "
                                   "failing (raise --timeout-ms if the host is this slow)\n";
    (void)!::write(2, kRefused, sizeof kRefused - 1);
    ::_exit(1);
  }
  static const char kMessage[] = "gpuckpt-oci-hook: error: time limit reached; container continues unmodified\n";
  (void)!::write(2, kMessage, sizeof kMessage - 1);
  ::_exit(0);
}

// The whole of `data` on stdout, flushed; false when the runtime stopped reading.
bool write_config(const std::string& data) {
  return std::fwrite(data.data(), 1, data.size(), stdout) == data.size() && std::fflush(stdout) == 0;
}

bool looks_like_state(const std::string& input) {
  const auto json = gpuckpt::parse_json(input, "stdin");
  return json && json->is_object() && json->contains("status") && json->contains("bundle");
}

// Reads stdin up to `limit` bytes; `complete` is false when more was there (left unread).
std::string read_stdin(std::size_t limit, bool& complete) {
  std::string data;
  char chunk[64 * 1024];
  complete = true;
  for (;;) {
    const ssize_t n = ::read(0, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    data.append(chunk, static_cast<std::size_t>(n));
    if (data.size() > limit) {
      complete = false;
      break;
    }
  }
  return data;
}

// Copies the rest of stdin to stdout without looking at it (precreate input too large to read: unchanged).
// False when it could not: a read or write error.
bool pass_rest_through() {
  char chunk[64 * 1024];
  for (;;) {
    const ssize_t n = ::read(0, chunk, sizeof chunk);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    if (n == 0) return std::fflush(stdout) == 0;
    if (std::fwrite(chunk, 1, static_cast<std::size_t>(n), stdout) != static_cast<std::size_t>(n)) return false;
  }
}

// Runtimes drop a hook's stderr (podman shows only "exit status 1"), so every line also goes to
// <state_dir>/hook.log, which is rotated once at 1 MiB.
void log_to_state_dir(const std::filesystem::path& state_dir) {
  const auto path = state_dir / "hook.log";
  gpuckpt::log::set_sink([path](gpuckpt::log::Level level, std::string_view line) {
    static const char* names[] = {"", "error", "warn", "info", "debug"};
    const char* name = names[static_cast<int>(level)];
    std::fprintf(stderr, "gpuckpt-oci-hook: %s: %.*s\n", name, static_cast<int>(line.size()), line.data());
    std::error_code ec;
    if (std::filesystem::file_size(path, ec) > (1u << 20)) std::filesystem::rename(path, path.string() + ".1", ec);
    if (FILE* f = std::fopen(path.c_str(), "a")) {
      char stamp[32];
      const std::time_t now = std::time(nullptr);
      std::tm tm{};
      gmtime_r(&now, &tm);
      std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
      std::fprintf(f, "%s pid %d %s: %.*s\n", stamp, static_cast<int>(::getpid()), name, static_cast<int>(line.size()),
                   line.data());
      std::fclose(f);
    }
  });
}

int usage() {
  std::fprintf(stderr,
               "usage: gpuckpt-oci-hook [--state-dir DIR] [--host-root DIR] [--timeout-ms N] [--log-level L] [STAGE]\n"
               "  STAGE: precreate | createRuntime (alias prestart) | poststop; default: from stdin\n");
  return 2;
}

// The command line into options and stage_name (empty when not given); false on an argument it does not know.
bool parse_arguments(int argc, char** argv, gpuckpt::hook::HookOptions& options, std::string& stage_name) {
  using namespace gpuckpt;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (arg == "--state-dir") options.state_dir = value();
    else if (arg == "--host-root") options.host_root = value();
    else if (arg == "--timeout-ms") options.timeout = std::chrono::milliseconds(std::atol(value().c_str()));
    else if (arg == "--log-level") log::set_level(log::level_from_string(value(), log::Level::Info));
    else if (!arg.empty() && arg[0] != '-' && stage_name.empty()) stage_name = arg;
    else return false;
  }
  if (options.timeout.count() <= 0) options.timeout = std::chrono::milliseconds(5000);
  return true;
}

// Input over kMaxStdin: precreate passes the config through unchanged, the other stages ignore the container.
int handle_oversized_input(gpuckpt::hook::Stage stage, const std::string& input) {
  using namespace gpuckpt;
  if (stage != hook::Stage::Precreate) {
    log::error("stdin larger than 16 MiB; ignoring this container");
    return 0;
  }
  log::warn("stdin larger than 16 MiB; passing the config through unchanged");
  if (write_config(input) && pass_rest_through()) return 0;
  log::error("could not pass the whole config through (the runtime stopped reading?); failing");
  return 1;
}

int run_create_runtime(const std::string& input, const gpuckpt::hook::HookOptions& options,
                       const gpuckpt::DeviceNumberLookup& lookup) {
  using namespace gpuckpt;
  auto outcome = hook::create_runtime(
      input, options, [&] { return read_inventory(HostRoot(options.host_root)); }, lookup);
  if (!outcome.record) log::error(outcome.record.error().message + " (container starts unmodified)");
  else if (outcome.record->gpu_container) log::info(outcome.record->message);
  else log::debug(outcome.record->message);
  if (!outcome.restore) {
    ::alarm(0);
    log::error(outcome.restore.error().message);
    return 1;
  }
  if (!outcome.restore->empty()) log::info(outcome.restore.value());
  return 0;
}

int run_precreate(const std::string& input, const gpuckpt::hook::HookOptions& options,
                  const gpuckpt::DeviceNumberLookup& lookup) {
  using namespace gpuckpt;
  auto outcome = hook::precreate(input, options, lookup);
  if (!outcome) {
    ::alarm(0);
    log::error(outcome.error().message);
    return 1;
  }
  if (!write_config(outcome->config)) {
    log::error("could not write the config to stdout (the runtime stopped reading?); failing");
    return 1;
  }
  if (outcome->modified) log::info(outcome->message);
  else log::debug(outcome->message);
  return 0;
}

int run_poststop(const std::string& input, const gpuckpt::hook::HookOptions& options) {
  using namespace gpuckpt;
  auto outcome = hook::forget_container(input, options);
  if (!outcome) log::warn(outcome.error().message);
  else log::debug(outcome.value());
  return 0;
}

// The stage's work on the whole input, and the exit status the fail-safe policy gives its outcome.
int run_stage(gpuckpt::hook::Stage stage, const std::string& input, const gpuckpt::hook::HookOptions& options) {
  using namespace gpuckpt;
  const bool names_plan = input.find(kAnnotationRestorePlan) != std::string::npos;
  try {
    const auto lookup = stat_device_numbers(options.host_root);
    switch (stage) {
      case hook::Stage::CreateRuntime: return run_create_runtime(input, options, lookup);
      case hook::Stage::Precreate: return run_precreate(input, options, lookup);
      case hook::Stage::Poststop: return run_poststop(input, options);
    }
  } catch (const std::exception& e) {
    // Nothing is on stdout yet (the config is written last, in one piece).
    if (stage == hook::Stage::Precreate && names_plan) {
      log::error(std::string("internal error applying a restore plan: ") + e.what() + " (refused)");
      return 1;
    }
    log::error(std::string("internal error: ") + e.what() + " (container continues unmodified)");
    if (stage == hook::Stage::Precreate && !write_config(input)) return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace gpuckpt;
  log::set_component("gpuckpt-oci-hook");
  hook::HookOptions options;
  std::string stage_name;
  if (!parse_arguments(argc, argv, options, stage_name)) return usage();
  options.runtime_pid = static_cast<int>(::getppid());
  {
    std::error_code ec;
    if (std::filesystem::is_directory(options.state_dir, ec)) log_to_state_dir(options.state_dir);
  }
  // Before anything is read: a hook named for precreate that runs out of time fails (one without a stage argument
  // learns its stage from the input below).
  g_precreate = stage_name == "precreate";
  ::signal(SIGALRM, on_timeout);
  ::alarm(static_cast<unsigned>((options.timeout.count() + 999) / 1000));
  bool complete = true;
  const std::string input = read_stdin(kMaxStdin, complete);
  // Without a stage argument (one hooks.d entry for several stages) the input tells: precreate gets a runtime
  // config, the other stages the OCI state (which has "status").
  if (stage_name.empty())
    stage_name = complete && looks_like_state(input) ? "createRuntime" : "precreate";
  auto stage = hook::parse_stage(stage_name);
  if (!stage) {
    log::error(stage.error().message);
    return usage();
  }
  g_precreate = *stage == hook::Stage::Precreate;
  if (!complete) return handle_oversized_input(*stage, input);
  return run_stage(*stage, input, options);
}
