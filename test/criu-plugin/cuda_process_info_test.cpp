// thread_id_here on fixture /proc trees: the driver's restore thread id, whether it names the thread as the
// container's PID namespace numbers it or as the host does, leads to the thread ptrace must use here.
#include <catch2/catch_test_macros.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "criu-plugin/cuda/process_info.h"

using namespace gpuckpt::cuda;
namespace fs = std::filesystem;

namespace {

struct FakeProc {
  fs::path root = fs::temp_directory_path() / ("gpuckpt-proc-" + std::to_string(::getpid()));
  FakeProc() { fs::remove_all(root); }
  ~FakeProc() { fs::remove_all(root); }
  void task(int pid, int tid, const std::string& nspid) {
    fs::create_directories(root / std::to_string(pid) / "task" / std::to_string(tid));
    std::ofstream(root / std::to_string(pid) / "task" / std::to_string(tid) / "status")
        << "Name:\tgpu_counter\nTgid:\t" << pid << "\nNSpid:\t" << nspid << "\nPPid:\t1\n";
  }
};

}  // namespace

TEST_CASE("the restore thread named in the container's PID namespace is found by its innermost NSpid", "[unit]") {
  FakeProc proc;
  proc.task(52001, 52001, "52001\t1");
  proc.task(52001, 52007, "52007\t7");    // the driver's thread: 7 inside the container
  proc.task(52001, 52009, "52009\t9");
  CHECK(thread_id_here(52001, 7, proc.root.string()) == 52007);
}

TEST_CASE("the restore thread named as the host numbers it is found directly", "[unit]") {
  FakeProc proc;
  proc.task(52001, 52001, "52001\t1");
  proc.task(52001, 52007, "52007\t7");
  CHECK(thread_id_here(52001, 52007, proc.root.string()) == 52007);
}

TEST_CASE("a process in this PID namespace: the thread id is the same number", "[unit]") {
  FakeProc proc;
  proc.task(3100, 3100, "3100");
  proc.task(3100, 3105, "3105");
  CHECK(thread_id_here(3100, 3105, proc.root.string()) == 3105);
}

TEST_CASE("a thread id that is no thread of the process gives -1", "[unit]") {
  FakeProc proc;
  proc.task(3100, 3100, "3100");
  CHECK(thread_id_here(3100, 77, proc.root.string()) == -1);
  CHECK(thread_id_here(4000, 4000, proc.root.string()) == -1);   // no such process
}
