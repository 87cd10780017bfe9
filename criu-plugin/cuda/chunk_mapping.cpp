#include "criu-plugin/cuda/chunk_mapping.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include "base/errno_text.h"
#include "criu-plugin/criu_host.h"
#include "criu-plugin/cuda/memory_copy.h"
#include "criu-plugin/cuda/staging_memory.h"

namespace gpuckpt::cuda {
namespace {

namespace gi = gpu_image;
namespace cs = chunk_store;

using Clock = std::chrono::steady_clock;
constexpr std::size_t kBatch = 64;                  // descriptors per message: well under a task's usual fd limit
constexpr std::uint64_t kMapCountMargin = 4096;     // mappings left for the process after ours

struct Candidate {
  std::size_t entry = 0;
  std::uint64_t address = 0;
  std::uint32_t length = 0;
};

// A chunk file open for mapping: its bytes checked through this descriptor.
struct OpenChunk {
  int fd = -1;
  std::uint64_t offset = 0;
  bool mappable = false;
};

void close_all(std::vector<OpenChunk>& chunks) {
  for (auto& c : chunks)
    if (c.fd >= 0) ::close(c.fd), c.fd = -1;
}

// Opens and checks one chunk: its file through the descriptor that will be sent, its bytes read (into `buffer`,
// which stays in the CPU's cache: a mapping per chunk would cost a TLB shootdown across the pool at each unmap)
// and hashed against the manifest's XXH3-64. Not mappable (ENOTSUP from the store): mappable false, left to the
// copying fill. A chunk whose bytes are not what the manifest says is an error, as in the copying fill.
Result<OpenChunk> open_checked(const gi::StoreReader& reader, const Candidate& c, std::vector<std::byte>& buffer) {
  const gi::ChunkEntry& e = reader.entries()[c.entry];
  const cs::Digest& digest = reader.manifest().digests[c.entry];
  const std::string where = reader.name() + ": chunk " + std::to_string(c.entry) + " (" +
                            reader.store().path_of(digest).string() + ")";
  auto opened = reader.store().open_mappable(digest);
  if (!opened) {
    if (opened.error().errno_value == ENOTSUP) return OpenChunk{};
    return make_error(where + ": " + opened.error().message, opened.error().errno_value);
  }
  OpenChunk chunk{opened->fd, opened->header.payload_offset(), true};
  auto fail = [&](Error error) -> Result<OpenChunk> {
    ::close(chunk.fd);
    return error;
  };
  if (opened->header.raw_size != e.raw_size)
    return fail(make_error(where + " holds " + std::to_string(opened->header.raw_size) + " bytes, the manifest says " +
                           std::to_string(e.raw_size), EBADMSG));
  buffer.resize(c.length);
  for (std::size_t done = 0; done < c.length;) {
    const ssize_t n = ::pread(chunk.fd, buffer.data() + done, c.length - done, static_cast<off_t>(chunk.offset + done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(make_error(where + ": reading it: " + (n < 0 ? std::strerror(errno) : "short file"), EIO));
    done += static_cast<std::size_t>(n);
  }
  if (gi::checksum({buffer.data(), c.length}) != e.checksum)
    return fail(make_error(where + ": its bytes do not match the manifest's XXH3-64 (the file was damaged or replaced "
                           "since it was stored)", EBADMSG));
  return chunk;
}

// Checks the candidates on a pool of threads, in order and ahead of the caller, which takes them batch by batch
// while the previous batch is mapped inside the task. At most kLookahead chunk files are open ahead of it.
class ChunkChecker {
 public:
  static constexpr std::size_t kLookahead = 4 * kBatch;

  ChunkChecker(const gi::StoreReader& reader, const std::vector<Candidate>& candidates, unsigned threads)
      : reader_(reader), candidates_(candidates), slots_(candidates.size()) {
    const unsigned n = static_cast<unsigned>(std::clamp<std::size_t>(candidates.size(), 1, std::max(1u, threads)));
    for (unsigned t = 0; t < n; ++t) {
      try {
        pool_.emplace_back([this] { work(); });
      } catch (const std::system_error&) {
        break;
      }
    }
    if (pool_.empty()) no_pool_ = true;
  }
  ~ChunkChecker() {
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
    for (auto& t : pool_) t.join();
    for (auto& slot : slots_)
      if (slot.chunk && *slot.chunk && (*slot.chunk)->fd >= 0) ::close((*slot.chunk)->fd);
  }
  ChunkChecker(const ChunkChecker&) = delete;
  ChunkChecker& operator=(const ChunkChecker&) = delete;

  // Chunks [from, to), checked; the caller owns their descriptors. The first error among them, if any.
  Result<std::vector<OpenChunk>> take(std::size_t from, std::size_t to) {
    if (no_pool_) {   // no thread could be started: check here
      std::vector<std::byte> buffer;
      for (std::size_t i = from; i < to; ++i) slots_[i].chunk = open_checked(reader_, candidates_[i], buffer);
    }
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] {
      for (std::size_t i = from; i < to; ++i)
        if (!slots_[i].chunk) return false;
      return true;
    });
    std::vector<OpenChunk> out;
    std::optional<Error> error;
    for (std::size_t i = from; i < to; ++i) {
      auto chunk = std::move(*slots_[i].chunk);
      slots_[i].chunk = OpenChunk{};   // taken: the destructor has nothing of it to close
      if (!chunk) {
        if (!error) error = chunk.error();
        continue;
      }
      out.push_back(*chunk);
    }
    taken_ = to;
    lock.unlock();
    changed_.notify_all();
    if (error) {
      close_all(out);
      return *error;
    }
    return out;
  }

 private:
  struct Slot {
    std::optional<Result<OpenChunk>> chunk;   // set once checked
  };

  void work() {
    std::vector<std::byte> buffer;
    for (;;) {
      std::size_t i;
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return stop_ || next_ >= slots_.size() || next_ < taken_ + kLookahead; });
        if (stop_ || next_ >= slots_.size()) return;
        i = next_++;
      }
      auto checked = open_checked(reader_, candidates_[i], buffer);
      {
        std::lock_guard lock(mutex_);
        slots_[i].chunk = std::move(checked);
      }
      changed_.notify_all();
    }
  }

  const gi::StoreReader& reader_;
  const std::vector<Candidate>& candidates_;
  std::vector<Slot> slots_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t next_ = 0, taken_ = 0;
  bool stop_ = false, no_pool_ = false;
  std::vector<std::thread> pool_;
};

// A datagram socket in the network namespace of `pid` (made on a thread of its own: setns changes only the
// calling thread's namespace), so that it can reach an abstract name the task binds there.
Result<int> socket_in_netns_of(int pid) {
  int fd = -1, err = 0;
  std::thread maker([&] {
    const int ns = ::open(("/proc/" + std::to_string(pid) + "/ns/net").c_str(), O_RDONLY | O_CLOEXEC);
    if (ns < 0 || ::setns(ns, CLONE_NEWNET) != 0) {
      err = errno;
      if (ns >= 0) ::close(ns);
      return;
    }
    ::close(ns);
    fd = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) err = errno;
  });
  maker.join();
  if (fd < 0) return make_error("a socket in the network namespace of pid " + std::to_string(pid) + ": " +
                                std::strerror(err), err);
  return fd;
}

Result<void> write_remote(int pid, std::uint64_t remote, const void* data, std::size_t size) {
  return copy_remote(true, pid, remote, static_cast<std::byte*>(const_cast<void*>(data)), size);
}

Result<void> read_remote(int pid, std::uint64_t remote, void* data, std::size_t size) {
  return copy_remote(false, pid, remote, static_cast<std::byte*>(data), size);
}

// The scratch area's layout in the task: its socket's address, then what recvmsg needs.
struct Scratch {
  static constexpr std::uint64_t kAddress = 0, kMsghdr = 128, kIovec = 192, kByte = 208, kControl = 256;
  static constexpr std::size_t kControlBytes = CMSG_SPACE(kBatch * sizeof(int));
  static_assert(kControl + kControlBytes <= 4096, "the scratch area is one page");
};

// The receiving end inside the task: a socket bound to an abstract name, descriptors received batch by batch.
class TaskReceiver {
 public:
  TaskReceiver(criu::TaskSyscalls& task, std::uint64_t scratch) : task_(task), scratch_(scratch) {}

  Result<void> open(const sockaddr_un& address, socklen_t length) {
    GPUCKPT_TRY(const long fd, task_.call(SYS_socket, AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0));
    if (fd < 0)
      return make_error("socket() inside pid " + std::to_string(task_.pid()) + ": " + errno_text(static_cast<int>(-fd)),
                        static_cast<int>(-fd));
    fd_ = static_cast<int>(fd);
    GPUCKPT_TRY_VOID(write_remote(task_.pid(), scratch_ + Scratch::kAddress, &address, length));
    GPUCKPT_TRY(const long bound,
                task_.call(SYS_bind, static_cast<unsigned long>(fd_), scratch_ + Scratch::kAddress, length));
    if (bound != 0)
      return make_error("bind() inside pid " + std::to_string(task_.pid()) + ": " + errno_text(static_cast<int>(-bound)),
                        static_cast<int>(-bound));
    return {};
  }

  // Receives one message of `expected` descriptors; their numbers in the task.
  Result<std::vector<int>> receive(std::size_t expected) {
    const int pid = task_.pid();
    msghdr m{};
    iovec iov{reinterpret_cast<void*>(scratch_ + Scratch::kByte), 1};
    m.msg_iov = reinterpret_cast<iovec*>(scratch_ + Scratch::kIovec);
    m.msg_iovlen = 1;
    m.msg_control = reinterpret_cast<void*>(scratch_ + Scratch::kControl);
    m.msg_controllen = Scratch::kControlBytes;
    GPUCKPT_TRY_VOID(write_remote(pid, scratch_ + Scratch::kMsghdr, &m, sizeof m));
    GPUCKPT_TRY_VOID(write_remote(pid, scratch_ + Scratch::kIovec, &iov, sizeof iov));
    GPUCKPT_TRY(const long got, task_.call(SYS_recvmsg, static_cast<unsigned long>(fd_), scratch_ + Scratch::kMsghdr,
                                           MSG_CMSG_CLOEXEC | MSG_DONTWAIT));
    if (got < 0)
      return make_error("recvmsg() inside pid " + std::to_string(pid) + ": " + errno_text(static_cast<int>(-got)),
                        static_cast<int>(-got));
    msghdr back{};
    GPUCKPT_TRY_VOID(read_remote(pid, scratch_ + Scratch::kMsghdr, &back, sizeof back));
    alignas(cmsghdr) unsigned char control[Scratch::kControlBytes];
    const std::size_t control_length = std::min<std::size_t>(back.msg_controllen, sizeof control);
    GPUCKPT_TRY_VOID(read_remote(pid, scratch_ + Scratch::kControl, control, control_length));
    msghdr local{};
    local.msg_control = control;
    local.msg_controllen = control_length;
    std::vector<int> fds;
    for (cmsghdr* c = CMSG_FIRSTHDR(&local); c != nullptr; c = CMSG_NXTHDR(&local, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const std::size_t n = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (std::size_t k = 0; k < n; ++k) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + k * sizeof(int), sizeof fd);
        fds.push_back(fd);
      }
    }
    received_.insert(received_.end(), fds.begin(), fds.end());
    if ((back.msg_flags & MSG_CTRUNC) != 0 || fds.size() != expected)
      return make_error("pid " + std::to_string(pid) + " received " + std::to_string(fds.size()) + " of " +
                        std::to_string(expected) + " chunk descriptors (its open-file limit?)", EMFILE);
    return fds;
  }

  Result<void> close_in_task(int fd) {
    auto closed = task_.call(SYS_close, static_cast<unsigned long>(fd));
    std::erase(received_, fd);
    GPUCKPT_TRY_VOID(closed);
    return {};
  }

  // Closes `fds` in the task: one close_range() when they are consecutive (they are as a rule: a task gets the
  // lowest free numbers), else, or where close_range is not allowed (an old kernel, a seccomp profile), one by one.
  Result<void> close_all_in_task(const std::vector<int>& fds) {
    if (fds.empty()) return {};
    bool consecutive = true;
    for (std::size_t k = 1; k < fds.size(); ++k) consecutive = consecutive && fds[k] == fds[k - 1] + 1;
    if (consecutive && close_range_works_) {
      GPUCKPT_TRY(const long closed, task_.call(SYS_close_range, static_cast<unsigned long>(fds.front()),
                                                static_cast<unsigned long>(fds.back()), 0));
      if (closed == 0) {
        for (int fd : fds) std::erase(received_, fd);
        return {};
      }
      close_range_works_ = false;
    }
    for (int fd : fds) GPUCKPT_TRY_VOID(close_in_task(fd));
    return {};
  }

  // Closes what is still open in the task: received descriptors not yet closed, and the socket.
  void close_rest() {
    for (int fd : std::vector<int>(received_)) (void)close_in_task(fd);
    if (fd_ >= 0) (void)task_.call(SYS_close, static_cast<unsigned long>(fd_));
    fd_ = -1;
  }

 private:
  criu::TaskSyscalls& task_;
  std::uint64_t scratch_;
  int fd_ = -1;
  std::vector<int> received_;
  bool close_range_works_ = true;
};

Result<void> send_fds(int sock, const sockaddr_un& to, socklen_t to_length, const std::vector<OpenChunk>& chunks) {
  const std::size_t count = chunks.size();
  alignas(cmsghdr) unsigned char control[Scratch::kControlBytes] = {};
  char byte = 'c';
  iovec iov{&byte, 1};
  msghdr m{};
  m.msg_name = const_cast<sockaddr_un*>(&to);
  m.msg_namelen = to_length;
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = control;
  m.msg_controllen = CMSG_SPACE(count * sizeof(int));
  cmsghdr* c = CMSG_FIRSTHDR(&m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(count * sizeof(int));
  for (std::size_t k = 0; k < count; ++k) std::memcpy(CMSG_DATA(c) + k * sizeof(int), &chunks[k].fd, sizeof(int));
  if (::sendmsg(sock, &m, MSG_NOSIGNAL) != 1)
    return make_error(std::string("sending chunk descriptors: ") + std::strerror(errno), errno);
  return {};
}

std::uint64_t max_map_count() {
  std::ifstream f("/proc/sys/vm/max_map_count");
  std::uint64_t n = 65530;   // the kernel's default
  f >> n;
  return n;
}

// The chunks that can be mapped in place: not zero, and whole pages at a page-aligned address.
std::vector<Candidate> mapping_candidates(const gi::StoreReader& reader) {
  std::vector<Candidate> candidates;
  const std::uint64_t page = static_cast<std::uint64_t>(::sysconf(_SC_PAGESIZE));
  for (std::size_t i = 0; i < reader.entries().size(); ++i) {
    const gi::ChunkEntry& e = reader.entries()[i];
    if (e.encoding == gi::Encoding::Zero) continue;
    const std::uint64_t address = reader.regions()[e.region].start + e.chunk * reader.header().chunk_size;
    if (address % page != 0 || e.raw_size % page != 0) continue;   // a partial page: copied
    candidates.push_back({i, address, e.raw_size});
  }
  return candidates;
}

// MAP_FIXED replaces whatever is mapped there: only where the checkpointed staging memory is, and only while the
// task stays under vm.max_map_count (each chunk may split a mapping in two).
Result<void> check_room_to_map(int pid, const std::vector<gi::Region>& regions, std::size_t count) {
  GPUCKPT_TRY(const auto maps, read_maps(pid));
  GPUCKPT_TRY_VOID(regions_are_mapped(regions, maps));
  const std::uint64_t mappings = maps.size();
  if (mappings + count * 2 + kMapCountMargin > max_map_count())
    return make_error("mapping " + std::to_string(count) + " chunks would take pid " + std::to_string(pid) +
                      " past vm.max_map_count (" + std::to_string(max_map_count()) + ", " + std::to_string(mappings) +
                      " in use)", ENOSPC);
  return {};
}

// A random abstract socket name for the receiving end inside the task.
struct AbstractAddress {
  sockaddr_un address{};
  socklen_t length = 0;
};

AbstractAddress receiver_address(int pid) {
  AbstractAddress out;
  out.address.sun_family = AF_UNIX;
  char name[64];
  std::snprintf(name, sizeof name, "gpuckpt-map-%d-%016llx", pid,
                static_cast<unsigned long long>((std::uint64_t{std::random_device{}()} << 32) ^ std::random_device{}()));
  std::memcpy(out.address.sun_path + 1, name, std::strlen(name));   // abstract: sun_path[0] is '\0'
  out.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + std::strlen(name));
  return out;
}

// The checked chunks of one batch that can be mapped, with their candidates; the others are closed and counted.
struct Batch {
  std::vector<OpenChunk> chunks;
  std::vector<Candidate> candidates;
};

Batch mappable_of(const std::vector<OpenChunk>& opened, const std::vector<Candidate>& candidates, std::size_t from,
                  std::uint64_t* unmappable) {
  Batch batch;
  for (std::size_t k = 0; k < opened.size(); ++k) {
    if (opened[k].mappable) {
      batch.chunks.push_back(opened[k]);
      batch.candidates.push_back(candidates[from + k]);
    } else {
      ++*unmappable;
      if (opened[k].fd >= 0) ::close(opened[k].fd);
    }
  }
  return batch;
}

// mmap() inside the task of the chunk file it holds as `remote_fd` over the chunk's place.
Result<void> map_in_task(criu::TaskSyscalls& task, const Candidate& c, int remote_fd, std::uint64_t offset) {
  GPUCKPT_TRY(const long mapped, task.call(SYS_mmap, c.address, c.length, PROT_READ | PROT_WRITE,
                                           MAP_PRIVATE | MAP_FIXED, static_cast<unsigned long>(remote_fd), offset));
  if (static_cast<std::uint64_t>(mapped) == c.address) return {};
  return make_error("mmap() of chunk " + std::to_string(c.entry) + " at " + hex_address(c.address) + " inside pid " +
                        std::to_string(task.pid()) + ": " +
                        (mapped < 0 ? errno_text(static_cast<int>(-mapped))
                                    : "it landed at " + hex_address(static_cast<std::uint64_t>(mapped))),
                    mapped < 0 ? static_cast<int>(-mapped) : EFAULT);
}

// One batch mapped in place: its descriptors sent over `sock` to the task's receiver, each chunk mmap()ed there,
// then the descriptors closed on both sides, whatever failed first (which is returned).
Result<void> map_batch(criu::TaskSyscalls& task, TaskReceiver& receiver, int sock, const AbstractAddress& to,
                       Batch& batch, MappedChunks& result) {
  Result<void> outcome = send_fds(sock, to.address, to.length, batch.chunks);
  std::vector<int> remote;
  if (outcome) {
    auto received = receiver.receive(batch.chunks.size());
    if (received) remote = std::move(*received);
    else outcome = received.error();
  }
  close_all(batch.chunks);
  for (std::size_t k = 0; outcome && k < remote.size(); ++k) {
    const Candidate& c = batch.candidates[k];
    outcome = map_in_task(task, c, remote[k], batch.chunks[k].offset);
    if (outcome) {
      result.in_place[c.entry] = true;
      ++result.chunks;
      result.bytes += c.length;
    }
  }
  if (auto closed = receiver.close_all_in_task(remote); !closed && outcome) outcome = closed.error();
  return outcome;
}

}  // namespace

Result<MappedChunks> map_store_chunks(int pid, const gi::StoreReader& reader, unsigned threads) {
  MappedChunks result;
  result.in_place.assign(reader.entries().size(), false);
  std::vector<Candidate> candidates = mapping_candidates(reader);
  if (candidates.empty()) return result;
  GPUCKPT_TRY_VOID(check_room_to_map(pid, reader.regions(), candidates.size()));
  std::sort(candidates.begin(), candidates.end(),
            [](const Candidate& a, const Candidate& b) { return a.address < b.address; });
  // The scratch area: the start of the last chunk, mapped over in the last batch, after its last use.
  const std::uint64_t scratch = candidates.back().address;

  GPUCKPT_TRY(auto task, criu::TaskSyscalls::prepare(pid));
  GPUCKPT_TRY(const int sock, socket_in_netns_of(pid));
  const AbstractAddress address = receiver_address(pid);
  TaskReceiver receiver(task, scratch);
  Result<void> outcome = receiver.open(address.address, address.length);
  ChunkChecker checker(reader, candidates, threads);
  for (std::size_t from = 0; outcome && from < candidates.size(); from += kBatch) {
    const std::size_t to = std::min(candidates.size(), from + kBatch);
    const auto checking = Clock::now();
    auto opened = checker.take(from, to);
    result.check_seconds += std::chrono::duration<double>(Clock::now() - checking).count();
    const auto in_task = Clock::now();
    if (!opened) {
      outcome = opened.error();
      break;
    }
    Batch batch = mappable_of(*opened, candidates, from, &result.unmappable);
    if (batch.chunks.empty()) continue;
    outcome = map_batch(task, receiver, sock, address, batch, result);
    result.task_seconds += std::chrono::duration<double>(Clock::now() - in_task).count();
  }
  receiver.close_rest();
  ::close(sock);
  if (auto released = task.release(); !released && outcome) outcome = released.error();
  GPUCKPT_TRY_VOID(outcome);
  // The scratch area was written while its chunk was anonymous memory: if that chunk was not mapped after all
  // (not mappable in the store), the copying fill writes it whole, as every chunk that is not zero and not in place.
  return result;
}

std::vector<criu::MemoryRange> store_chunk_mappings(const std::vector<Vma>& maps, const std::string& store_dir) {
  std::string prefix = store_dir;
  while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
  prefix += "/sha256/";
  std::vector<criu::MemoryRange> ranges;
  for (const Vma& v : maps) {
    if (!v.path.starts_with(prefix) || v.end <= v.start) continue;
    if (!ranges.empty() && ranges.back().start + ranges.back().length == v.start) ranges.back().length += v.size();
    else ranges.push_back({v.start, v.size()});
  }
  return ranges;
}

Result<std::uint64_t> release_store_chunks(int pid, const std::string& store_dir) {
  GPUCKPT_TRY(const auto maps, read_maps(pid));
  const auto ranges = store_chunk_mappings(maps, store_dir);
  if (ranges.empty()) return std::uint64_t{0};
  GPUCKPT_TRY(auto task, criu::TaskSyscalls::prepare(pid));
  std::uint64_t bytes = 0;
  Result<void> outcome;
  for (const auto& r : ranges) {
    auto mapped = task.call(SYS_mmap, r.start, r.length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                            static_cast<unsigned long>(-1), 0);
    if (!mapped) {
      outcome = mapped.error();
      break;
    }
    if (static_cast<std::uint64_t>(*mapped) != r.start) {
      outcome = make_error("anonymous mmap() over the chunks at " + hex_address(r.start) + " inside pid " +
                               std::to_string(pid) + ": " +
                               (*mapped < 0 ? errno_text(static_cast<int>(-*mapped))
                                            : "it landed at " + hex_address(static_cast<std::uint64_t>(*mapped))),
                           *mapped < 0 ? static_cast<int>(-*mapped) : EFAULT);
      break;
    }
    bytes += r.length;
  }
  if (auto released = task.release(); !released && outcome) outcome = released.error();
  GPUCKPT_TRY_VOID(outcome);
  return bytes;
}

}  // namespace gpuckpt::cuda
