// Offloading BO content restore to the main CRIU process. The restored process (RESTORE_EXT_FILE) sends the
// dmabuf fds of its new BOs over a SOCK_SEQPACKET socket (SCM_RIGHTS); a worker thread in the main process,
// started at POST_FORKING, fills them per GPU while CRIU goes on restoring memory; RESUME_DEVICES_LATE stops the
// worker and collects its result before KFD's RESUME.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "criu-plugin/amd/amd_device.h"
#include "criu-plugin/amd/bo_io.h"
#include "criu-plugin/amd/image_dir.h"

namespace gpuckpt::amd {

struct RestoreJob {
  std::uint32_t image_id = 0;
  std::vector<GpuTransfer> gpus;   // render_fd is not sent: the worker opens render_minors itself
  std::vector<int> render_minors;  // one per GPU, the target render node
};


class ParallelRestoreServer {
 public:
  // The socket pair is created before CRIU forks, so every restored process inherits the sending end.
  static Result<std::unique_ptr<ParallelRestoreServer>> create();
  ~ParallelRestoreServer();

  int sender_fd() const { return send_fd_; }
  // Restored-process side. CRIU may have closed or reused the inherited fd number while restoring the
  // process's own fds, so the socket is checked (same inode as created) before anything is sent on it; a
  // mismatch is an error, and the caller restores in-process. The BO fds stay open in the sender; the caller
  // closes them after a successful send.
  Result<void> send_job(const RestoreJob& job) const;
  // Starts the worker thread (POST_FORKING). The ImageDir must outlive the worker.
  void start(AmdDevice& device, ImageDir images, TransferOptions options);
  bool started() const { return worker_.joinable(); }
  // Ends the worker after every job sent so far is done; the first failure of any job, or success.
  Result<void> stop();
  std::uint64_t jobs_done() const { return jobs_done_; }

 private:
  ParallelRestoreServer(int recv_fd, int send_fd, ino_t send_inode)
      : recv_fd_(recv_fd), send_fd_(send_fd), send_inode_(send_inode) {}
  void run(AmdDevice& device, ImageDir images, TransferOptions options);

  int recv_fd_;
  int send_fd_;
  ino_t send_inode_;
  std::thread worker_;
  std::mutex mutex_;
  Result<void> result_;
  std::uint64_t jobs_done_ = 0;
};

}  // namespace gpuckpt::amd
