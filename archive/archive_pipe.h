// A named pipe between the agent and a container runtime, so that a checkpoint archive passes over the disk once
// (docs/node-flow.md, "One pass over the archive"): the runtime writes its export into the pipe by path while the
// agent reads it, adds its entries and writes the final archive (`podman container checkpoint --export PIPE`,
// CRI's checkpoint location); on restore the agent writes the archive with the plan applied into the pipe while
// the runtime reads it (`podman container restore --import PIPE`), once for every time the runtime opens it, each
// open on a FIFO of its own so that no reader sees what an earlier one left unread.
// Every wait also ends when the caller says the runtime has exited, so a runtime that fails without opening the
// pipe, or stops reading half-way, never leaves the agent waiting.
#pragma once

#include <cstddef>
#include <filesystem>
#include <functional>
#include <atomic>
#include <memory>
#include <thread>

#include "base/caught.h"
#include "base/log.h"
#include "base/result.h"

namespace gpuckpt {

class ArchivePipe {
 public:
  enum class Direction { from_runtime, to_runtime };
  // Makes the FIFO at `path` (mode 0600; an existing file there is an error, never replaced). A pipe the runtime
  // writes into is opened for reading at once: what the runtime writes before the agent reads is kept.
  static Result<std::unique_ptr<ArchivePipe>> create(const std::filesystem::path& path, Direction direction);
  ~ArchivePipe();   // closes and removes the FIFO
  ArchivePipe(const ArchivePipe&) = delete;
  ArchivePipe& operator=(const ArchivePipe&) = delete;

  const std::filesystem::path& path() const { return path_; }

  // Any thread: the runtime process has exited. Pending and later waits return instead of blocking.
  void runtime_exited();

  // Reading what the runtime writes: up to `size` bytes; 0 at the end of its stream, which is also where a
  // runtime that exited without opening the pipe ends.
  Result<std::size_t> receive(char* buffer, std::size_t size);

  // Writing for the runtime to read. await_reader() waits until the runtime opens the pipe (true) or has exited
  // (false); send() writes all of `data`, failing with EPIPE when the runtime stopped reading and ECANCELED when
  // it exited; end_stream() closes this stream so the reader sees its end. Call them from one thread of their own:
  // it blocks SIGPIPE for itself.
  Result<bool> await_reader();
  Result<void> send(const char* data, std::size_t size);
  void end_stream();

 private:
  explicit ArchivePipe(std::filesystem::path path) : path_(std::move(path)) {}
  // Puts a new FIFO at the path (the one the current reader holds lives on, unlinked, until it closes).
  Result<void> replace_fifo();
  // Waits until `fd` is ready for `events` (true) or the runtime has exited (false).
  Result<bool> wait_for(int fd, short events, int timeout_ms);
  bool has_exited() const;

  std::filesystem::path path_;
  std::atomic<bool> exited_flag_{false};
  int exited_ = -1;   // eventfd, readable once runtime_exited() ran: wakes a poll()
  int read_fd_ = -1;
  int write_fd_ = -1;
};

// The agent's side of a pipe, on a thread of its own while the caller runs the runtime: however the caller's
// scope ends (a runtime call that throws included), the pipe hears that the runtime has exited and the thread is
// joined, so it never outlives the pipe or blocks for good. What `work` throws (it reads untrusted archives) is
// logged and ends the work, never the process; the caller sees the result `work` did not set.
class PipeWorker {
 public:
  PipeWorker(ArchivePipe& pipe, std::function<void()> work)
      : pipe_(pipe), thread_([work = std::move(work)] {
          if (auto done = caught("the archive stream between the agent and the runtime", work); !done)
            log::error(done.error().message);
        }) {}
  ~PipeWorker() { finish(); }
  PipeWorker(const PipeWorker&) = delete;
  PipeWorker& operator=(const PipeWorker&) = delete;
  // The runtime has exited: wait for the worker to finish with what it sent.
  void finish() {
    if (!thread_.joinable()) return;
    pipe_.runtime_exited();
    thread_.join();
  }

 private:
  ArchivePipe& pipe_;
  std::thread thread_;
};

}  // namespace gpuckpt
