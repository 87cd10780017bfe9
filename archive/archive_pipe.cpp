#include "archive/archive_pipe.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace gpuckpt {

namespace fs = std::filesystem;

namespace {

// The pipe's buffer: large writes from the runtime and to it pass in fewer wake-ups (the default is 64 KiB).
constexpr int kPipeBufferBytes = 1 << 20;
// A FIFO gives its writer no event when a reader opens it, so a writer waiting for one looks again this often.
constexpr int kReaderPollMs = 20;

Error pipe_error(const fs::path& path, const std::string& what, int err) {
  return make_error(what + " " + path.string() + ": " + std::strerror(err), err);
}

}  // namespace

Result<std::unique_ptr<ArchivePipe>> ArchivePipe::create(const fs::path& path, Direction direction) {
  if (::mkfifo(path.c_str(), 0600) != 0) return pipe_error(path, "cannot make the named pipe", errno);
  std::unique_ptr<ArchivePipe> pipe(new ArchivePipe(path));   // from here on, the destructor removes the FIFO
  pipe->exited_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (pipe->exited_ < 0) return pipe_error(path, "cannot make an eventfd for", errno);
  if (direction == Direction::from_runtime) {
    pipe->read_fd_ = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (pipe->read_fd_ < 0) return pipe_error(path, "cannot open", errno);
    (void)::fcntl(pipe->read_fd_, F_SETPIPE_SZ, kPipeBufferBytes);   // a smaller buffer only costs wake-ups
  }
  return pipe;
}

ArchivePipe::~ArchivePipe() {
  for (int fd : {read_fd_, write_fd_, exited_})
    if (fd >= 0) ::close(fd);
  std::error_code ec;
  fs::remove(path_, ec);
}

void ArchivePipe::runtime_exited() {
  exited_flag_ = true;
  const std::uint64_t one = 1;
  (void)!::write(exited_, &one, sizeof one);
}

bool ArchivePipe::has_exited() const { return exited_flag_; }

Result<bool> ArchivePipe::wait_for(int fd, short events, int timeout_ms) {
  for (;;) {
    pollfd fds[2] = {{exited_, POLLIN, 0}, {fd, events, 0}};
    const int n = ::poll(fds, fd >= 0 ? 2 : 1, timeout_ms);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return pipe_error(path_, "cannot wait on", errno);
    if (has_exited()) return false;
    return true;
  }
}

Result<std::size_t> ArchivePipe::receive(char* buffer, std::size_t size) {
  if (read_fd_ < 0) return make_error("the named pipe " + path_.string() + " is not open for reading", EBADF);
  for (;;) {
    const ssize_t n = ::read(read_fd_, buffer, size);
    if (n > 0) return static_cast<std::size_t>(n);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN) return pipe_error(path_, "cannot read", errno);
    // Nothing to read: read() says 0 while no writer has the pipe open, before the runtime opened it as much as
    // after it closed it; poll() tells them apart (POLLHUP only once a writer has come and gone).
    if (has_exited()) return std::size_t{0};
    pollfd fds[2] = {{exited_, POLLIN, 0}, {read_fd_, POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0 && errno != EINTR) return pipe_error(path_, "cannot wait on", errno);
    if (n == 0 && (fds[1].revents & POLLHUP) && !(fds[1].revents & POLLIN)) return std::size_t{0};
  }
}

Result<bool> ArchivePipe::await_reader() {
  sigset_t pipe_signal;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);   // a reader that goes away is an EPIPE here, not a signal
  for (;;) {
    const int fd = ::open(path_.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) {
      (void)::fcntl(fd, F_SETPIPE_SZ, kPipeBufferBytes);
      write_fd_ = fd;
      // The runtime's next open of the path gets a FIFO of its own. A FIFO does not separate one reader from the
      // next: a runtime that reads one entry, closes and opens again (podman reads its config files first) would
      // otherwise be handed whatever this stream had left in the pipe, or its rest, before the next stream.
      GPUCKPT_TRY_VOID(replace_fifo());
      return true;
    }
    if (errno != ENXIO && errno != EINTR) return pipe_error(path_, "cannot open", errno);
    if (has_exited()) return false;
    GPUCKPT_TRY(const bool runtime_alive, wait_for(-1, 0, kReaderPollMs));
    if (!runtime_alive) return false;
  }
}

Result<void> ArchivePipe::send(const char* data, std::size_t size) {
  if (write_fd_ < 0) return make_error("no reader has the named pipe " + path_.string() + " open", EBADF);
  while (size > 0) {
    const ssize_t n = ::write(write_fd_, data, size);
    if (n > 0) {
      data += n;
      size -= static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EPIPE) {
      sigset_t pipe_signal;
      sigemptyset(&pipe_signal);
      sigaddset(&pipe_signal, SIGPIPE);
      const timespec now{0, 0};
      (void)sigtimedwait(&pipe_signal, nullptr, &now);   // the SIGPIPE this write raised, pending for this thread
      return make_error("the runtime stopped reading " + path_.string(), EPIPE);
    }
    if (n < 0 && errno != EAGAIN) return pipe_error(path_, "cannot write to", errno);
    GPUCKPT_TRY(const bool writable, wait_for(write_fd_, POLLOUT, -1));
    if (!writable) return make_error("the runtime exited while reading " + path_.string(), ECANCELED);
  }
  return {};
}

Result<void> ArchivePipe::replace_fifo() {
  const fs::path next = path_.string() + ".next";
  if (::mkfifo(next.c_str(), 0600) != 0) return pipe_error(next, "cannot make the named pipe", errno);
  if (::rename(next.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(next.c_str());
    return pipe_error(path_, "cannot put a fresh named pipe at", err);
  }
  return {};
}

void ArchivePipe::end_stream() {
  if (write_fd_ >= 0) ::close(write_fd_);
  write_fd_ = -1;
}

}  // namespace gpuckpt
