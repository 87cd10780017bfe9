// Issue 25, gap 7: the parallel restore across real processes, as CRIU runs it — init and POST_FORKING in the main
// process, RESTORE_EXT_FILE in a forked child that inherited the socket, the main process's worker filling the BOs
// through the dma-buf fds the child sent, RESUME_DEVICES_LATE back in the main process. The child checks the
// contents of its own restored BOs and reports through its exit status (Catch2 is not used after fork).
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>

#include "test/amd/harness.h"

namespace gpuckpt::amd::test {
namespace {

// Exit codes of the child, so a failure says where it stopped.
enum ChildExit : int { kChildOk = 0, kRestoreFailed = 10, kNoGo = 11, kContentsDiffer = 12 };

[[noreturn]] void run_child(Node& node, plugin::Backend& backend, const App& app, int report_fd, int go_fd) {
  node.kfd->set_calling_pid(app.pid);
  bool retry = false;
  const int kfd_fd = backend.restore_ext_file(kKfdImageId, &retry);
  const char restored = kfd_fd >= 0 ? 1 : 0;
  (void)::write(report_fd, &restored, 1);
  if (kfd_fd < 0) ::_exit(kRestoreFailed);
  char go = 0;
  if (::read(go_fd, &go, 1) != 1) ::_exit(kNoGo);
  for (const auto& [va, bytes] : app.contents) {
    if (node.kfd->app_read_bo(app.pid, va) != bytes) ::_exit(kContentsDiffer);
  }
  ::_exit(kChildOk);
}

}  // namespace

TEST_CASE("Parallel restore across processes: the forked child's BOs are filled by the main process's worker",
          "[unit]") {
  Scenario s(make_gpus(2), 2100, 1 << 20, 65536, config_with(256 << 10, true));
  REQUIRE(s.dumped == 0);
  kills_requested().clear();
  auto backend = make_backend(s.node, s.images, s.config);
  s.node.kfd->set_calling_pid(kCriuPid);
  REQUIRE(backend->init(criu::kStageRestore) == 0);
  REQUIRE(backend->post_forking() == 0);
  const std::uint64_t bytes_before = s.node.kfd->bo_bytes_moved();

  int report[2], go[2];
  REQUIRE(::pipe2(report, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(go, O_CLOEXEC) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) run_child(s.node, *backend, s.app, report[1], go[0]);

  char restored = 0;
  REQUIRE(::read(report[0], &restored, 1) == 1);
  CHECK(restored == 1);
  // The child's RESTORE is in its own copy of the simulation: the parent's KFD has no such process (ESRCH), so
  // RESUME_DEVICES_LATE declines after it stopped the worker and found every job done.
  CHECK(backend->resume_devices_late(s.pid) == -ENOTSUP);
  CHECK(kills_requested().empty());
  CHECK(s.logs.contains("parallel restore worker stopped after 1 job(s)"));
  // The worker, in this process, moved every byte; the child restored none itself.
  std::uint64_t total = 0;
  for (const auto& [va, bytes] : s.app.contents) total += bytes.size();
  CHECK(s.node.kfd->bo_bytes_moved() - bytes_before == total);
  REQUIRE(::write(go[1], "g", 1) == 1);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == kChildOk);
  backend->fini(criu::kStageRestore, 0);
  for (int fd : {report[0], report[1], go[0], go[1]}) ::close(fd);
}

}  // namespace gpuckpt::amd::test
