// The hook binary's exit policy for precreate, run as a runtime runs it: the config on stdout is all or nothing.
#include <catch2/catch_test_macros.hpp>

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

#include "test/support/temp_dir.h"

namespace {

struct HookRun {
  int status = -1;
  std::string stdout_text;
};

// Runs the hook with `args`, writes `input` to its stdin and then keeps stdin open for `hold_open` (a runtime
// that is slow to finish the config), collects stdout, and waits at most 60 s for it to exit (a hang guard).
HookRun run_hook(const std::vector<std::string>& args, const std::string& input, std::chrono::seconds hold_open) {
  int in[2], out[2];
  REQUIRE(::pipe2(in, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
  const pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    std::vector<char*> argv;
    static std::string bin = GPUCKPT_HOOK_BIN;
    argv.push_back(bin.data());
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execv(bin.c_str(), argv.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  HookRun run;
  std::thread reader([&] {
    char chunk[1 << 16];
    for (ssize_t n; (n = ::read(out[0], chunk, sizeof chunk)) > 0;) run.stdout_text.append(chunk, n);
  });
  ::signal(SIGPIPE, SIG_IGN);
  for (std::size_t done = 0; done < input.size();) {
    const ssize_t n = ::write(in[1], input.data() + done, input.size() - done);
    if (n <= 0) break;   // the hook exited
    done += static_cast<std::size_t>(n);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  const auto release = std::chrono::steady_clock::now() + hold_open;
  bool stdin_open = true;
  for (;;) {
    if (stdin_open && std::chrono::steady_clock::now() >= release) {
      ::close(in[1]);
      stdin_open = false;
    }
    if (::waitpid(pid, &run.status, WNOHANG) == pid) break;
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &run.status, 0);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (stdin_open) ::close(in[1]);
  reader.join();
  ::close(out[0]);
  return run;
}

}  // namespace

TEST_CASE("precreate passes a config through whole, and fails rather than hand over part of one", "[unit]") {
  gpuckpt::test::TempDir state("gpuckpt-hook-main");
  const std::vector<std::string> args = {"--state-dir", state.path.string(), "--timeout-ms", "1000", "precreate"};
  const std::string small = R"({"ociVersion":"1.0.2","process":{"args":["sh"]},"annotations":{}})";
  auto whole = run_hook(args, small, std::chrono::seconds(0));
  REQUIRE(WIFEXITED(whole.status));
  CHECK(WEXITSTATUS(whole.status) == 0);
  CHECK(whole.stdout_text == small);

  // Over 16 MiB is passed through as it streams; the runtime holds the rest back past the time limit, so the hook
  // cannot finish: it must exit non-zero (before the fix it exited 0 with 16 MiB of a config on stdout).
  const std::string large = "{\"annotations\":{\"pad\":\"" + std::string(17u << 20, 'x');
  auto cut = run_hook(args, large, std::chrono::seconds(4));
  REQUIRE(WIFEXITED(cut.status));
  CHECK(WEXITSTATUS(cut.status) != 0);
}
