// The parallel restore across real processes, as CRIU runs it — init and POST_FORKING in the
// main process, RESTORE_EXT_FILE in a forked child, the main process's worker filling the BOs through the dma-buf
// fds the child sent, RESUME_DEVICES_LATE back in the main process. The child checks the contents of its own
// restored BOs and reports through its exit status (Catch2 is not used after fork).
// Under real CRIU the child does not keep the socket it inherited: CRIU closes or reuses every fd number of the
// restored process that is not one of its service fds before it restores files. CRIU 4.2 and later keep fds for
// the restored processes in their fdstore (a service fd); the cases below model both.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch_test_macros.hpp>
#include <memory>

#include "test/amd/harness.h"

namespace gpuckpt::amd::test {
namespace {

namespace fs = std::filesystem;

// Exit codes of the child, so a failure says where it stopped.
enum ChildExit : int { kChildOk = 0, kRestoreFailed = 10, kNoGo = 11, kContentsDiffer = 12, kReuseFailed = 13 };

// CRIU's fdstore as far as the backend relies on it: CRIU keeps the fd at a number of its own (a service fd,
// high, left alone by its fd handling in the restored process), and any process of the tree gets a new fd of the
// same file from it by id.
FdStore service_fd_store(std::shared_ptr<std::vector<int>> kept) {
  FdStore store;
  store.add = [kept](int fd) -> Result<int> {
    const int at = ::fcntl(fd, F_DUPFD_CLOEXEC, 900);
    if (at < 0) return make_error("test fdstore: dup failed", errno);
    kept->push_back(at);
    return static_cast<int>(kept->size() - 1);
  };
  store.get = [kept](int id) -> Result<int> {
    if (id < 0 || static_cast<std::size_t>(id) >= kept->size()) return make_error("test fdstore: no such id", ENOENT);
    const int fd = ::fcntl((*kept)[static_cast<std::size_t>(id)], F_DUPFD_CLOEXEC, 3);
    if (fd < 0) return make_error("test fdstore: dup failed", errno);
    return fd;
  };
  return store;
}

std::vector<int> open_sockets_below(int limit) {
  std::vector<int> fds;
  for (const auto& e : fs::directory_iterator("/proc/self/fd")) {
    const int fd = std::stoi(e.path().filename().string());
    struct stat st {};
    if (fd < limit && ::fstat(fd, &st) == 0 && S_ISSOCK(st.st_mode)) fds.push_back(fd);
  }
  return fds;
}

[[noreturn]] void run_child(Node& node, plugin::Backend& backend, const App& app, int report_fd, int go_fd,
                            int reuse_fd) {
  // As CRIU does before it restores files: the number of our inherited socket now holds one of the process's files.
  if (reuse_fd >= 0) {
    const int other = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    if (other < 0 || ::dup2(other, reuse_fd) < 0) ::_exit(kReuseFailed);
    ::close(other);
  }
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

struct ForkedRestore {
  bool restored_in_child = false;
  std::uint64_t bytes_moved_by_parent = 0;
  std::uint64_t bytes_total = 0;
  int child_exit = -1;
};

// One restore of a 2-GPU process: init and POST_FORKING here, RESTORE_EXT_FILE in a forked child (whose
// inherited sending end is first replaced when `reuse_sender`), RESUME_DEVICES_LATE here.
ForkedRestore forked_restore(Scenario& s, std::optional<FdStore> store, bool reuse_sender) {
  ForkedRestore out;
  kills_requested().clear();
  const auto before = open_sockets_below(900);
  auto backend = make_backend(s.node, s.images, s.config, nullptr, std::move(store));
  s.node.kfd->set_calling_pid(kCriuPid);
  REQUIRE(backend->init(criu::kStageRestore) == 0);
  std::vector<int> created;
  for (int fd : open_sockets_below(900)) {
    if (std::find(before.begin(), before.end(), fd) == before.end()) created.push_back(fd);
  }
  REQUIRE(created.size() == 2);   // the socket pair; the sending end is created second
  REQUIRE(backend->post_forking() == 0);
  const std::uint64_t bytes_before = s.node.kfd->bo_bytes_moved();

  int report[2], go[2];
  REQUIRE(::pipe2(report, O_CLOEXEC) == 0);
  REQUIRE(::pipe2(go, O_CLOEXEC) == 0);
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    run_child(s.node, *backend, s.app, report[1], go[0],
              reuse_sender ? *std::max_element(created.begin(), created.end()) : -1);
  }
  char restored = 0;
  REQUIRE(::read(report[0], &restored, 1) == 1);
  out.restored_in_child = restored == 1;
  // The child's RESTORE is in its own copy of the simulation: the parent's KFD has no such process (ESRCH), so
  // RESUME_DEVICES_LATE declines after it stopped the worker and found every job done.
  CHECK(backend->resume_devices_late(s.pid) == -ENOTSUP);
  CHECK(kills_requested().empty());
  out.bytes_moved_by_parent = s.node.kfd->bo_bytes_moved() - bytes_before;
  for (const auto& [va, bytes] : s.app.contents) out.bytes_total += bytes.size();
  REQUIRE(::write(go[1], "g", 1) == 1);
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  out.child_exit = WEXITSTATUS(status);
  backend->fini(criu::kStageRestore, 0);
  for (int fd : {report[0], report[1], go[0], go[1]}) ::close(fd);
  return out;
}

}  // namespace

TEST_CASE("Parallel restore across processes: the forked child's BOs are filled by the main process's worker",
          "[unit]") {
  Scenario s(make_gpus(2), 2100, 1 << 20, 65536, config_with(256 << 10, true));
  REQUIRE(s.dumped == 0);
  const ForkedRestore r = forked_restore(s, std::nullopt, false);
  CHECK(r.restored_in_child);
  CHECK(s.logs.contains("parallel restore worker stopped after 1 job(s)"));
  // The worker, in this process, moved every byte; the child restored none itself.
  CHECK(r.bytes_moved_by_parent == r.bytes_total);
  CHECK(r.child_exit == kChildOk);
}

TEST_CASE("Parallel restore through CRIU's fdstore survives CRIU reusing the inherited socket's fd number",
          "[unit]") {
  Scenario s(make_gpus(2), 2110, 1 << 20, 65536, config_with(256 << 10, true));
  REQUIRE(s.dumped == 0);
  auto kept = std::make_shared<std::vector<int>>();
  const ForkedRestore r = forked_restore(s, service_fd_store(kept), true);
  REQUIRE(kept->size() == 1);   // the sending end, put in the store at init(RESTORE)
  CHECK(s.logs.contains("parallel restore socket kept in CRIU's fdstore"));
  CHECK(r.restored_in_child);
  CHECK(s.logs.contains("parallel restore worker stopped after 1 job(s)"));
  CHECK(r.bytes_moved_by_parent == r.bytes_total);
  CHECK(r.child_exit == kChildOk);
  for (int fd : *kept) ::close(fd);
}

TEST_CASE("Without an fdstore (CRIU 4.1) a reused socket fd number makes the child restore its BOs itself",
          "[unit]") {
  Scenario s(make_gpus(2), 2120, 1 << 20, 65536, config_with(256 << 10, true));
  REQUIRE(s.dumped == 0);
  const ForkedRestore r = forked_restore(s, std::nullopt, true);
  CHECK(s.logs.contains("inherited by the restored processes (no fdstore in this CRIU)"));
  CHECK(r.restored_in_child);
  CHECK(s.logs.contains("parallel restore worker stopped after 0 job(s)"));
  CHECK(r.bytes_moved_by_parent == 0);
  CHECK(r.child_exit == kChildOk);   // restored in-process, contents right
}

}  // namespace gpuckpt::amd::test
