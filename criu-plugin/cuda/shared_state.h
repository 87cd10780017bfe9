// CUDA state shared between processes, seen from outside before any driver call: what NVIDIA's checkpoint API
// cannot restore on drivers older than kSharedStateDriverMajor. On driver 580, two NCCL ranks locked together
// checkpoint, but cuCheckpointProcessRestore fails CUDA_ERROR_NOT_SUPPORTED and leaves both checkpointed; a rank
// locked while its peer is locked waits out the lock timeout (CUDA_ERROR_NOT_READY), and a driver call for a rank
// whose peer is locked can hang (measured on 2x H100, docs/cuda.md). So such a dump is refused before the lock.
//
// What gives it away (measured with NCCL 2.28 / torch 2.11, docs/cuda.md): NCCL's proxy binds an abstract unix
// socket "@tmp/nccl-socket-<rank>-<hash>" per communicator, in every transport (P2P over cuMem, legacy CUDA IPC,
// SHM); NCCL_CUMEM_ENABLE=0 also maps "/dev/shm/nccl-*" segments. The imported GPU memory itself leaves no trace
// in /proc/PID/maps or the fds (cuMem handles are passed over that socket and closed).
#pragma once

#include <map>
#include <string>
#include <vector>

namespace gpuckpt::cuda {

// NVIDIA's cuda-checkpoint README, "610 Features": processes started in one cuda-checkpoint job
// (`cuda-checkpoint --launch-job`, CUDA_CHECKPOINT_JOB_FILE) may share CUDA IPC memory and stay checkpointable.
inline constexpr int kSharedStateDriverMajor = 610;

// Whether NVIDIA driver `version` ("580.159.04") can restore CUDA state shared between processes. An unknown or
// unparsable version cannot be trusted to: false.
bool driver_restores_shared_state(const std::string& version);

struct SharedStateEvidence {
  std::vector<std::string> nccl_sockets;    // "@tmp/nccl-socket-0-1e58..."
  std::vector<std::string> nccl_segments;   // "/dev/shm/nccl-38Jos9 (deleted)"
  bool any() const { return !nccl_sockets.empty() || !nccl_segments.empty(); }
};

struct SharedState {
  std::map<int, SharedStateEvidence> by_pid;   // only the given processes with evidence
  // Other processes in the same network namespace (the abstract socket namespace NCCL's peers reach each other
  // in: a pod's) that hold NCCL sockets too: a job's ranks this dump leaves out, e.g. another container of the pod.
  std::vector<int> outside_peers;
  bool any() const { return !by_pid.empty(); }
  // Two processes of this node or more: what the driver cannot restore. One alone holds a communicator whose
  // other ranks are in the same process (no IPC) or on other nodes (the network, not the GPU driver).
  bool between_processes() const { return by_pid.size() + outside_peers.size() >= 2; }
};

// Looks at `pids` through `proc` (the procfs mount; a fixture tree in tests): their fds, their network
// namespace's unix socket table and their mappings. Outside peers are searched only when something was found.
SharedState find_shared_state(const std::vector<int>& pids, const std::string& proc = "/proc");

// Whether `pid` was started in a cuda-checkpoint job: CUDA_CHECKPOINT_JOB_FILE in its initial environment.
bool in_checkpoint_job(int pid, const std::string& proc = "/proc");

// "NCCL/CUDA IPC between processes 641 and 642 (pid 641: NCCL socket @tmp/nccl-socket-0-1e58...; ...)"
std::string describe(const SharedState& state);

}  // namespace gpuckpt::cuda
