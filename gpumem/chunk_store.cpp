#include "gpumem/chunk_store.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

// The low-level SHA-256 calls: one context on the stack, no provider machinery (the one-shot EVP calls load
// OpenSSL's configuration, which has no place inside CRIU).
#define OPENSSL_API_COMPAT 10101
#include <openssl/sha.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

#include "base/byte_io.h"
#include "base/errno_text.h"

namespace gpuckpt::chunk_store {
namespace {

constexpr char kChunkMagic[8] = {'G', 'P', 'U', 'C', 'K', 'C', 'H', 'K'};
constexpr const char* kHexDigits = "0123456789abcdef";

using byte_io::get_le;
using byte_io::put_le;
using byte_io::read_all;

Result<void> write_exact(int fd, iovec* iov, int count, const std::string& name) {
  int first = 0;
  for (;;) {
    while (first < count && iov[first].iov_len == 0) ++first;   // nothing left to write there (writev would say 0)
    if (first == count) break;
    const ssize_t n = ::writev(fd, iov + first, count - first);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      return make_error("writing " + name + ": " + errno_text(err), err);
    }
    for (auto done = static_cast<std::size_t>(n); done > 0 && first < count;) {
      const std::size_t step = std::min(done, iov[first].iov_len);
      iov[first].iov_base = static_cast<std::byte*>(iov[first].iov_base) + step;
      iov[first].iov_len -= step;
      done -= step;
      if (iov[first].iov_len == 0) ++first;
    }
  }
  return {};
}

Result<int> open_or_make_dir(int parent_fd, const char* name, const std::string& shown) {
  if (::mkdirat(parent_fd, name, 0700) != 0 && errno != EEXIST)
    return make_error("cannot create the chunk store directory " + shown + ": " + errno_text(errno), errno);
  const int fd = ::openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return make_error("cannot open the chunk store directory " + shown + ": " + errno_text(errno), errno);
  return fd;
}

}  // namespace

std::string ref_name(std::string_view checkpoint, int vpid) {
  return std::string(checkpoint) + "-" + std::to_string(vpid) + ".json";
}

std::string pages_ref_name(std::string_view checkpoint, int pages_id) {
  return std::string(checkpoint) + "-pages-" + std::to_string(pages_id) + ".json";
}

bool is_ref_name(std::string_view name) {
  constexpr std::string_view suffix = ".json";
  constexpr std::string_view pages = "pages-";
  if (name.size() < 32 + 2 + suffix.size() || !name.ends_with(suffix) || name[32] != '-' ||
      !is_lower_hex(name.substr(0, 32), 32))
    return false;
  std::string_view digits = name.substr(33, name.size() - 33 - suffix.size());
  if (digits.starts_with(pages)) digits.remove_prefix(pages.size());
  if (digits.size() > 7) return false;
  return !digits.empty() && digits[0] != '0' &&
         digits.find_first_not_of("0123456789") == std::string_view::npos;
}

std::string Digest::hex() const {
  std::string out(kDigestHexChars, '0');
  for (std::size_t i = 0; i < kDigestBytes; ++i) {
    out[2 * i] = kHexDigits[bytes[i] >> 4];
    out[2 * i + 1] = kHexDigits[bytes[i] & 0xf];
  }
  return out;
}

Digest sha256(std::span<const std::byte> data) {
  Digest d;
  SHA256_CTX context;
  SHA256_Init(&context);
  SHA256_Update(&context, data.data(), data.size());
  SHA256_Final(d.bytes.data(), &context);
  return d;
}

bool is_lower_hex(std::string_view text, std::size_t length) {
  return text.size() == length &&
         std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

Result<Digest> parse_digest(std::string_view hex, std::string_view what) {
  auto refuse = [&] {
    // The value is untrusted: show its length, never the value itself beyond a short prefix.
    std::string shown;
    for (char c : hex.substr(0, 16)) shown += (c >= 0x20 && c < 0x7f) ? c : '?';
    return make_error(std::string(what) + " is not a SHA-256 digest (" + std::to_string(kDigestHexChars) +
                      " lowercase hex digits): '" + shown + (hex.size() > 16 ? "...'" : "'") + ", " +
                      std::to_string(hex.size()) + " characters", EINVAL);
  };
  if (!is_lower_hex(hex, kDigestHexChars)) return refuse();
  Digest d;
  for (std::size_t i = 0; i < kDigestHexChars; ++i) {
    const char c = hex[i];
    const int v = c <= '9' ? c - '0' : c - 'a' + 10;
    d.bytes[i / 2] = static_cast<std::uint8_t>(i % 2 == 0 ? v << 4 : d.bytes[i / 2] | v);
  }
  return d;
}

std::uint32_t layout_version(std::uint8_t encoding) {
  return encoding == 0 ? kAlignedChunkVersion : kPackedChunkVersion;   // gpu_image::Encoding::Raw is 0
}

std::array<std::byte, kChunkHeaderSize> encode_header(const ChunkHeader& h) {
  std::array<std::byte, kChunkHeaderSize> out{};
  std::memcpy(out.data(), kChunkMagic, sizeof kChunkMagic);
  put_le<std::uint32_t>(out.data(), 8, h.version);
  put_le<std::uint8_t>(out.data(), 12, h.encoding);
  put_le<std::uint32_t>(out.data(), 16, h.raw_size);
  put_le<std::uint32_t>(out.data(), 20, h.stored_size);
  put_le<std::uint64_t>(out.data(), 24, XXH3_64bits(out.data(), 24));
  return out;
}

Result<ChunkHeader> decode_header(std::span<const std::byte> bytes) {
  if (bytes.size() < kChunkHeaderSize) return make_error("shorter than a chunk header", EIO);
  if (std::memcmp(bytes.data(), kChunkMagic, sizeof kChunkMagic) != 0) return make_error("not a gpuckpt chunk", EIO);
  if (get_le<std::uint64_t>(bytes.data(), 24) != XXH3_64bits(bytes.data(), 24))
    return make_error("its header is corrupt", EIO);
  ChunkHeader h;
  h.version = get_le<std::uint32_t>(bytes.data(), 8);
  h.encoding = get_le<std::uint8_t>(bytes.data(), 12);
  h.raw_size = get_le<std::uint32_t>(bytes.data(), 16);
  h.stored_size = get_le<std::uint32_t>(bytes.data(), 20);
  if (h.version > kChunkVersion)
    return make_error("chunk format version " + std::to_string(h.version) + " is newer than this gpuckpt reads (" +
                      std::to_string(kChunkVersion) + ")", EIO);
  if (h.version < kPackedChunkVersion)
    return make_error("its header names chunk format version 0, which does not exist", EIO);
  if (h.version == kAlignedChunkVersion && h.encoding != 0)
    return make_error("its header names chunk format version 2 (payload at 4096, for raw chunks only) with encoding " +
                      std::to_string(h.encoding) + ", not raw (0)", EIO);
  return h;
}

Result<std::unique_ptr<Store>> Store::open(const std::filesystem::path& root, bool create) {
  if (!root.is_absolute() || root.lexically_normal() != root)
    return make_error("the chunk store path '" + root.string() + "' must be an absolute path without . or .. parts");
  if (create) {
    std::error_code ec;
    // Parents as well (the shared volume's mount point exists; a node's state dir may not yet).
    std::filesystem::path made;
    for (const auto& part : root) {
      made /= part;
      if (::mkdir(made.c_str(), 0700) != 0 && errno != EEXIST)
        return make_error("cannot create the chunk store " + root.string() + " (at " + made.string() + "): " +
                          errno_text(errno) + ". Make the directory, or set GPUCKPT_GPU_STORE to a writable one",
                          errno);
    }
  }
  std::unique_ptr<Store> store(new Store());
  store->root_ = root;
  store->root_fd_ = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (store->root_fd_ < 0)
    return make_error("cannot open the chunk store " + root.string() + ": " + errno_text(errno) +
                      (errno == ENOENT ? ". Mount the store there (a shared volume) or set GPUCKPT_GPU_STORE to where "
                                         "it is" : ""), errno);
  if (create) {
    GPUCKPT_TRY(store->hash_fd_, open_or_make_dir(store->root_fd_, kHashName, (root / kHashName).string()));
  } else {
    store->hash_fd_ = ::openat(store->root_fd_, kHashName, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (store->hash_fd_ < 0)
      return make_error("the chunk store " + root.string() + " holds no chunks (" + (root / kHashName).string() + ": " +
                        errno_text(errno) + ")", errno);
  }
  return store;
}

Store::~Store() {
  if (hash_fd_ >= 0) ::close(hash_fd_);
  if (root_fd_ >= 0) ::close(root_fd_);
}

std::string Store::relative_path(const Digest& d) const {
  const std::string hex = d.hex();
  return std::string(kHashName) + "/" + hex.substr(0, 2) + "/" + hex;
}

struct Store::OpenChunk {
  int fd = -1;
  ChunkHeader header;
  // The header's bytes as the file holds them: a packed file's are its version-1 form already.
  std::array<std::byte, kChunkHeaderSize> header_bytes{};
};

Result<Store::OpenChunk> Store::open_chunk(const Digest& d) const {
  const std::string hex = d.hex();
  const std::string inside = hex.substr(0, 2) + "/" + hex;
  int fd = ::openat(hash_fd_, inside.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT && rescue(d)) fd = ::openat(hash_fd_, inside.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return make_error(path_of(d).string() + ": " + errno_text(errno), errno);
  const std::string shown = path_of(d).string();
  OpenChunk chunk;
  struct stat st {};
  Result<ChunkHeader> header = make_error("", EIO);
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    header = make_error(shown + " is not a regular file", EIO);
  } else if (auto ok = read_all(fd, chunk.header_bytes.data(), kChunkHeaderSize, 0, shown); !ok) {
    header = ok.error();
  } else {
    header = decode_header(chunk.header_bytes);
    if (!header) header = make_error(shown + ": " + header.error().message, EIO);
    // The padding of an aligned file is not read: nothing reads it, and the payload's digest is checked by readers.
    else if (static_cast<std::uint64_t>(st.st_size) != header->file_size())
      header = make_error(shown + " has " + std::to_string(st.st_size) + " bytes, its header says " +
                          std::to_string(header->file_size()) + " (chunk format version " +
                          std::to_string(header->version) + ", payload at " +
                          std::to_string(header->payload_offset()) + ")", EIO);
  }
  if (!header) {
    ::close(fd);
    return header.error();
  }
  chunk.fd = fd;
  chunk.header = *header;
  return chunk;
}

Result<ChunkHeader> Store::stat(const Digest& d) const {
  GPUCKPT_TRY(const auto chunk, open_chunk(d));
  ::close(chunk.fd);
  return chunk.header;
}

Result<MappableChunk> Store::open_mappable(const Digest& d) const {
  GPUCKPT_TRY(const auto chunk, open_chunk(d));
  if (chunk.header.version != kAlignedChunkVersion) {
    ::close(chunk.fd);
    return make_error(path_of(d).string() + " holds " + (chunk.header.encoding == 0 ? std::string("a raw chunk in "
                      "chunk format version 1 (written before version 2 aligned raw payloads)") : "a compressed chunk "
                      "(encoding " + std::to_string(chunk.header.encoding) + ")") + ": its payload cannot be mapped",
                      ENOTSUP);
  }
  return MappableChunk{chunk.fd, chunk.header};
}

Result<int> Store::fanout_dir(const Digest& d) {
  const std::string name = d.hex().substr(0, 2);
  auto fd = open_or_make_dir(hash_fd_, name.c_str(), (root_ / kHashName / name).string());
  if (fd) {
    std::lock_guard lock(mutex_);
    unsynced_dirs_.insert(name);
  }
  return fd;
}

Result<void> Store::put(const Digest& d, const ChunkHeader& header, std::span<const std::byte> payload) {
  static std::atomic<std::uint64_t> sequence{0};
  // Unique among the writers of every node sharing the store: a random token per process and a sequence.
  static const std::uint64_t token = (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
  if (payload.size() != header.stored_size) return make_error("internal: chunk payload size mismatch", EINVAL);
  GPUCKPT_TRY(const int dir_fd, fanout_dir(d));
  const std::string hex = d.hex();
  const std::string temp = "." + hex + "." + std::to_string(token) + "." + std::to_string(sequence++) + ".partial";
  const std::string shown = (root_ / kHashName / hex.substr(0, 2) / temp).string();
  Result<void> result;
  const int fd = ::openat(dir_fd, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    result = make_error("creating " + shown + ": " + errno_text(errno), errno);
  } else {
    ChunkHeader laid_out = header;
    laid_out.version = layout_version(header.encoding);
    auto bytes = encode_header(laid_out);
    // Zeros from the header's end to the payload: none for the packed layout, up to 4096 for the aligned one.
    static const std::array<std::byte, kAlignedPayloadOffset - kChunkHeaderSize> padding{};
    iovec iov[3] = {{bytes.data(), bytes.size()},
                    {const_cast<std::byte*>(padding.data()), laid_out.payload_offset() - kChunkHeaderSize},
                    {const_cast<std::byte*>(payload.data()), payload.size()}};
    result = write_exact(fd, iov, 3, shown);
    if (result && ::fsync(fd) != 0) result = make_error("fsync of " + shown + ": " + errno_text(errno), errno);
    ::close(fd);
    if (result && ::renameat(dir_fd, temp.c_str(), dir_fd, hex.c_str()) != 0)
      result = make_error("renaming " + shown + " to its digest: " + errno_text(errno), errno);
    if (!result) (void)::unlinkat(dir_fd, temp.c_str(), 0);
  }
  ::close(dir_fd);
  return result;
}

Result<void> Store::sync() {
  std::set<std::string> dirs;
  {
    std::lock_guard lock(mutex_);
    dirs.swap(unsynced_dirs_);
  }
  for (const auto& name : dirs) {
    const int fd = ::openat(hash_fd_, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || (::fsync(fd) != 0 && errno != EINVAL)) {
      const int err = errno;
      if (fd >= 0) ::close(fd);
      return make_error("fsync of " + (root_ / kHashName / name).string() + ": " + errno_text(err), err);
    }
    ::close(fd);
  }
  if ((::fsync(hash_fd_) != 0 && errno != EINVAL) || (::fsync(root_fd_) != 0 && errno != EINVAL))
    return make_error("fsync of the chunk store " + root_.string() + ": " + errno_text(errno), errno);
  return {};
}

Result<void> Store::read(const Digest& d, std::uint64_t max_size, std::vector<std::byte>& out) const {
  GPUCKPT_TRY(const auto chunk, open_chunk(d));
  const std::string shown = path_of(d).string();
  const ChunkHeader& header = chunk.header;
  const std::uint64_t wire_size = kChunkHeaderSize + std::uint64_t{header.stored_size};
  Result<void> result;
  if (wire_size > max_size) {
    result = make_error(shown + " holds " + std::to_string(wire_size) + " bytes of chunk, more than the " +
                        std::to_string(max_size) + " it may", EIO);
  } else {
    out.resize(static_cast<std::size_t>(wire_size));
    if (header.version == kPackedChunkVersion) {
      std::memcpy(out.data(), chunk.header_bytes.data(), kChunkHeaderSize);
    } else {
      ChunkHeader packed = header;
      packed.version = kPackedChunkVersion;
      const auto bytes = encode_header(packed);
      std::memcpy(out.data(), bytes.data(), kChunkHeaderSize);
    }
    result = read_all(chunk.fd, out.data() + kChunkHeaderSize, header.stored_size, header.payload_offset(), shown);
  }
  ::close(chunk.fd);
  return result;
}

int rename_noreplace(int from_dir_fd, const char* from, int to_dir_fd, const char* to) {
  if (::renameat2(from_dir_fd, from, to_dir_fd, to, RENAME_NOREPLACE) == 0) return 0;
  if (errno != EINVAL) return -1;
  if (::linkat(from_dir_fd, from, to_dir_fd, to, 0) != 0) return -1;
  (void)::unlinkat(from_dir_fd, from, 0);
  return 0;
}

bool Store::rescue(const Digest& d) const {
  const int trash_fd = ::openat(root_fd_, kTrashDir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (trash_fd < 0) return false;
  const std::string hex = d.hex();
  const std::string fanout = hex.substr(0, 2);
  bool moved = false;
  const int dir_fd = ::openat(hash_fd_, fanout.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd >= 0) {
    moved = rename_noreplace(trash_fd, hex.c_str(), dir_fd, hex.c_str()) == 0;
    ::close(dir_fd);
  }
  ::close(trash_fd);
  return moved;
}

Result<void> Store::touch(const Digest& d) const {
  const std::string hex = d.hex();
  const std::string inside = hex.substr(0, 2) + "/" + hex;
  if (::utimensat(hash_fd_, inside.c_str(), nullptr, AT_SYMLINK_NOFOLLOW) == 0) return {};
  if (errno == ENOENT && rescue(d) && ::utimensat(hash_fd_, inside.c_str(), nullptr, AT_SYMLINK_NOFOLLOW) == 0)
    return {};
  return make_error("cannot mark " + path_of(d).string() + " as in use: " + errno_text(errno), errno);
}

Result<int> Store::open_refs_dir() const {
  return open_or_make_dir(root_fd_, kRefsDir, (root_ / kRefsDir).string());
}

Result<int> Store::open_trash_dir() const {
  return open_or_make_dir(root_fd_, kTrashDir, (root_ / kTrashDir).string());
}

namespace {

// What a refused reference names: the checkpoint and its process, and what to do.
Error ref_conflict(const std::filesystem::path& shown, const std::string& name) {
  const std::string checkpoint = name.substr(0, 32);
  const std::string vpid = name.substr(33, name.size() - 33 - 5);
  return make_error("the chunk store reference " + shown.string() + " of checkpoint " + checkpoint + " (process " +
                    vpid + ") is kept with other content: refused, nothing replaced (the kept checkpoint's chunks "
                    "would be left to garbage collection). Checkpoint ids travel with archives, so this is another "
                    "archive claiming a checkpoint this store keeps; to replace it on purpose, delete that "
                    "checkpoint's archive and run `gpuckpt store unref " + checkpoint + "` first", EEXIST);
}

}  // namespace

Result<void> Store::check_ref(const std::string& name, std::string_view text) const {
  if (!is_ref_name(name)) return make_error("internal: '" + name + "' is not a reference name", EINVAL);
  // One byte more than `text`: a longer file differs without being read whole.
  auto kept = read_ref(name, text.size() + 1);
  if (kept) return *kept == text ? Result<void>() : ref_conflict(root_ / kRefsDir / name, name);
  if (kept.error().errno_value == ENOENT) return {};
  if (kept.error().errno_value == EIO) return ref_conflict(root_ / kRefsDir / name, name);   // larger, or no file
  return kept.error();
}

Result<bool> Store::put_ref(const std::string& name, std::string_view text) {
  GPUCKPT_TRY_VOID(check_ref(name, text));
  GPUCKPT_TRY(const int dir_fd, open_refs_dir());
  static std::atomic<std::uint64_t> sequence{0};
  const std::string temp = "." + name + "." + std::to_string(::getpid()) + "." + std::to_string(sequence++) + ".partial";
  const std::string shown = (root_ / kRefsDir / name).string();
  Result<bool> result = true;
  const int fd = ::openat(dir_fd, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    result = make_error("creating the chunk store reference " + shown + ": " + errno_text(errno), errno);
  } else {
    iovec iov[1] = {{const_cast<char*>(text.data()), text.size()}};
    if (auto written = write_exact(fd, iov, 1, shown); !written) result = written.error();
    else if (::fsync(fd) != 0) result = make_error("fsync of " + shown + ": " + errno_text(errno), errno);
    ::close(fd);
    // Never over an existing name (on NFS and sshfs too), so a writer racing this one cannot have its reference
    // replaced either.
    if (result && rename_noreplace(dir_fd, temp.c_str(), dir_fd, name.c_str()) != 0) {
      const int err = errno;
      if (err != EEXIST) {
        result = make_error("renaming the chunk store reference " + shown + " into place: " + errno_text(err), err);
      } else {
        auto same = check_ref(name, text);
        result = same ? Result<bool>(false) : Result<bool>(same.error());
      }
    }
    if (!result || !*result) (void)::unlinkat(dir_fd, temp.c_str(), 0);
    if (result && *result && ::fsync(dir_fd) != 0 && errno != EINVAL)
      result = make_error("fsync of " + (root_ / kRefsDir).string() + ": " + errno_text(errno), errno);
  }
  ::close(dir_fd);
  return result;
}

Result<bool> Store::remove_ref(const std::string& name, std::optional<std::string_view> only_if) {
  if (!is_ref_name(name))
    return make_error("'" + name + "' is not a chunk store reference name (<checkpoint>-<pid>.json)", EINVAL);
  // References are never replaced (put_ref), so bytes found equal here are still those when it is unlinked.
  if (only_if)
    if (auto kept = check_ref(name, *only_if); !kept) return kept.error().errno_value == EEXIST ? Result<bool>(false)
                                                                                                : kept.error();
  GPUCKPT_TRY(const int dir_fd, open_refs_dir());
  Result<bool> removed = true;
  if (::unlinkat(dir_fd, name.c_str(), 0) != 0) {
    removed = errno == ENOENT ? Result<bool>(false)
                              : make_error("removing " + (root_ / kRefsDir / name).string() + ": " + errno_text(errno),
                                           errno);
  } else if (::fsync(dir_fd) != 0 && errno != EINVAL) {
    removed = make_error("fsync of " + (root_ / kRefsDir).string() + ": " + errno_text(errno), errno);
  }
  ::close(dir_fd);
  return removed;
}

Result<std::vector<std::string>> Store::list_refs() const {
  const int fd = ::openat(root_fd_, kRefsDir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::vector<std::string>{};
    return make_error("cannot open " + (root_ / kRefsDir).string() + ": " + errno_text(errno), errno);
  }
  DIR* dir = ::fdopendir(fd);
  if (dir == nullptr) {
    ::close(fd);
    return make_error("cannot read " + (root_ / kRefsDir).string() + ": " + errno_text(errno), errno);
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(dir))
    if (is_ref_name(e->d_name)) names.emplace_back(e->d_name);
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

Result<std::string> Store::read_ref(const std::string& name, std::size_t max_bytes) const {
  const std::string shown = (root_ / kRefsDir / name).string();
  if (!is_ref_name(name)) return make_error("internal: '" + name + "' is not a reference name", EINVAL);
  const int dir_fd = ::openat(root_fd_, kRefsDir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (dir_fd < 0) return make_error("cannot open " + shown + ": " + errno_text(errno), errno);
  const int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  const int open_errno = errno;
  ::close(dir_fd);
  if (fd < 0) return make_error("cannot open " + shown + ": " + errno_text(open_errno), open_errno);
  struct stat st {};
  Result<std::string> text = std::string();
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    text = make_error(shown + " is not a regular file", EIO);
  } else if (static_cast<std::uint64_t>(st.st_size) > max_bytes) {
    text = make_error(shown + " is larger than " + std::to_string(max_bytes) + " bytes", EIO);
  } else {
    text->resize(static_cast<std::size_t>(st.st_size));
    if (auto ok = read_all(fd, reinterpret_cast<std::byte*>(text->data()), text->size(), 0, shown); !ok)
      text = ok.error();
  }
  ::close(fd);
  return text;
}

}  // namespace gpuckpt::chunk_store
