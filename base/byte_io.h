// Little-endian fields in byte buffers and whole-range reads from a file: what the GPU memory image
// (gpu_image.cpp) and the chunk store (chunk_store.cpp) both read and write with. Every host gpuckpt runs on is
// little-endian, like the formats.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "base/result.h"

namespace gpuckpt::byte_io {

template <class T>
void put_le(std::byte* base, std::size_t at, T value) {
  std::memcpy(base + at, &value, sizeof value);
}

template <class T>
T get_le(const std::byte* base, std::size_t at) {
  T value;
  std::memcpy(&value, base + at, sizeof value);
  return value;
}

// `size` bytes of `fd` from `offset` into `data`; a short file is an error naming `name` as truncated. A read that
// ends early in a file long enough, or whose file can no longer be looked at, is the filesystem's failure (a
// network filesystem whose server went away returns short reads), not the file's, and is said so.
inline Result<void> read_all(int fd, std::byte* data, std::size_t size, std::uint64_t offset,
                             const std::string& name) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, data, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error("reading " + name + ": " + std::strerror(errno), errno);
    if (n == 0) {
      struct stat st {};
      if (::fstat(fd, &st) != 0)
        return make_error("reading " + name + ": " + std::strerror(errno) + " (its filesystem stopped answering)", errno);
      if (static_cast<std::uint64_t>(st.st_size) > offset)
        return make_error("reading " + name + ": its filesystem returned no bytes at offset " + std::to_string(offset) +
                              " of its " + std::to_string(st.st_size) + " (a network filesystem whose server went away?)",
                          EIO);
      return make_error(name + " ends early: it is truncated", EIO);
    }
    data += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return {};
}

}  // namespace gpuckpt::byte_io
