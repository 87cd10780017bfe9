#include "cli/output_tee.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>

namespace gpuckpt::cli {

OutputTee::OutputTee(int fd, std::FILE* stream, std::size_t keep_bytes, bool pass_on)
    : fd_(fd), stream_(stream), keep_bytes_(keep_bytes), pass_on_(pass_on) {
  int ends[2];
  if (::pipe2(ends, O_CLOEXEC) != 0) return;
  std::fflush(stream_);
  saved_ = ::fcntl(fd_, F_DUPFD_CLOEXEC, 3);
  if (saved_ < 0 || ::dup2(ends[1], fd_) < 0) {
    ::close(ends[0]);
    ::close(ends[1]);
    if (saved_ >= 0) ::close(saved_);
    saved_ = -1;
    return;
  }
  ::close(ends[1]);   // fd_ is now the only write end: restoring it in finish() ends the pump
  read_end_ = ends[0];
  pump_ = std::thread([this] {
    char buffer[4096];
    for (;;) {
      const ssize_t n = ::read(read_end_, buffer, sizeof buffer);
      if (n <= 0) break;
      for (ssize_t done = 0; pass_on_ && done < n;) {
        const ssize_t w = ::write(saved_, buffer + done, static_cast<std::size_t>(n - done));
        if (w <= 0) break;
        done += w;
      }
      std::lock_guard lock(mutex_);
      written_ += static_cast<std::size_t>(n);
      if (kept_.size() < keep_bytes_)
        kept_.append(buffer, std::min(static_cast<std::size_t>(n), keep_bytes_ - kept_.size()));
    }
  });
}

void OutputTee::finish() {
  if (saved_ < 0) return;
  std::fflush(stream_);
  ::dup2(saved_, fd_);   // the pipe's last write end goes: the pump drains it, passes it on, and ends
  if (pump_.joinable()) pump_.join();
  ::close(saved_);
  saved_ = -1;
  ::close(read_end_);
  read_end_ = -1;
}

OutputTee::~OutputTee() { finish(); }

std::string OutputTee::kept() const {
  std::lock_guard lock(mutex_);
  return kept_;
}

std::size_t OutputTee::written() const {
  std::lock_guard lock(mutex_);
  return written_;
}

}  // namespace gpuckpt::cli
