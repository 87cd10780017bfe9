// find_shared_state on fixture /proc trees shaped like what two NCCL ranks showed on 2x H100 (NCCL 2.28, torch
// 2.11): fds that are sockets, the namespace's /proc/PID/net/unix naming them @tmp/nccl-socket-..., and with
// NCCL_CUMEM_ENABLE=0 mappings of /dev/shm/nccl-* segments. Plus the driver versions that may restore it.
#include <catch2/catch_test_macros.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "criu-plugin/cuda/shared_state.h"

using namespace gpuckpt::cuda;
namespace fs = std::filesystem;

namespace {

// NCCL pads its abstract socket names with NULs; /proc/net/unix prints them as '@'.
const std::string kPadding(40, '@');

struct FakeProc {
  fs::path root = fs::temp_directory_path() / ("gpuckpt-shared-" + std::to_string(::getpid()));
  std::map<std::string, std::string> unix_tables;   // netns -> table body
  FakeProc() { fs::remove_all(root); }
  ~FakeProc() { fs::remove_all(root); }

  fs::path dir(int pid) const { return root / std::to_string(pid); }
  // A process in network namespace `netns` with fds linking to `targets` and mapping `maps`.
  void process(int pid, const std::string& netns, const std::vector<std::string>& targets,
               const std::vector<std::string>& maps = {}) {
    fs::create_directories(dir(pid) / "fd");
    fs::create_directories(dir(pid) / "ns");
    fs::create_directories(dir(pid) / "net");
    fs::create_symlink("net:[" + netns + "]", dir(pid) / "ns" / "net");
    int fd = 3;
    for (const auto& target : targets) fs::create_symlink(target, dir(pid) / "fd" / std::to_string(fd++));
    std::ofstream out(dir(pid) / "maps");
    out << "7f6ecbe00000-7f6ed72e1000 r-xp 00000000 fe:00 28572   /usr/lib/libnccl.so.2\n";
    out << "7f0000000000-7f0000200000 rw-s 00000000 00:05 1024    /dev/nvidiactl\n";
    for (const auto& line : maps) out << line << "\n";
  }
  // The unix socket table every process of `netns` sees.
  void unix_socket(const std::string& netns, unsigned long inode, const std::string& path) {
    unix_tables[netns] += "00000000deadbeef: 00000002 00000000 00000000 0002 01 " + std::to_string(inode) + " " +
                          path + "\n";
  }
  // Writes each process's net/unix from its namespace's table (call after every process and socket is known).
  void finish() {
    for (const auto& entry : fs::directory_iterator(root)) {
      const std::string ns = fs::read_symlink(entry.path() / "ns" / "net").string();
      const std::string id = ns.substr(5, ns.size() - 6);
      std::ofstream(entry.path() / "net" / "unix")
          << "Num       RefCount Protocol Flags    Type St Inode Path\n" << unix_tables[id];
    }
  }
};

}  // namespace

TEST_CASE("two NCCL ranks (P2P over cuMem): each holds its NCCL socket; both are named", "[unit]") {
  FakeProc proc;
  proc.unix_socket("4026531840", 15518, "@tmp/nccl-socket-0-1e5819654a190a1f" + kPadding);
  proc.unix_socket("4026531840", 30821, "@tmp/nccl-socket-1-9f6b565475da797c" + kPadding);
  proc.unix_socket("4026531840", 777, "/run/other.sock");
  proc.process(641, "4026531840", {"/dev/nvidia0", "socket:[777]", "socket:[15518]", "pipe:[12]"});
  proc.process(642, "4026531840", {"/dev/nvidia1", "socket:[30821]"});
  proc.process(631, "4026531840", {"pipe:[12]"});   // the launcher: no CUDA, no NCCL
  proc.finish();

  const SharedState state = find_shared_state({631, 641, 642}, proc.root.string());
  REQUIRE(state.by_pid.size() == 2);
  CHECK(state.by_pid.at(641).nccl_sockets == std::vector<std::string>{"@tmp/nccl-socket-0-1e5819654a190a1f"});
  CHECK(state.by_pid.at(642).nccl_sockets == std::vector<std::string>{"@tmp/nccl-socket-1-9f6b565475da797c"});
  CHECK(state.outside_peers.empty());
  CHECK(state.between_processes());
  const std::string text = describe(state);
  CHECK(text.rfind("NCCL/CUDA IPC between processes 641 and 642", 0) == 0);
  CHECK(text.find("pid 641: NCCL socket @tmp/nccl-socket-0-1e5819654a190a1f") != std::string::npos);
}

TEST_CASE("one rank dumped alone (another container of the pod): its peer in the same netns is named", "[unit]") {
  FakeProc proc;
  proc.unix_socket("4026532001", 100, "@tmp/nccl-socket-0-aaaa" + kPadding);
  proc.unix_socket("4026532001", 200, "@tmp/nccl-socket-1-bbbb" + kPadding);
  proc.unix_socket("4026531840", 300, "@tmp/nccl-socket-0-cccc" + kPadding);   // another pod's job
  proc.process(700, "4026532001", {"/dev/nvidia0", "socket:[100]"});
  proc.process(800, "4026532001", {"/dev/nvidia1", "socket:[200]"});
  proc.process(900, "4026531840", {"/dev/nvidia1", "socket:[300]"});
  proc.finish();

  const SharedState state = find_shared_state({700}, proc.root.string());
  REQUIRE(state.by_pid.size() == 1);
  CHECK(state.outside_peers == std::vector<int>{800});
  CHECK(state.between_processes());
  CHECK(describe(state).rfind("NCCL/CUDA IPC between processes 700 and 800 (800 is not part of this dump)", 0) == 0);
}

TEST_CASE("legacy CUDA IPC (NCCL_CUMEM_ENABLE=0): the /dev/shm/nccl-* mapping is evidence too; one process alone "
          "shares nothing with another", "[unit]") {
  FakeProc proc;
  proc.process(643, "4026531840", {"/dev/nvidia0", "/dev/shm/nccl-38Jos9 (deleted)"},
               {"7f1000000000-7f1000400000 rw-s 00000000 00:19 51 /dev/shm/nccl-38Jos9 (deleted)"});
  proc.finish();

  const SharedState state = find_shared_state({643}, proc.root.string());
  REQUIRE(state.by_pid.count(643) == 1);
  CHECK(state.by_pid.at(643).nccl_sockets.empty());
  CHECK(state.by_pid.at(643).nccl_segments == std::vector<std::string>{"/dev/shm/nccl-38Jos9 (deleted)"});
  CHECK_FALSE(state.between_processes());
  CHECK(describe(state).find("no other process in its network namespace has one") != std::string::npos);
}

TEST_CASE("a single-GPU CUDA process with unrelated sockets and shared memory is not refused", "[unit]") {
  FakeProc proc;
  proc.unix_socket("4026531840", 55, "@/containerd-shim/abc.sock");
  proc.unix_socket("4026531840", 66, "@tmp/nccl-socket-0-ffff" + kPadding);   // someone else's, not held by 500
  proc.process(500, "4026531840", {"/dev/nvidia0", "/dev/nvidiactl", "socket:[55]", "socket:[12345]"},
               {"7f2000000000-7f2000001000 rw-s 00000000 00:01 9 /dev/zero (deleted)",
                "7f3000000000-7f3000001000 rw-s 00000000 00:19 52 /dev/shm/torch_123_456"});
  proc.process(501, "4026531840", {"socket:[66]"});
  proc.finish();

  const SharedState state = find_shared_state({500}, proc.root.string());
  CHECK_FALSE(state.any());
  CHECK(state.outside_peers.empty());   // peers are only looked for when the dump itself shares state
}

TEST_CASE("a process that is gone or unreadable shows no evidence", "[unit]") {
  FakeProc proc;
  fs::create_directories(proc.root);
  CHECK_FALSE(find_shared_state({4242}, proc.root.string()).any());
}

TEST_CASE("only drivers from r610 restore CUDA state shared between processes", "[unit]") {
  CHECK_FALSE(driver_restores_shared_state("580.159.04"));
  CHECK_FALSE(driver_restores_shared_state("590.44.01"));
  CHECK_FALSE(driver_restores_shared_state("595.10"));
  CHECK(driver_restores_shared_state("610.25.01"));
  CHECK(driver_restores_shared_state("615.1"));
  CHECK_FALSE(driver_restores_shared_state(""));
  CHECK_FALSE(driver_restores_shared_state("unknown"));
}

TEST_CASE("a process started by cuda-checkpoint --launch-job is known by its environment", "[unit]") {
  FakeProc proc;
  fs::create_directories(proc.dir(10));
  fs::create_directories(proc.dir(11));
  using namespace std::string_literals;
  const std::string with_job = "PATH=/usr/bin\0CUDA_CHECKPOINT_JOB_FILE=/proc/self/fd/3\0RANK=0\0"s;
  const std::string without = "PATH=/usr/bin\0XCUDA_CHECKPOINT_JOB_FILE=1\0"s;
  std::ofstream(proc.dir(10) / "environ", std::ios::binary) << with_job;
  std::ofstream(proc.dir(11) / "environ", std::ios::binary) << without;
  CHECK(in_checkpoint_job(10, proc.root.string()));
  CHECK_FALSE(in_checkpoint_job(11, proc.root.string()));
  CHECK_FALSE(in_checkpoint_job(12, proc.root.string()));
}
