#include "runtime/container_runtime.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstring>
#include <fstream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "archive/checkpoint_image.h"
#include "criu/criu_log.h"
#include "base/log.h"

extern char** environ;

namespace gpuckpt {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

Result<CommandResult> run_command(const std::vector<std::string>& argv, std::chrono::milliseconds timeout,
                                  std::size_t max_output) {
  if (argv.empty()) return make_error("run_command: empty argv");
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0) return make_error(std::string("pipe: ") + std::strerror(errno), errno);
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    ::close(out_pipe[0]);
    ::close(out_pipe[1]);
    return make_error(std::string("pipe: ") + std::strerror(errno), errno);
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);   // a timeout kills the whole process group
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = ::posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(out_pipe[0]);
    ::close(err_pipe[0]);
    return make_error("cannot run " + argv[0] + ": " + std::strerror(rc) + " (is it installed and on PATH?)", rc);
  }
  CommandResult result;
  const auto deadline = Clock::now() + timeout;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  std::string* sinks[2] = {&result.out, &result.err};
  int open_fds = 2;
  char buffer[8192];
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      result.timed_out = true;
      ::kill(-pid, SIGKILL);
      break;
    }
    if (::poll(fds, 2, static_cast<int>(std::min<long long>(left, 1000))) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      const ssize_t n = ::read(fds[i].fd, buffer, sizeof buffer);
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      } else if (sinks[i]->size() < max_output) {
        sinks[i]->append(buffer, std::min<std::size_t>(static_cast<std::size_t>(n), max_output - sinks[i]->size()));
      }
    }
  }
  for (auto& f : fds)
    if (f.fd >= 0) ::close(f.fd);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  result.exit_code = (!result.timed_out && WIFEXITED(status)) ? WEXITSTATUS(status) : -1;
  return result;
}

std::chrono::milliseconds time_left(JobDeadline deadline, std::chrono::milliseconds limit) {
  const auto now = Clock::now();
  if (deadline <= now) return std::chrono::milliseconds(0);
  if (deadline - now >= limit) return limit;
  return std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
}

bool is_valid_container_name(std::string_view name) {
  if (name.empty() || name.size() > 253 || !std::isalnum(static_cast<unsigned char>(name.front()))) return false;
  for (char c : name)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') return false;
  return true;
}

namespace {

// The last non-empty line: podman puts its error message there.
std::string last_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  const auto nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

// podman names an image pulled from an oci: layout after the path it was given, and image names are lower case:
// a new private directory /tmp/gpuckpt-load-<hex> (mode 0700; mkdir refuses any name that exists, a planted link
// included) holds the symlink "layout" -> `layout`, a path podman can name the image by whatever `layout` is.
Result<fs::path> lower_case_path_to(const fs::path& layout) {
  std::random_device random;
  for (int attempt = 0; attempt < 8; ++attempt) {
    char name[64];
    std::snprintf(name, sizeof name, "/tmp/gpuckpt-load-%08x%08x", random(), random());
    if (::mkdir(name, 0700) != 0) {
      if (errno == EEXIST) continue;
      return make_error(std::string("cannot create ") + name + ": " + std::strerror(errno), errno);
    }
    const fs::path dir(name);
    std::error_code ec;
    fs::create_symlink(fs::absolute(layout), dir / "layout", ec);
    if (ec) {
      std::error_code ignored;
      fs::remove_all(dir, ignored);
      return make_error("cannot link " + layout.string() + " from " + dir.string() + ": " + ec.message(), EIO);
    }
    return dir / "layout";
  }
  return make_error("cannot create a private directory /tmp/gpuckpt-load-*: every name tried exists", EEXIST);
}

class PodmanRuntime final : public ContainerRuntime {
 public:
  explicit PodmanRuntime(PodmanOptions options) : options_(std::move(options)) {}

  std::string name() const override { return "podman"; }

  Result<RuntimeContainer> find(const ContainerRef& ref) override {
    if (!is_valid_container_name(ref.container))
      return make_error("container name '" + ref.container + "' is not valid (letters, digits, '_', '.', '-')");
    GPUCKPT_TRY(const auto r,
                podman({"container", "inspect", "--format", "json", ref.container}, std::chrono::seconds(30)));
    if (r.exit_code != 0)
      return make_error("no container '" + ref.container + "' in podman: " + last_line(r.err), ENOENT);
    const auto json = nlohmann::json::parse(r.out, nullptr, false);
    if (json.is_discarded() || !json.is_array() || json.empty())
      return make_error("podman inspect " + ref.container + " returned unexpected output", EIO);
    return from_inspect(json[0]);
  }

  Result<std::vector<RuntimeContainer>> list() override {
    GPUCKPT_TRY(const auto r, podman({"ps", "--no-trunc", "--format", "json"}, std::chrono::seconds(30)));
    if (r.exit_code != 0) return make_error("podman ps failed: " + last_line(r.err), EIO);
    const auto json = nlohmann::json::parse(r.out, nullptr, false);
    if (json.is_discarded() || !json.is_array()) return make_error("podman ps returned unexpected output", EIO);
    std::vector<RuntimeContainer> out;
    for (const auto& c : json) {
      RuntimeContainer rc;
      rc.id = c.value("Id", "");
      const auto names = c.value("Names", std::vector<std::string>{});
      rc.name = names.empty() ? "" : names.front();
      rc.state = c.value("State", "");
      rc.pid = c.value("Pid", 0);
      out.push_back(rc);
    }
    return out;
  }

  Result<void> checkpoint(const RuntimeContainer& container, const fs::path& archive, JobDeadline deadline) override {
    // Uncompressed: the agent compresses the archive as it stores it, once.
    const auto timeout = time_left(deadline, options_.timeout);
    if (timeout.count() == 0) return no_time_left("checkpoint of " + container.name);
    GPUCKPT_TRY(const auto r, podman({"container", "checkpoint", "--compress", "none", "--export", archive.string(),
                                      container.id},
                                     timeout));
    if (r.timed_out)   // putting the container back is not cut short: a stopped workload must run again
      return make_error("podman checkpoint of " + container.name + " timed out after " + seconds(timeout) +
                        put_back(container), ETIMEDOUT);
    if (r.exit_code != 0) {
      // podman's error names runc and "exit status 1"; why CRIU failed (a refused GPU job, an open TCP
      // connection) is in CRIU's log in the container's directory.
      const fs::path dir = static_dir(container);
      const std::string criu = dir.empty() ? "" : criu_log_reasons(dir / "dump.log");
      return make_error("podman checkpoint of " + container.name + " failed: " + last_line(r.err) +
                            (criu.empty() ? "" : "; CRIU said: " + criu) + put_back(container),
                        EIO);
    }
    return {};
  }

  // `podman pull oci:PATH:TAG` copies the layout into podman's storage under a name made from PATH
  // (localhost/<path>:latest, see lower_case_path_to); the image is then tagged with the name pods and `podman
  // container restore` use, and the path's name dropped, so the layout can be removed. Bounded by the runtime
  // timeout (a GPU checkpoint is big).
  Result<std::string> load_image(const fs::path& layout, const std::string& tag, JobDeadline deadline) override {
    const std::string name = checkpoint_image_name(tag);
    const auto timeout = time_left(deadline, options_.timeout);
    if (timeout.count() == 0) return no_time_left("pull of the checkpoint image " + layout.string());
    GPUCKPT_TRY(const fs::path path, lower_case_path_to(layout));
    auto pulled = podman({"pull", "-q", "oci:" + path.string() + ":" + tag}, timeout);
    auto loaded = name_pulled(pulled, layout, path, name, timeout);
    std::error_code ec;
    fs::remove_all(path.parent_path(), ec);   // the link, not what it points at
    return loaded;
  }

  Result<RuntimeContainer> restore(const fs::path& archive, const std::string& new_name, JobDeadline deadline) override {
    // --print-stats: the restore's times (CRIU's, runc's, podman's) and the container's id, as one JSON document.
    std::vector<std::string> args = {"container", "restore", "--import", archive.string(), "--print-stats"};
    if (!new_name.empty()) {
      if (!is_valid_container_name(new_name)) return make_error("container name '" + new_name + "' is not valid");
      args.insert(args.end(), {"--name", new_name});
    }
    const auto timeout = time_left(deadline, options_.timeout);
    if (timeout.count() == 0) return no_time_left("restore of " + archive.string());
    GPUCKPT_TRY(const auto r, podman(args, timeout));
    if (r.timed_out)
      return make_error("podman restore of " + archive.string() + " timed out after " + seconds(timeout), ETIMEDOUT);
    if (r.exit_code != 0)
      return make_error("podman restore of " + archive.string() + " failed: " + last_line(r.err), EIO);
    auto stats = parse_podman_restore_stats(r.out);
    if (!stats) log::warn("podman restore of " + archive.string() + ": " + stats.error().message +
                          "; its id is taken from its last line of output");
    ContainerRef ref;
    ref.container = stats ? stats->container_id : last_line(r.out);
    auto restored = find(ref);
    if (restored && stats) restored->restore_stats = std::move(*stats);
    return restored;
  }

  // A checkpoint that failed after CRIU's dump (export to a full disk, a removed directory, an archive the agent
  // could not keep) leaves the container stopped, with the dump still in podman's own storage: restoring it in
  // place puts the workload back. A podman that was killed or timed out may leave the dump running in the
  // background, and podman's recorded state lags behind, so the container is watched (30 s at most) until it
  // settles: stopped (then restored in place, retried while podman still calls it busy) or running with its init
  // alive and not held by CRIU for 1.5 s.
  // Returns what happened, for the job's error.
  std::string put_back(const RuntimeContainer& container) override {
    ContainerRef ref;
    ref.container = container.id;
    int free_running = 0;
    std::string last_state, last_error;
    for (int i = 0; i < 60; ++i) {
      if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(500));
      auto now = find(ref);
      if (!now) return "; its state is unknown now: " + now.error().message;
      last_state = now->state;
      if (now->state == "running") {
        free_running = runs_freely(now->pid) ? free_running + 1 : 0;
        if (free_running >= 3) return "; the container is still running";
        continue;
      }
      free_running = 0;
      auto r = podman({"container", "restore", container.id}, options_.timeout);
      if (r && !r->timed_out && r->exit_code == 0) {
        log::warn("checkpoint of " + container.name + " failed after the dump; restored it in place");
        return "; the container was stopped by the dump and has been restored in place (it runs on)";
      }
      last_error = r ? last_line(r->err) : r.error().message;
    }
    return "; the container is " + last_state + " and could not be restored in place" +
           (last_error.empty() ? std::string(" within 30 s") : " (" + last_error + ")") +
           ": check it, or restore it with `podman container restore " + container.id + "`";
  }

 private:
  Result<std::string> name_pulled(const Result<CommandResult>& pulled, const fs::path& layout, const fs::path& path,
                                  const std::string& name, std::chrono::milliseconds timeout) {
    GPUCKPT_TRY_VOID(pulled);
    if (pulled->timed_out)
      return make_error("podman pull of the checkpoint image " + layout.string() + " timed out after " +
                        seconds(timeout), ETIMEDOUT);
    const std::string id = last_line(pulled->out);
    if (pulled->exit_code != 0 || id.empty())
      return make_error("podman pull of the checkpoint image " + layout.string() + " failed: " + last_line(pulled->err),
                        EIO);
    GPUCKPT_TRY(const auto tagged, podman({"tag", id, name}, std::chrono::seconds(30)));
    if (tagged.exit_code != 0)
      return make_error("podman tag " + id.substr(0, 12) + " " + name + " failed: " + last_line(tagged.err), EIO);
    auto untagged = podman({"untag", id, "localhost" + path.string() + ":latest"}, std::chrono::seconds(30));
    if (!untagged || untagged->exit_code != 0)
      log::warn("checkpoint image " + name + ": the name podman gave the pulled layout stays (untag failed)");
    return name;
  }

  static std::string seconds(std::chrono::milliseconds timeout) {
    return std::to_string((timeout.count() + 999) / 1000) + " s";
  }
  static Error no_time_left(const std::string& what) {
    return make_error("podman " + what + " not started: the job has no time left", ETIMEDOUT);
  }

  // The init process exists and is neither seized by CRIU ("t (tracing stop)") nor a zombie.
  static bool runs_freely(int pid) {
    if (pid <= 0) return false;
    std::ifstream status("/proc/" + std::to_string(pid) + "/status");
    std::string line;
    while (std::getline(status, line))
      if (line.rfind("State:", 0) == 0)
        return line.find("t (tracing stop)") == std::string::npos && line.find("Z (zombie)") == std::string::npos;
    return false;
  }

  Result<CommandResult> podman(std::vector<std::string> args, std::chrono::milliseconds timeout) {
    std::vector<std::string> argv = {options_.podman};
    if (!options_.hooks_dir.empty()) argv.insert(argv.end(), {"--hooks-dir", options_.hooks_dir});
    argv.insert(argv.end(), args.begin(), args.end());
    std::string line = "run:";
    for (const auto& a : argv) line += " " + a;
    log::debug(line);
    return run_command(argv, timeout);
  }

  // podman's directory of a container's own files (userdata: CRIU's dump.log and restore.log are there); empty
  // when podman does not say.
  fs::path static_dir(const RuntimeContainer& container) {
    auto r = podman({"container", "inspect", "--format", "{{.StaticDir}}", container.id}, std::chrono::seconds(30));
    if (!r || r->exit_code != 0) return {};
    return fs::path(last_line(r->out));
  }

  static RuntimeContainer from_inspect(const nlohmann::json& c) {
    RuntimeContainer rc;
    rc.id = c.value("Id", "");
    rc.name = c.value("Name", "");
    if (c.contains("State") && c["State"].is_object()) {
      rc.state = c["State"].value("Status", "");
      rc.pid = c["State"].value("Pid", 0);
    }
    return rc;
  }

  PodmanOptions options_;
};

}  // namespace

std::unique_ptr<ContainerRuntime> make_podman_runtime(PodmanOptions options) {
  return std::make_unique<PodmanRuntime>(std::move(options));
}

}  // namespace gpuckpt
