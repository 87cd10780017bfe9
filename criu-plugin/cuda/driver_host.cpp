#include "criu-plugin/cuda/driver_host.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "base/host_root.h"
#include "gpu/inventory.h"
#include "gpu/properties_record.h"
#include "criu-plugin/cuda/frozen_cgroup.h"
#include "criu-plugin/cuda/memory_copy.h"
#include "criu-plugin/cuda/process_info.h"

namespace gpuckpt::cuda {
namespace {

// The wire between CRIU and the host: one SOCK_SEQPACKET control socket (messages arrive whole and in order).
// A call carries, as SCM_RIGHTS, one end of a socket pair made for it; the host answers on that pair, so
// concurrent calls never share a reply channel.
enum class Op : std::uint32_t { Lock = 1, Checkpoint, Restore, Unlock, GetState, GetRestoreThreadId, Track, Done, Staged,
                                Inventory };

// The inventory travels as the GPU record's JSON, one message after the reply; a node's is a few KiB.
inline constexpr std::size_t kMaxPayload = 128 * 1024;

inline constexpr std::size_t kMaxPairs = 64;   // a node has at most 16 GPUs; pairs cover each one seen

struct Request {
  Op op;
  std::int32_t pid;
  std::uint32_t arg;   // lock timeout (ms); initial state for Track; vpid for Staged
  std::uint32_t pair_count;
  UuidPair pairs[kMaxPairs];
};
struct Reply {
  std::int32_t result;   // CUresult; for the host's greeting, 0 or an errno
  std::int32_t value;    // the state or thread id asked for
  char text[512];        // the CUresult's name; the greeting's error message
};
static_assert(std::is_trivially_copyable_v<Request> && std::is_trivially_copyable_v<Reply>);

void copy_text(char (&dest)[512], const std::string& text) {
  std::snprintf(dest, sizeof dest, "%s", text.c_str());
}

bool send_all(int fd, const void* data, std::size_t size, int pass_fd = -1) {
  iovec iov{const_cast<void*>(data), size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  if (pass_fd >= 0) {
    std::memset(control, 0, sizeof control);
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(cmsg), &pass_fd, sizeof(int));
  }
  for (;;) {
    ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    return n == static_cast<ssize_t>(size);
  }
}

// Receives one message of exactly `size` bytes (and the fd passed with it, if `passed_fd`); false at EOF/error
// (and, with MSG_DONTWAIT in `flags`, when none is there).
bool receive(int fd, void* data, std::size_t size, int* passed_fd = nullptr, int flags = 0) {
  iovec iov{data, size};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | flags);
  while (n < 0 && errno == EINTR);
  if (passed_fd != nullptr) {
    *passed_fd = -1;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) std::memcpy(passed_fd, CMSG_DATA(c), sizeof(int));
  }
  return n == static_cast<ssize_t>(size) && (msg.msg_flags & MSG_TRUNC) == 0;
}

// Receives one message of `size` bytes as text.
bool receive_text(int fd, std::size_t size, std::string* text) {
  text->assign(size, '\0');
  return receive(fd, text->data(), size);
}

// ---- in the host process ------------------------------------------------------------------------------------

// Answers Op::Inventory on `reply_fd`: the reply (value = payload size), then the record JSON.
void serve_inventory(const DriverHost::InventoryReader& read_node, int reply_fd) {
  Reply reply{};
  std::string payload;
  auto node = read_node();
  if (!node) {
    reply.result = node.error().errno_value;
    copy_text(reply.text, node.error().message);
  } else {
    GpuPropertiesRecord record;
    record.node = std::move(*node);
    payload = to_json(record).dump();
    if (payload.size() > kMaxPayload) {
      reply.result = EOVERFLOW;
      copy_text(reply.text, "the node inventory is larger than " + std::to_string(kMaxPayload) + " bytes");
      payload.clear();
    }
    reply.value = static_cast<std::int32_t>(payload.size());
  }
  if (send_all(reply_fd, &reply, sizeof reply) && !payload.empty()) (void)send_all(reply_fd, payload.data(), payload.size());
}

Reply serve(Driver& driver, const Request& request) {
  Reply reply{};
  int rc = kHostLost;
  switch (request.op) {
    case Op::Lock: rc = driver.lock(request.pid, request.arg); break;
    case Op::Checkpoint: rc = driver.checkpoint(request.pid); break;
    case Op::Restore:
      rc = driver.restore(request.pid, std::vector<UuidPair>(request.pairs,
                                                             request.pairs + std::min<std::size_t>(request.pair_count, kMaxPairs)));
      break;
    case Op::Unlock: rc = driver.unlock(request.pid); break;
    case Op::GetState: {
      ProcessState state = ProcessState::Failed;
      rc = driver.get_state(request.pid, &state);
      reply.value = static_cast<std::int32_t>(state);
      break;
    }
    case Op::GetRestoreThreadId: rc = driver.get_restore_thread_id(request.pid, &reply.value); break;
    case Op::Track:
    case Op::Done:
    case Op::Staged:
    case Op::Inventory: break;   // answered elsewhere
  }
  reply.result = rc;
  copy_text(reply.text, driver.describe(rc));
  return reply;
}

// The staged memory of the processes CRIU left behind, back from the images (the driver's restore reads it).
// Returns the pids whose memory could not be put back.
std::set<int> refill(const std::map<int, int>& staged, int image_dir_fd, int log_fd) {
  std::set<int> failed;
  if (staged.empty()) return failed;
  std::vector<ProcessMemory> jobs;
  for (const auto& [pid, vpid] : staged)
    if (process_alive(pid)) jobs.push_back({pid, vpid, {}, nullptr});
  auto settings = gpu_image::settings_from_env();
  if (!settings) settings = gpu_image::Settings{};
  if (settings->threads == 0) settings->threads = 4;
  auto filled = fill_from_images(jobs, image_dir_fd, *settings);
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    if (filled[i]) {
      dprintf(log_fd, "pid %d: GPU memory filled back from %s\n", jobs[i].pid,
              gpu_image::file_name(jobs[i].vpid).c_str());
      continue;
    }
    failed.insert(jobs[i].pid);
    dprintf(log_fd, "pid %d: its GPU memory could not be put back (%s); left checkpointed, not restored with "
                    "wrong data\n", jobs[i].pid, filled[i].error().message.c_str());
  }
  return failed;
}

// CRIU ended without done(): put every tracked process back where it was before the dump.
void guard(Driver& driver, const std::map<int, ProcessState>& tracked, const std::map<int, int>& staged,
           int image_dir_fd, int log_fd) {
  dprintf(log_fd, "gpuckpt guardian: CRIU ended without finishing the dump; returning %zu process(es) to their "
                  "state before the dump\n", tracked.size());
  // First let the processes run again: CRIU froze their cgroup for the dump (runc's freeze_cgroup) and thaws
  // it only when it finishes; the driver's restore needs the process running.
  for (const auto& [pid, initial] : tracked)
    for (const auto& line : thaw_frozen_cgroups(pid)) dprintf(log_fd, "pid %d: %s\n", pid, line.c_str());
  const std::set<int> unfilled = refill(staged, image_dir_fd, log_fd);
  for (const auto& [pid, initial] : tracked) {
    if (unfilled.count(pid) != 0) continue;
    // CRIU's death detaches its tracees; give the kernel a moment to let them run again.
    for (int attempt = 0; attempt < 50 && process_alive(pid); ++attempt) {
      ProcessState now = ProcessState::Failed;
      int rc = driver.get_state(pid, &now);
      if (rc != kCudaSuccess) {
        dprintf(log_fd, "pid %d: cannot read its CUDA state: %s\n", pid, driver.describe(rc).c_str());
        usleep(100000);
        continue;
      }
      if (now == ProcessState::Checkpointed && initial != ProcessState::Checkpointed) {
        rc = driver.restore(pid, {});
        dprintf(log_fd, "pid %d: restore: %s\n", pid, rc == 0 ? "ok" : driver.describe(rc).c_str());
        if (rc != kCudaSuccess) usleep(100000);
        continue;   // read the state again: now locked
      }
      if (now == ProcessState::Locked && initial == ProcessState::Running) {
        rc = driver.unlock(pid);
        dprintf(log_fd, "pid %d: unlock: %s\n", pid, rc == 0 ? "ok" : driver.describe(rc).c_str());
        if (rc != kCudaSuccess) {
          usleep(100000);
          continue;
        }
        now = ProcessState::Running;
      }
      dprintf(log_fd, "pid %d: now %s\n", pid, to_string(now));
      break;
    }
  }
}

[[noreturn]] void run_host(int control_fd, int log_fd, int image_dir_fd, const DriverHost::DriverFactory& factory,
                           DriverHost::Mode mode, const DriverHost::InventoryReader& read_node) {
  auto loaded = factory();
  Reply greeting{};
  greeting.result = loaded ? 0 : loaded.error().errno_value;
  if (!loaded) copy_text(greeting.text, loaded.error().message);
  if (!send_all(control_fd, &greeting, sizeof greeting) || !loaded) _exit(0);
  Driver& driver = **loaded;

  std::map<int, ProcessState> tracked;
  std::map<int, int> staged;   // pid -> vpid of its GPU memory image
  bool finished = false;
  std::vector<std::thread> calls;
  for (;;) {
    Request request{};
    int reply_fd = -1;
    if (!receive(control_fd, &request, sizeof request, &reply_fd)) {
      if (reply_fd >= 0) ::close(reply_fd);
      break;
    }
    if (request.op == Op::Track) {
      tracked[request.pid] = static_cast<ProcessState>(request.arg);
    } else if (request.op == Op::Staged) {
      staged[request.pid] = static_cast<int>(request.arg);
    } else if (request.op == Op::Done) {
      finished = true;
    } else if (request.op == Op::Inventory && reply_fd >= 0) {
      calls.emplace_back([&read_node, reply_fd] {
        serve_inventory(read_node, reply_fd);
        ::close(reply_fd);
      });
      continue;
    } else if (reply_fd >= 0) {
      calls.emplace_back([&driver, request, reply_fd, log_fd] {
        Reply reply = serve(driver, request);
        const bool delivered = send_all(reply_fd, &reply, sizeof reply);
        ::close(reply_fd);
        // The caller gave up waiting (its deadline passed) and shut its end: a lock granted now would hold
        // the process with nobody left to release it.
        if (!delivered && request.op == Op::Lock && reply.result == kCudaSuccess) {
          const int rc = driver.unlock(request.pid);
          dprintf(log_fd, "pid %d: the driver granted the lock after its caller had given up; unlock: %s\n",
                  request.pid, rc == kCudaSuccess ? "ok" : driver.describe(rc).c_str());
        }
      });
      continue;
    }
    if (reply_fd >= 0) ::close(reply_fd);
  }
  // A call still running (a checkpoint CRIU did not wait for) finishes before the guardian looks at its process.
  for (auto& call : calls) call.join();
  if (mode == DriverHost::Mode::Dump && !finished && !tracked.empty()) guard(driver, tracked, staged, image_dir_fd, log_fd);
  _exit(0);
}

// ---- in CRIU ------------------------------------------------------------------------------------------------

class RemoteDriver final : public Driver {
 public:
  explicit RemoteDriver(int control_fd) : control_fd_(control_fd) {}

  void answer_by(std::optional<std::chrono::steady_clock::time_point> deadline) {
    std::lock_guard lock(deadline_mutex_);
    deadline_ = deadline;
  }

  int lock(int pid, unsigned timeout_ms) override { return call(Op::Lock, pid, timeout_ms).result; }
  int checkpoint(int pid) override { return call(Op::Checkpoint, pid).result; }
  int restore(int pid, const std::vector<UuidPair>& pairs) override {
    if (pairs.size() > kMaxPairs) return 1;   // CUDA_ERROR_INVALID_VALUE: no node has that many GPUs
    return call(Op::Restore, pid, 0, pairs).result;
  }
  int unlock(int pid) override { return call(Op::Unlock, pid).result; }
  int get_state(int pid, ProcessState* state) override {
    Reply reply = call(Op::GetState, pid);
    if (reply.result == kCudaSuccess) *state = static_cast<ProcessState>(reply.value);
    return reply.result;
  }
  int get_restore_thread_id(int pid, int* tid) override {
    Reply reply = call(Op::GetRestoreThreadId, pid);
    if (reply.result == kCudaSuccess) *tid = reply.value;
    return reply.result;
  }
  std::string describe(int cuda_result) override {
    if (cuda_result == kHostLost) return "the gpuckpt driver host process is gone (" + std::to_string(kHostLost) + ")";
    if (cuda_result == kNoAnswer)
      return "no answer from the driver before the deadline; the call was abandoned (" + std::to_string(kNoAnswer) + ")";
    std::lock_guard lock(names_mutex_);
    auto it = names_.find(cuda_result);
    return it != names_.end() ? it->second : "CUresult (" + std::to_string(cuda_result) + ")";
  }

  Result<NodeInventory> inventory() {
    Request request{};
    request.op = Op::Inventory;
    const int channel = send_call(request);
    Reply reply{};
    std::string payload;
    bool received = channel >= 0 && receive(channel, &reply, sizeof reply);
    if (received && reply.result == 0)
      received = reply.value > 0 && static_cast<std::size_t>(reply.value) <= kMaxPayload &&
                 receive_text(channel, static_cast<std::size_t>(reply.value), &payload);
    if (channel >= 0) ::close(channel);
    if (!received) return make_error("the gpuckpt driver host did not answer the inventory request", EIO);
    if (reply.result != 0)
      return make_error(std::string(reply.text, strnlen(reply.text, sizeof reply.text)), reply.result);
    GPUCKPT_TRY(auto record, parse_record(payload, "the driver host's node inventory"));
    return std::move(record.node);
  }

  // Messages that need no answer (Track, Done), in order with the calls.
  void notify(Op op, int pid = 0, std::uint32_t arg = 0) {
    Request request{};
    request.op = op;
    request.pid = pid;
    request.arg = arg;
    std::lock_guard lock(send_mutex_);
    (void)send_all(control_fd_, &request, sizeof request);
  }

 private:
  Reply call(Op op, int pid, std::uint32_t arg = 0, const std::vector<UuidPair>& pairs = {}) {
    Reply reply{};
    reply.result = kHostLost;
    Request request{};
    request.op = op;
    request.pid = pid;
    request.arg = arg;
    request.pair_count = static_cast<std::uint32_t>(pairs.size());
    std::copy(pairs.begin(), pairs.end(), request.pairs);
    const int channel = send_call(request);
    if (channel < 0) {
      reply.result = kHostLost;
    } else if (!answered_in_time(channel)) {
      // Shut first, then look once more: an answer sent before the shutdown is read here; one sent after it
      // fails in the host, which then knows its caller is gone.
      ::shutdown(channel, SHUT_RDWR);
      if (!receive(channel, &reply, sizeof reply, nullptr, MSG_DONTWAIT)) reply.result = kNoAnswer;
    } else if (!receive(channel, &reply, sizeof reply)) {
      reply.result = kHostLost;
    }
    if (channel >= 0) ::close(channel);
    if (reply.result != kHostLost && reply.result != kNoAnswer) {
      std::lock_guard lock(names_mutex_);
      names_[reply.result] = std::string(reply.text, strnlen(reply.text, sizeof reply.text));
    }
    return reply;
  }

  // Whether `channel` has the answer (or the host's end closed) before the deadline, if one is set.
  bool answered_in_time(int channel) {
    std::optional<std::chrono::steady_clock::time_point> deadline;
    {
      std::lock_guard lock(deadline_mutex_);
      deadline = deadline_;
    }
    if (!deadline) return true;
    for (;;) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd ready{channel, POLLIN, 0};
      const int polled = ::poll(&ready, 1, static_cast<int>(std::min<long long>(left.count(), 1 << 30)));
      if (polled > 0) return true;
      if (polled == 0) return false;
      if (errno != EINTR) return true;   // let the blocking receive report what is wrong with the channel
    }
  }

  // Sends `request` with one end of a socket pair made for its answer; returns the other end (-1: not sent).
  // The host then holds the only other end, so its death ends a wait on the returned one.
  int send_call(const Request& request) {
    int channel[2];
    if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, channel) != 0) return -1;
    bool sent;
    {
      std::lock_guard lock(send_mutex_);
      sent = send_all(control_fd_, &request, sizeof request, channel[1]);
    }
    ::close(channel[1]);
    if (sent) return channel[0];
    ::close(channel[0]);
    return -1;
  }

  int control_fd_;
  std::mutex deadline_mutex_;
  std::optional<std::chrono::steady_clock::time_point> deadline_;
  std::mutex send_mutex_;
  std::mutex names_mutex_;
  std::map<int, std::string> names_;
};

}  // namespace

Result<std::unique_ptr<DriverHost>> DriverHost::start(const DriverFactory& factory, Mode mode, int image_dir_fd,
                                                      const InventoryReader& read_node) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) != 0)
    return make_error(std::string("socketpair for the driver host: ") + std::strerror(errno), errno);
  int report[2];   // the grandchild's pid, from the intermediate child
  if (::pipe2(report, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    return make_error(std::string("pipe for the driver host: ") + std::strerror(e), e);
  }
  pid_t child = ::fork();
  if (child < 0) {
    int e = errno;
    for (int fd : {fds[0], fds[1], report[0], report[1]}) ::close(fd);
    return make_error(std::string("fork of the driver host: ") + std::strerror(e), e);
  }
  if (child == 0) {
    ::setsid();
    pid_t host = ::fork();
    if (host != 0) {
      (void)!::write(report[1], &host, sizeof host);
      _exit(0);
    }
    int log_fd = image_dir_fd >= 0 ? ::openat(image_dir_fd, "gpuckpt-guardian.log",
                                              O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600)
                                   : -1;
    if (log_fd < 0) log_fd = ::open("/dev/null", O_WRONLY | O_CLOEXEC);
    // The image directory, for the guardian's refill of GPU memory images (a dump's only).
    int dir_fd = mode == Mode::Dump && image_dir_fd >= 0 ? ::fcntl(image_dir_fd, F_DUPFD_CLOEXEC, 3) : -1;
    // Keep nothing else of CRIU's open: not its log, not a pipe a container runtime reads to EOF.
    int null_fd = ::open("/dev/null", O_RDWR);
    for (int target = 0; target < 3; ++target) ::dup2(null_fd, target);
    for (int fd = 3; fd < 65536; ++fd)
      if (fd != fds[1] && fd != log_fd && fd != dir_fd) ::close(fd);
    ::signal(SIGPIPE, SIG_IGN);
    ::signal(SIGCHLD, SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    run_host(fds[1], log_fd, dir_fd, factory, mode,
             read_node ? read_node : InventoryReader([] { return read_inventory(HostRoot("/")); }));
  }
  ::close(fds[1]);
  ::close(report[1]);
  pid_t host_pid = -1;
  if (::read(report[0], &host_pid, sizeof host_pid) != static_cast<ssize_t>(sizeof host_pid)) host_pid = -1;
  ::close(report[0]);
  int status = 0;
  while (::waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  // Loading the driver takes milliseconds; a host that does not answer in 30 s will not.
  pollfd ready{fds[0], POLLIN, 0};
  int polled;
  do polled = ::poll(&ready, 1, 30000);
  while (polled < 0 && errno == EINTR);
  Reply greeting{};
  if (polled <= 0 || !receive(fds[0], &greeting, sizeof greeting)) {
    ::close(fds[0]);
    if (host_pid > 0) ::kill(host_pid, SIGKILL);
    return make_error("the gpuckpt driver host did not start (no answer within 30 s)", EIO);
  }
  if (greeting.result != 0) {
    ::close(fds[0]);
    return make_error(std::string(greeting.text, strnlen(greeting.text, sizeof greeting.text)), greeting.result);
  }
  return std::unique_ptr<DriverHost>(new DriverHost(fds[0], host_pid));
}

DriverHost::DriverHost(int control_fd, int host_pid)
    : control_fd_(control_fd), host_pid_(host_pid), remote_(std::make_unique<RemoteDriver>(control_fd)) {}

DriverHost::~DriverHost() {
  if (control_fd_ >= 0) ::close(control_fd_);
}

Driver& DriverHost::driver() { return *remote_; }

void DriverHost::answer_by(std::optional<std::chrono::steady_clock::time_point> deadline) {
  static_cast<RemoteDriver&>(*remote_).answer_by(deadline);
}

Result<NodeInventory> DriverHost::inventory() { return static_cast<RemoteDriver&>(*remote_).inventory(); }

void DriverHost::track(int pid, ProcessState initial) {
  static_cast<RemoteDriver&>(*remote_).notify(Op::Track, pid, static_cast<std::uint32_t>(initial));
}

void DriverHost::staged(int pid, int vpid) {
  static_cast<RemoteDriver&>(*remote_).notify(Op::Staged, pid, static_cast<std::uint32_t>(vpid));
}

void DriverHost::done() { static_cast<RemoteDriver&>(*remote_).notify(Op::Done); }

}  // namespace gpuckpt::cuda
