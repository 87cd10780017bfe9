// The CRIU process that loaded the plugin: which plugin ABI it speaks and the services it exports.
// Everything is found at run time through the dynamic symbol table (dlsym(RTLD_DEFAULT)), so one .so works
// in CRIU 4.0, 4.1 and 4.2 and declines cleanly elsewhere. The lookup is a seam: tests pass a fake table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/result.h"
#include "criu-plugin/criu_abi.h"

namespace gpuckpt::criu {

struct SymbolInfo {
  void* address = nullptr;
  std::size_t size = 0;   // st_size from the ELF symbol table; 0 when unknown
};
using SymbolLookup = std::function<std::optional<SymbolInfo>(const char* name)>;

// The symbols of the running process (CRIU exports its own with --export-dynamic).
SymbolLookup process_symbols();

struct HostAbi {
  unsigned hook_count = 0;   // CRIU's CR_PLUGIN_HOOK__MAX; 0 = not running inside CRIU
  bool restore_ext_file_has_retry = false;
  bool fd_store_at_init = false;   // CRIU's fdstore exists when the plugin's init(RESTORE) runs (criu_abi.h)
  std::string evidence;      // how hook_count was found, for the log

  bool supported() const { return hook_count >= kMinimumHostHooks; }
  // What the descriptor announces: never more than the host has (CRIU refuses that) nor than we know.
  unsigned max_hooks() const;
};

// hook_count comes from the size of CRIU's `cr_plugin_ctl` (a list head plus one list head per hook:
// 16 + 16 * hooks bytes), which is exact for every release; without sizes it falls back to marker symbols.
HostAbi detect_host_abi(const SymbolLookup& lookup);

// Binds the services below to `lookup`'s symbols. Called once from the plugin's constructor.
void bind_host(const SymbolLookup& lookup);
const HostAbi& host_abi();

// CRIU's log (print_on_level); false when CRIU's logger is not available.
bool log_to_criu(unsigned level, const std::string& line);

// The image directory CRIU is reading or writing (criu_get_image_dir()), -1 when unknown.
int image_dir_fd();

// Names the plugin in the image inventory's plugins field, once per process (CRIU >= 4.0; a no-op before).
Result<void> add_to_inventory(const char* plugin_name);

// Dump: whether add_to_inventory(plugin_name) succeeded in this process, so a restore of these images will run the
// plugin (false on a CRIU without the inventory's plugins field: nothing can be sure of that there).
bool added_to_inventory(const char* plugin_name);

// Restore: whether the image's inventory lists `plugin_name`. Removes it from CRIU's list of plugins the
// image requires, so call it exactly once. True for images without a plugins field (older CRIU wrote them).
bool take_from_inventory(const char* plugin_name);

// CRIU's opts.final_state for this dump (kTaskAlive with --leave-running), or -1 when unknown.
int final_state();

// What is left of CRIU's freeze timeout (it arms SIGALRM with --timeout before seizing tasks), in ms; 0 when
// no alarm is armed.
unsigned remaining_alarm_ms();
bool alarm_timed_out();

// Runs madvise(advice) on each [start, start + length) inside task `pid`, which CRIU has seized and stopped
// (compel's syscall injection, from CRIU's main thread: the tracer). Call only from a hook CRIU runs on its main
// thread. Dump: MADV_DONTNEED drops the staged pages, so CRIU's page dump records the ranges as empty. Restore:
// MADV_HUGEPAGE lets the fill fault the staging memory in as huge pages.
struct MemoryRange {
  std::uint64_t start = 0;
  std::uint64_t length = 0;
};
bool can_inject_syscalls();
Result<void> madvise_in_task(int pid, const std::vector<MemoryRange>& ranges, int advice, const char* advice_name);

// Syscalls run inside task `pid`, which CRIU has seized and stopped, through compel's syscall injection (from
// CRIU's main thread, the tracer, only). compel_prepare reads the task's registers and finds an executable
// mapping to place the syscall instruction at; each call swaps that code in, runs one syscall with all signals
// blocked and puts code, registers and signal mask back. compel also opens one socket in the task's network
// namespace that compel_cure does not close: one descriptor of CRIU's per preparation, gone when CRIU exits.
class TaskSyscalls {
 public:
  static Result<TaskSyscalls> prepare(int pid);
  TaskSyscalls(TaskSyscalls&& other) noexcept : pid_(other.pid_), ctl_(other.ctl_) { other.ctl_ = nullptr; }
  TaskSyscalls& operator=(TaskSyscalls&&) = delete;
  TaskSyscalls(const TaskSyscalls&) = delete;
  ~TaskSyscalls();   // releases the task if release() was not called
  // The syscall's own return value (-errno when it failed inside the task); an error when compel could not run it.
  Result<long> call(long nr, unsigned long a1 = 0, unsigned long a2 = 0, unsigned long a3 = 0, unsigned long a4 = 0,
                    unsigned long a5 = 0, unsigned long a6 = 0);
  Result<void> release();
  int pid() const { return pid_; }

 private:
  TaskSyscalls(int pid, CompelCtl* ctl) : pid_(pid), ctl_(ctl) {}
  int pid_;
  CompelCtl* ctl_;
};

// CRIU's fdstore (criu_abi.h), for fds the main CRIU process hands to the restored processes: CRIU keeps them
// across its own fd handling in those processes, which closes or reuses every fd number that is not its own.
// Usable from the plugin's init(RESTORE) on where host_abi().fd_store_at_init; fd_store_get's fd belongs to the
// caller. Both fail with ENOTSUP where the store is not usable.
Result<int> fd_store_add(int fd);
Result<int> fd_store_get(int id);

// Ask compel to seize tasks with PTRACE_INTERRUPT only (no cgroup freezer), so a plugin can let one thread of
// a frozen task run. Returns false when this CRIU has no such mode.
bool set_interrupt_only_mode();

}  // namespace gpuckpt::criu
