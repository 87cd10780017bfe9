#include "criu-plugin/amd/parallel_restore.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/log.h"

namespace gpuckpt::amd {
namespace {

enum : std::uint32_t { kMsgBegin = 1, kMsgBos = 2, kMsgEnd = 3, kMsgStop = 4 };
constexpr std::size_t kFdsPerMessage = 200;   // below the kernel's SCM_MAX_FD (253)

void put32(std::string& out, std::uint32_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }
void put64(std::string& out, std::uint64_t v) { out.append(reinterpret_cast<const char*>(&v), sizeof v); }

class Reader {
 public:
  Reader(const char* data, std::size_t size) : data_(data), size_(size) {}
  bool get32(std::uint32_t* v) { return get(v, sizeof *v); }
  bool get64(std::uint64_t* v) { return get(v, sizeof *v); }

 private:
  bool get(void* v, std::size_t n) {
    if (pos_ + n > size_) return false;
    std::memcpy(v, data_ + pos_, n);
    pos_ += n;
    return true;
  }
  const char* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// Never blocks: with no worker reading yet (POST_FORKING still to come) a full socket is an error, and the
// restored process then fills its BOs itself instead of waiting.
Result<void> send_message(int fd, const std::string& payload, const int* fds, std::size_t nfds) {
  iovec iov{const_cast<char*>(payload.data()), payload.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  std::vector<char> control;
  if (nfds > 0) {
    control.resize(CMSG_SPACE(sizeof(int) * nfds));
    msg.msg_control = control.data();
    msg.msg_controllen = control.size();
    cmsghdr* cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
    std::memcpy(CMSG_DATA(cmsg), fds, sizeof(int) * nfds);
  }
  ssize_t n;
  do {
    n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return make_error(std::string("parallel restore channel: send failed: ") + std::strerror(errno), errno);
  return {};
}

// One message and the fds that came with it (owned by the caller).
struct Received {
  std::string payload;
  std::vector<int> fds;
};

Result<Received> receive_message(int fd) {
  Received out;
  out.payload.resize(64 * 1024);
  std::vector<char> control(CMSG_SPACE(sizeof(int) * kFdsPerMessage));
  iovec iov{out.payload.data(), out.payload.size()};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.data();
  msg.msg_controllen = control.size();
  ssize_t n;
  do {
    n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return make_error(std::string("parallel restore channel: receive failed: ") + std::strerror(errno), errno);
  for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c; c = CMSG_NXTHDR(&msg, c)) {
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      const std::size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      const auto* data = reinterpret_cast<const int*>(CMSG_DATA(c));
      out.fds.insert(out.fds.end(), data, data + count);
    }
  }
  if (msg.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) {
    for (int f : out.fds) ::close(f);
    return make_error("parallel restore channel: a message was truncated", EMSGSIZE);
  }
  out.payload.resize(static_cast<std::size_t>(n));
  return out;
}

void close_job_fds(RestoreJob& job) {
  for (auto& gpu : job.gpus) {
    for (auto& bo : gpu.bos) {
      if (bo.dmabuf_fd >= 0) ::close(bo.dmabuf_fd);
      bo.dmabuf_fd = -1;
    }
  }
}

Result<void> send_restore_job(int channel_fd, const RestoreJob& job) {
  std::string begin;
  put32(begin, kMsgBegin);
  put32(begin, job.image_id);
  put32(begin, static_cast<std::uint32_t>(job.gpus.size()));
  for (std::size_t i = 0; i < job.gpus.size(); ++i) {
    put32(begin, job.gpus[i].gpu_id);
    put32(begin, static_cast<std::uint32_t>(job.render_minors[i]));
    put32(begin, static_cast<std::uint32_t>(job.gpus[i].bos.size()));
  }
  GPUCKPT_TRY_VOID(send_message(channel_fd, begin, nullptr, 0));

  std::vector<const BoTransfer*> all;
  for (const auto& gpu : job.gpus) {
    for (const auto& bo : gpu.bos) all.push_back(&bo);
  }
  for (std::size_t first = 0; first < all.size(); first += kFdsPerMessage) {
    const std::size_t count = std::min(kFdsPerMessage, all.size() - first);
    std::string msg;
    put32(msg, kMsgBos);
    put32(msg, static_cast<std::uint32_t>(count));
    std::vector<int> fds;
    for (std::size_t i = first; i < first + count; ++i) {
      put64(msg, all[i]->size);
      put64(msg, all[i]->addr);
      put32(msg, all[i]->cpu_access ? 1u : 0u);
      fds.push_back(all[i]->dmabuf_fd);
    }
    GPUCKPT_TRY_VOID(send_message(channel_fd, msg, fds.data(), fds.size()));
  }
  std::string end;
  put32(end, kMsgEnd);
  return send_message(channel_fd, end, nullptr, 0);
}

}  // namespace

Result<int> ParallelRestoreServer::sender_here(bool* owned) const {
  *owned = false;
  if (store_id_ < 0) return send_fd_;
  GPUCKPT_TRY(const int fd, store_.get(store_id_),
              "the parallel restore socket could not be taken from CRIU's fdstore (id " + std::to_string(store_id_) +
                  ")");
  *owned = true;
  return fd;
}

Result<void> ParallelRestoreServer::send_job(const RestoreJob& job) const {
  bool owned = false;
  GPUCKPT_TRY(const int fd, sender_here(&owned));
  struct stat st {};
  Result<void> sent;
  if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) || st.st_ino != send_inode_) {
    sent = make_error("the parallel restore socket (fd " + std::to_string(fd) +
                          (owned ? ", from CRIU's fdstore" : ", inherited") +
                          ") did not survive into the restored process",
                      EBADF);
  } else {
    sent = send_restore_job(fd, job);
  }
  if (owned) ::close(fd);
  return sent;
}

Result<std::unique_ptr<ParallelRestoreServer>> ParallelRestoreServer::create(const FdStore* store) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, fds) < 0) {
    return make_error(std::string("parallel restore: socketpair failed: ") + std::strerror(errno), errno);
  }
  struct stat st {};
  ::fstat(fds[1], &st);
  std::unique_ptr<ParallelRestoreServer> server(new ParallelRestoreServer(fds[0], fds[1], st.st_ino));
  if (store != nullptr && store->add && store->get) {
    if (auto id = store->add(fds[1]); id) {
      server->store_ = *store;
      server->store_id_ = *id;
    } else {
      log::warn("amd: the parallel restore socket could not be put in CRIU's fdstore (" + id.error().message +
                "): restored processes use the inherited fd, which CRIU may close first");
    }
  }
  return server;
}

ParallelRestoreServer::~ParallelRestoreServer() {
  if (worker_.joinable()) (void)stop();
  if (recv_fd_ >= 0) ::close(recv_fd_);
  if (send_fd_ >= 0) ::close(send_fd_);
}

void ParallelRestoreServer::start(AmdDevice& device, ImageDir images, TransferOptions options) {
  // The worker must not take CRIU's SIGCHLD: CRIU waits for its restored children with it.
  sigset_t block, old;
  sigemptyset(&block);
  sigaddset(&block, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &block, &old);
  worker_ = std::thread([this, &device, images, options] { run(device, images, options); });
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
}

void ParallelRestoreServer::run(AmdDevice& device, ImageDir images, TransferOptions options) {
  RestoreJob job;
  const auto fail = [this, &job](Error e) {
    close_job_fds(job);
    std::lock_guard lock(mutex_);
    if (result_) result_ = std::move(e);
  };
  std::size_t expected_bos = 0;
  std::vector<BoTransfer*> slots;
  while (true) {
    auto msg = receive_message(recv_fd_);
    if (!msg) return fail(msg.error());
    if (msg->payload.empty()) break;   // the socket was shut down: the same as STOP
    Reader in(msg->payload.data(), msg->payload.size());
    std::uint32_t type = 0;
    if (!in.get32(&type)) return fail(make_error("parallel restore channel: short message"));
    if (type == kMsgStop) break;
    if (type == kMsgBegin) {
      close_job_fds(job);
      job = RestoreJob{};
      slots.clear();
      std::uint32_t gpus = 0;
      if (!in.get32(&job.image_id) || !in.get32(&gpus)) return fail(make_error("parallel restore: bad job header"));
      job.gpus.resize(gpus);
      job.render_minors.resize(gpus);
      for (std::uint32_t i = 0; i < gpus; ++i) {
        std::uint32_t minor = 0, bos = 0;
        if (!in.get32(&job.gpus[i].gpu_id) || !in.get32(&minor) || !in.get32(&bos)) {
          return fail(make_error("parallel restore: bad job header"));
        }
        job.render_minors[i] = static_cast<int>(minor);
        job.gpus[i].file_name = bo_content_image_name(job.image_id, job.gpus[i].gpu_id);
        job.gpus[i].bos.resize(bos);
      }
      for (auto& gpu : job.gpus) {
        for (auto& bo : gpu.bos) slots.push_back(&bo);
      }
      expected_bos = 0;
    } else if (type == kMsgBos) {
      std::uint32_t count = 0;
      in.get32(&count);
      if (count != msg->fds.size() || expected_bos + count > slots.size()) {
        for (int f : msg->fds) ::close(f);
        return fail(make_error("parallel restore: BO message does not match its job"));
      }
      for (std::uint32_t i = 0; i < count; ++i) {
        BoTransfer* bo = slots[expected_bos++];
        std::uint32_t cpu_access = 0;
        in.get64(&bo->size);
        in.get64(&bo->addr);
        in.get32(&cpu_access);
        bo->cpu_access = cpu_access != 0;
        bo->dmabuf_fd = msg->fds[i];
      }
    } else if (type == kMsgEnd) {
      if (expected_bos != slots.size()) return fail(make_error("parallel restore: job ended before all its BOs came"));
      std::vector<int> render_fds;
      for (std::size_t i = 0; i < job.gpus.size(); ++i) {
        const std::string path = "/dev/dri/renderD" + std::to_string(job.render_minors[i]);
        const int fd = options.use_sdma ? device.open(path.c_str(), O_RDWR) : -1;
        job.gpus[i].render_fd = fd >= 0 ? fd : -1;
        if (fd >= 0) render_fds.push_back(fd);
      }
      auto done = restore_contents(device, images, job.gpus, options);
      for (int fd : render_fds) device.close(fd);
      close_job_fds(job);
      if (!done) {
        fail(make_error("parallel restore of image " + std::to_string(job.image_id) + ": " + done.error().message,
                        done.error().errno_value));
      } else {
        log::info("amd: parallel restore of image " + std::to_string(job.image_id) + ": " +
                  std::to_string(done->bytes) + " bytes");
        std::lock_guard lock(mutex_);
        ++jobs_done_;
      }
    }
  }
  close_job_fds(job);
}

Result<void> ParallelRestoreServer::stop() {
  if (worker_.joinable()) {
    std::string stop_msg;
    put32(stop_msg, kMsgStop);
    if (auto r = send_message(send_fd_, stop_msg, nullptr, 0); !r) {
      // The worker cannot be told to stop; shutting the socket down ends its receive.
      ::shutdown(recv_fd_, SHUT_RDWR);
    }
    worker_.join();
  }
  std::lock_guard lock(mutex_);
  return result_;
}

}  // namespace gpuckpt::amd
