// gpuckpt's own declaration of the CRIU plugin ABI (the binary contract between criu and a plugin .so).
// Written from the facts of CRIU 4.0 - 4.2 (criu/include/criu-plugin.h and criu/plugin.c), not copied:
//  - CRIU dlopen()s every *.so in --libdir, looks up the data symbol CR_PLUGIN_DESC, and refuses the plugin
//    (and with it the whole dump/restore: "Corrupted plugin") when desc.version is newer than its own
//    CRIU_PLUGIN_VERSION or desc.max_hooks exceeds its own hook count.
//  - Hooks are called through desc.hooks[i] for i < max_hooks; a hook returns -ENOTSUP for what it does not
//    own so CRIU offers the call to the next plugin.
//  - Hook counts: 3.17: 10 (up to RESUME_DEVICES_LATE), 4.0 and 4.1.1: 12 (up to CHECKPOINT_DEVICES; 4.1.1
//    verified by loading probe plugins), 4.2 / 4.2.1: 13 (POST_FORKING; verified from the v4.2 tag's header and
//    4.2.1's binary), criu-dev: 14 (RESTORE_INIT, 2025-02) then 15 (DUMP_DEVICES_LATE(int pid), 2025-10, run after
//    every task's memory is dumped), later API headers more (UPDATE_INETSK, DUMP_FINISH).
//  - RESTORE_EXT_FILE takes (int id) in every release up to and including 4.2.1, and (int id, bool *retry_needed)
//    on criu-dev since 2025-02 (files-ext: "Allow plugin files to retry", the commit right before RESTORE_INIT):
//    criu-dev does NOT initialise retry_needed, so a one-argument entry there leaves CRIU reading garbage. A
//    14-or-more-hook CRIU is criu-dev (or a later release) and gets the two-argument entry; a criu-dev build of
//    exactly that one commit (13 hooks with retry) cannot be told from 4.2 and is not supported.
#pragma once

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>

namespace gpuckpt::criu {

constexpr unsigned plugin_version(unsigned major, unsigned minor, unsigned sublevel) {
  return (major << 16) + (minor << 8) + sublevel;
}
// 0.2.0 is what CRIU 3.17 - 4.2 accept (4.2+ knows 0.3.0 and still loads 0.2.0 plugins).
inline constexpr unsigned kPluginVersion = plugin_version(0, 2, 0);

enum Hook : unsigned {
  kDumpUnixSk = 0,
  kRestoreUnixSk = 1,
  kDumpExtFile = 2,
  kRestoreExtFile = 3,
  kDumpExtMount = 4,
  kRestoreExtMount = 5,
  kDumpExtLink = 6,
  kHandleDeviceVma = 7,
  kUpdateVmaMap = 8,
  kResumeDevicesLate = 9,
  kPauseDevices = 10,
  kCheckpointDevices = 11,
  kPostForking = 12,
  kRestoreInit = 13,
  kDumpDevicesLate = 14,
  kHookSlots = 15,   // the hooks gpuckpt knows; the descriptor's array has exactly this many slots
};

// The hooks gpuckpt's device work needs: a CRIU with fewer hooks cannot checkpoint GPUs.
inline constexpr unsigned kMinimumHostHooks = kCheckpointDevices + 1;   // 12: CRIU 4.0
// The first hook count known to come with RESTORE_EXT_FILE(int id, bool *retry_needed) (criu-dev's RESTORE_INIT).
inline constexpr unsigned kHooksWithRestoreRetry = kRestoreInit + 1;
// CRIU's fdstore (fdstore_add / fdstore_get, exported) is set up before the plugins' init(RESTORE) from 4.2 on:
// POST_FORKING (13 hooks) came with the commit that moved cr_plugin_init after fdstore_init (CRIU 497109eb4,
// 2024-11, first released in 4.2). In 4.0 / 4.1 the plugins' init runs first, and fdstore_add would use the
// store before it exists.
inline constexpr unsigned kHooksWithFdStoreAtInit = kPostForking + 1;

enum Stage : int { kStageDump = 0, kStagePreDump = 1, kStageRestore = 2 };

// Log levels of CRIU's print_on_level (LOG_ERROR .. LOG_DEBUG); gpuckpt::log::Level uses the same numbers.
enum LogLevel : unsigned { kLogMsg = 0, kLogError = 1, kLogWarn = 2, kLogInfo = 3, kLogDebug = 4 };

// CRIU's task states as stored in opts.final_state (the first member of struct cr_options in every release).
enum TaskState : int { kTaskAlive = 1, kTaskDead = 2, kTaskStopped = 3 };

extern "C" {

using InitFn = int (*)(int stage);
using ExitFn = void (*)(int stage, int ret);

struct PluginDesc {
  const char* name;
  InitFn init;
  ExitFn exit;
  unsigned int version;
  unsigned int max_hooks;
  void* hooks[kHookSlots];
};

// Hook signatures (argument lists as CRIU calls them).
using DumpExtFileFn = int (*)(int fd, int id);
using RestoreExtFileV1Fn = int (*)(int id);                       // CRIU <= 4.1
using RestoreExtFileV2Fn = int (*)(int id, bool* retry_needed);   // later CRIU
using HandleDeviceVmaFn = int (*)(int fd, const struct stat* st);
using UpdateVmaMapFn = int (*)(const char* path, std::uint64_t addr, std::uint64_t old_pgoff,
                               std::uint64_t* new_pgoff, int* plugin_fd);
using PidHookFn = int (*)(int pid);   // RESUME_DEVICES_LATE, PAUSE_DEVICES, CHECKPOINT_DEVICES, DUMP_DEVICES_LATE
using PostForkingFn = int (*)();

// Functions a CRIU binary exports (it links with --export-dynamic); looked up with dlsym, never linked.
using PrintOnLevelFn = void (*)(unsigned int level, const char* format, ...);
using AddInventoryPluginFn = int (*)(const char* name);
using CheckAndRemoveInventoryPluginFn = bool (*)(const char* name, std::size_t n);
using GetImageDirFn = int (*)();
using VoidFn = void (*)();
using BoolFn = bool (*)();
// compel (CRIU's parasite library, linked into criu and exported): prepare a seized, stopped task for syscall
// injection, run one syscall inside it, and let it go. x86-64 signatures of compel/include/uapi/infect.h.
struct CompelCtl;   // struct parasite_ctl, opaque
using CompelPrepareFn = CompelCtl* (*)(int pid);
using CompelSyscallFn = int (*)(CompelCtl* ctl, int nr, long* ret, unsigned long arg1, unsigned long arg2,
                                unsigned long arg3, unsigned long arg4, unsigned long arg5, unsigned long arg6);
using CompelCureFn = int (*)(CompelCtl* ctl);
// CRIU's fdstore: fdstore_add(fd) keeps a reference to fd's file and returns its id; fdstore_get(id) returns a
// new fd of that file in the calling process (the store is a socket every restored process inherits as a
// CRIU service fd).
using FdStoreAddFn = int (*)(int fd);
using FdStoreGetFn = int (*)(int id);

}  // extern "C"

// The layout CRIU reads; if these fail, CRIU would read garbage from our descriptor.
static_assert(sizeof(void*) == 8, "gpuckpt supports 64-bit CRIU only");
static_assert(offsetof(PluginDesc, name) == 0);
static_assert(offsetof(PluginDesc, init) == 8);
static_assert(offsetof(PluginDesc, exit) == 16);
static_assert(offsetof(PluginDesc, version) == 24);
static_assert(offsetof(PluginDesc, max_hooks) == 28);
static_assert(offsetof(PluginDesc, hooks) == 32);
static_assert(sizeof(PluginDesc) == 32 + 8 * kHookSlots);

const char* hook_name(unsigned hook);   // "PAUSE_DEVICES"; "?" for an unknown number

}  // namespace gpuckpt::criu
