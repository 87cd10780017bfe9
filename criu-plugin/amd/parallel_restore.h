// Offloading BO content restore to the main CRIU process. The restored process (RESTORE_EXT_FILE) sends the
// dmabuf fds of its new BOs over a SOCK_SEQPACKET socket (SCM_RIGHTS); a worker thread in the main process,
// started at POST_FORKING, fills them per GPU while CRIU goes on restoring memory; RESUME_DEVICES_LATE stops the
// worker and collects its result before KFD's RESUME.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/result.h"
#include "criu-plugin/amd/amd_device.h"
#include "criu-plugin/amd/bo_io.h"
#include "criu-plugin/amd/image_dir.h"

namespace gpuckpt::amd {

struct RestoreJob {
  std::uint32_t image_id = 0;
  std::vector<GpuTransfer> gpus;   // render_fd is not sent: the worker opens render_minors itself
  std::vector<int> render_minors;  // one per GPU, the target render node
};

// CRIU's fdstore as the server uses it (criu_host.h: fd_store_add / fd_store_get): add keeps an fd in CRIU and
// returns its id, get returns a new fd of that file in whichever process calls it (the caller closes it).
struct FdStore {
  std::function<Result<int>(int fd)> add;
  std::function<Result<int>(int id)> get;
};

class ParallelRestoreServer {
 public:
  // The socket pair is created in the main CRIU process before CRIU forks. With `store` (CRIU 4.2 and later)
  // the sending end is also kept in CRIU's fdstore, which survives CRIU's fd handling in the restored
  // processes; without it (or if adding fails) the restored processes can only use the end they inherited.
  static Result<std::unique_ptr<ParallelRestoreServer>> create(const FdStore* store = nullptr);
  ~ParallelRestoreServer();

  int sender_fd() const { return send_fd_; }
  bool in_fd_store() const { return store_id_ >= 0; }
  // Restored-process side. The sending end comes from CRIU's fdstore when it is there, else it is the inherited
  // fd, which CRIU may have closed or reused while restoring the process's own fds. Either way the socket is
  // checked (same inode as created) before anything is sent on it; a mismatch is an error, and the caller
  // restores in-process. The BO fds stay open in the sender; the caller closes them after a successful send.
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
  // The sending end in this process: a new fd from the fdstore (closed by the caller), or the inherited one.
  Result<int> sender_here(bool* owned) const;
  void run(AmdDevice& device, ImageDir images, TransferOptions options);

  int recv_fd_;
  int send_fd_;
  ino_t send_inode_;
  FdStore store_;
  int store_id_ = -1;
  std::thread worker_;
  std::mutex mutex_;
  Result<void> result_;
  std::uint64_t jobs_done_ = 0;
};

}  // namespace gpuckpt::amd
