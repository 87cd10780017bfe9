#include "criu-plugin/criu_host.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <set>

namespace gpuckpt::criu {
namespace {

struct Services {
  HostAbi abi;
  PrintOnLevelFn print_on_level = nullptr;
  AddInventoryPluginFn add_inventory_plugin = nullptr;
  CheckAndRemoveInventoryPluginFn check_and_remove_inventory_plugin = nullptr;
  GetImageDirFn get_image_dir = nullptr;
  VoidFn set_compel_interrupt_only_mode = nullptr;
  BoolFn alarm_timeouted = nullptr;
  CompelPrepareFn compel_prepare = nullptr;
  CompelSyscallFn compel_syscall = nullptr;
  CompelCureFn compel_cure = nullptr;
  FdStoreAddFn fdstore_add = nullptr;
  FdStoreGetFn fdstore_get = nullptr;
  const int* final_state = nullptr;   // &opts.final_state (first member of struct cr_options)
  std::mutex inventory_mutex;
  std::set<std::string> added_to_inventory;
};

Services& services() {
  static Services s;
  return s;
}

template <class Fn>
Fn function(const SymbolLookup& lookup, const char* name) {
  auto symbol = lookup(name);
  return symbol ? reinterpret_cast<Fn>(symbol->address) : nullptr;
}

}  // namespace

SymbolLookup process_symbols() {
  return [](const char* name) -> std::optional<SymbolInfo> {
    void* address = dlsym(RTLD_DEFAULT, name);
    if (address == nullptr) return std::nullopt;
    SymbolInfo info{address, 0};
    Dl_info dl{};
    void* entry = nullptr;
    if (dladdr1(address, &dl, &entry, RTLD_DL_SYMENT) != 0 && entry != nullptr)
      info.size = static_cast<const ElfW(Sym)*>(entry)->st_size;
    return info;
  };
}

unsigned HostAbi::max_hooks() const {
  return supported() ? std::min<unsigned>(hook_count, kHookSlots) : 0;
}

HostAbi detect_host_abi(const SymbolLookup& lookup) {
  HostAbi abi;
  constexpr std::size_t kListHead = 16;   // struct list_head { next, prev }
  auto ctl = lookup("cr_plugin_ctl");
  if (ctl && ctl->size > kListHead && (ctl->size - kListHead) % kListHead == 0) {
    abi.hook_count = static_cast<unsigned>((ctl->size - kListHead) / kListHead);
    abi.evidence = "cr_plugin_ctl is " + std::to_string(ctl->size) + " bytes";
  } else if (lookup("check_and_remove_inventory_plugin")) {
    // 4.0 introduced both the inventory plugin list and PAUSE/CHECKPOINT_DEVICES: 12 hooks at least, and
    // announcing 12 is accepted by every later CRIU too.
    abi.hook_count = kMinimumHostHooks;
    abi.evidence = "check_and_remove_inventory_plugin exported (CRIU >= 4.0), size of cr_plugin_ctl unknown";
  } else if (lookup("criu_get_image_dir") || lookup("cr_plugin_init")) {
    abi.hook_count = kResumeDevicesLate + 1;   // 3.x: 10 hooks, no PAUSE/CHECKPOINT_DEVICES
    abi.evidence = "CRIU without an inventory plugin list (older than 4.0)";
  } else {
    abi.evidence = "not loaded by CRIU (no CRIU symbols in this process)";
  }
  // The retry_needed argument is not in 4.2.1 (13 hooks, verified from its criu-plugin.h) but is on criu-dev
  // from RESTORE_INIT (14 hooks) on (criu_abi.h). Below that we use the one-argument form: the two-argument
  // one called with one argument would read a stray register as a pointer.
  abi.restore_ext_file_has_retry = abi.hook_count >= kHooksWithRestoreRetry;
  abi.fd_store_at_init = abi.hook_count >= kHooksWithFdStoreAtInit && lookup("fdstore_add") && lookup("fdstore_get");
  return abi;
}

void bind_host(const SymbolLookup& lookup) {
  Services& s = services();
  s.abi = detect_host_abi(lookup);
  s.print_on_level = function<PrintOnLevelFn>(lookup, "print_on_level");
  s.add_inventory_plugin = function<AddInventoryPluginFn>(lookup, "add_inventory_plugin");
  s.check_and_remove_inventory_plugin =
      function<CheckAndRemoveInventoryPluginFn>(lookup, "check_and_remove_inventory_plugin");
  s.get_image_dir = function<GetImageDirFn>(lookup, "criu_get_image_dir");
  s.set_compel_interrupt_only_mode = function<VoidFn>(lookup, "set_compel_interrupt_only_mode");
  s.alarm_timeouted = function<BoolFn>(lookup, "alarm_timeouted");
  s.compel_prepare = function<CompelPrepareFn>(lookup, "compel_prepare");
  s.compel_syscall = function<CompelSyscallFn>(lookup, "compel_syscall");
  s.compel_cure = function<CompelCureFn>(lookup, "compel_cure");
  s.fdstore_add = function<FdStoreAddFn>(lookup, "fdstore_add");
  s.fdstore_get = function<FdStoreGetFn>(lookup, "fdstore_get");
  auto opts = lookup("opts");
  s.final_state = opts ? static_cast<const int*>(opts->address) : nullptr;
}

const HostAbi& host_abi() { return services().abi; }

bool log_to_criu(unsigned level, const std::string& line) {
  PrintOnLevelFn print = services().print_on_level;
  if (print == nullptr) return false;
  print(level, "gpuckpt: %s\n", line.c_str());
  return true;
}

int image_dir_fd() {
  GetImageDirFn get = services().get_image_dir;
  return get ? get() : -1;
}

Result<void> add_to_inventory(const char* plugin_name) {
  Services& s = services();
  if (s.add_inventory_plugin == nullptr) return {};
  std::lock_guard lock(s.inventory_mutex);
  if (s.added_to_inventory.count(plugin_name) != 0) return {};
  if (s.add_inventory_plugin(plugin_name) != 0)
    return make_error(std::string("CRIU could not add plugin '") + plugin_name + "' to the image inventory",
                      ENOMEM);
  s.added_to_inventory.insert(plugin_name);
  return {};
}

bool added_to_inventory(const char* plugin_name) {
  Services& s = services();
  std::lock_guard lock(s.inventory_mutex);
  return s.add_inventory_plugin != nullptr && s.added_to_inventory.count(plugin_name) != 0;
}

bool take_from_inventory(const char* plugin_name) {
  CheckAndRemoveInventoryPluginFn check = services().check_and_remove_inventory_plugin;
  if (check == nullptr) return true;   // CRIU without the list: the plugin cannot know, so it must look
  return check(plugin_name, std::strlen(plugin_name) + 1);
}

int final_state() {
  const int* state = services().final_state;
  if (state == nullptr) return -1;
  int value = *state;
  return (value >= kTaskAlive && value <= kTaskStopped) ? value : -1;
}

unsigned remaining_alarm_ms() {
  itimerval timer{};
  if (getitimer(ITIMER_REAL, &timer) != 0) return 0;
  auto ms = static_cast<long long>(timer.it_value.tv_sec) * 1000 + timer.it_value.tv_usec / 1000;
  return static_cast<unsigned>(std::clamp<long long>(ms, 0, 24LL * 3600 * 1000));
}

bool alarm_timed_out() {
  BoolFn timed_out = services().alarm_timeouted;
  return timed_out ? timed_out() : false;
}

bool can_inject_syscalls() {
  const Services& s = services();
  return s.compel_prepare != nullptr && s.compel_syscall != nullptr && s.compel_cure != nullptr;
}

Result<TaskSyscalls> TaskSyscalls::prepare(int pid) {
  if (!can_inject_syscalls()) return make_error("this CRIU does not export compel's syscall injection", ENOTSUP);
  CompelCtl* ctl = services().compel_prepare(pid);
  if (ctl == nullptr)
    return make_error("compel could not prepare pid " + std::to_string(pid) + " for a syscall (see CRIU's log)", EIO);
  return TaskSyscalls(pid, ctl);
}

TaskSyscalls::~TaskSyscalls() { (void)release(); }

Result<long> TaskSyscalls::call(long nr, unsigned long a1, unsigned long a2, unsigned long a3, unsigned long a4,
                                unsigned long a5, unsigned long a6) {
  if (ctl_ == nullptr) return make_error("pid " + std::to_string(pid_) + " was released already", EINVAL);
  long ret = 0;
  const int err = services().compel_syscall(ctl_, static_cast<int>(nr), &ret, a1, a2, a3, a4, a5, a6);
  if (err != 0)
    return make_error("compel could not run syscall " + std::to_string(nr) + " inside pid " + std::to_string(pid_) +
                      " (compel error " + std::to_string(err) + ")", EIO);
  return ret;
}

Result<void> TaskSyscalls::release() {
  if (ctl_ == nullptr) return {};
  CompelCtl* ctl = ctl_;
  ctl_ = nullptr;
  if (services().compel_cure(ctl) != 0)
    return make_error("compel could not release pid " + std::to_string(pid_) + " after its syscalls", EIO);
  return {};
}

Result<void> madvise_in_task(int pid, const std::vector<MemoryRange>& ranges, int advice, const char* advice_name) {
  GPUCKPT_TRY(auto task, TaskSyscalls::prepare(pid));
  for (const MemoryRange& r : ranges) {
    auto ret = task.call(SYS_madvise, r.start, r.length, static_cast<unsigned long>(advice));
    if (!ret || *ret != 0) {
      char where[64];
      std::snprintf(where, sizeof where, "0x%llx+%llu", static_cast<unsigned long long>(r.start),
                    static_cast<unsigned long long>(r.length));
      return make_error(std::string("madvise(") + advice_name + ") inside pid " + std::to_string(pid) + " at " +
                        where + " failed (" + (ret ? std::string(std::strerror(static_cast<int>(-*ret))) : ret.error().message) +
                        ")", ret ? static_cast<int>(-*ret) : EIO);
    }
  }
  return task.release();
}

namespace {
// fdstore_add (fd in, id out) and fdstore_get (id in, fd out) have one shape: an int in, a non-negative int out.
Result<int> call_fd_store(FdStoreAddFn fn, int arg, const std::string& what) {
  if (!services().abi.fd_store_at_init || fn == nullptr)
    return make_error("this CRIU has no fdstore usable by plugins (CRIU 4.2 or later has one)", ENOTSUP);
  const int out = fn(arg);
  if (out < 0) return make_error("CRIU's " + what + " failed (see CRIU's log)", EIO);
  return out;
}
}  // namespace

Result<int> fd_store_add(int fd) {
  return call_fd_store(services().fdstore_add, fd, "fdstore_add of fd " + std::to_string(fd));
}

Result<int> fd_store_get(int id) {
  return call_fd_store(services().fdstore_get, id, "fdstore_get of id " + std::to_string(id));
}

bool set_interrupt_only_mode() {
  VoidFn set = services().set_compel_interrupt_only_mode;
  if (set == nullptr) return false;
  set();
  return true;
}

const char* hook_name(unsigned hook) {
  static constexpr const char* kNames[kHookSlots] = {
      "DUMP_UNIX_SK", "RESTORE_UNIX_SK", "DUMP_EXT_FILE", "RESTORE_EXT_FILE", "DUMP_EXT_MOUNT",
      "RESTORE_EXT_MOUNT", "DUMP_EXT_LINK", "HANDLE_DEVICE_VMA", "UPDATE_VMA_MAP", "RESUME_DEVICES_LATE",
      "PAUSE_DEVICES", "CHECKPOINT_DEVICES", "POST_FORKING", "RESTORE_INIT", "DUMP_DEVICES_LATE"};
  return hook < kHookSlots ? kNames[hook] : "?";
}

}  // namespace gpuckpt::criu
