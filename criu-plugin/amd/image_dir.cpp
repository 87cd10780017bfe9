#include "criu-plugin/amd/image_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace gpuckpt::amd {
namespace {

Error io_error(const std::string& what, const std::string& name, int err) {
  return make_error(what + " image " + name + ": " + std::strerror(err), err);
}

}  // namespace

ImageFile::ImageFile(ImageFile&& other) noexcept
    : fd_(other.fd_), name_(std::move(other.name_)), consumed_(other.consumed_) {
  other.fd_ = -1;
}

ImageFile& ImageFile::operator=(ImageFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    name_ = std::move(other.name_);
    consumed_ = other.consumed_;
    other.fd_ = -1;
  }
  return *this;
}

ImageFile::~ImageFile() {
  if (fd_ >= 0) ::close(fd_);
}

Result<void> ImageFile::write_all(const void* data, std::size_t size) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd_, p, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot write", name_, errno);
    }
    p += n;
    size -= static_cast<std::size_t>(n);
  }
  return {};
}

Result<void> ImageFile::write_size_header(std::uint64_t payload_size) {
  unsigned char header[8];
  for (int i = 0; i < 8; ++i) header[i] = static_cast<unsigned char>(payload_size >> (8 * i));
  return write_all(header, sizeof header);
}

Result<void> ImageFile::read_exact(void* data, std::size_t size) {
  auto* p = static_cast<char*>(data);
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::read(fd_, p + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return io_error("cannot read", name_, errno);
    }
    if (n == 0) {
      return make_error("image " + name_ + " is truncated: it ends after " + std::to_string(consumed_ + done) +
                            " bytes, " + std::to_string(size - done) +
                            " more were expected; the checkpoint is incomplete, take it again",
                        EIO);
    }
    done += static_cast<std::size_t>(n);
  }
  consumed_ += done;
  return {};
}

Result<std::uint64_t> ImageFile::read_size_header() {
  unsigned char header[8];
  GPUCKPT_TRY_VOID(read_exact(header, sizeof header));
  std::uint64_t size = 0;
  for (int i = 0; i < 8; ++i) size |= static_cast<std::uint64_t>(header[i]) << (8 * i);
  return size;
}

Result<void> ImageFile::close() {
  if (fd_ < 0) return {};
  const int fd = fd_;
  fd_ = -1;
  // fsync on a pipe (image streamer) fails with EINVAL: that is not a lost write.
  if (::fsync(fd) < 0 && errno != EINVAL && errno != EROFS) {
    const int err = errno;
    ::close(fd);
    return io_error("cannot sync", name_, err);
  }
  if (::close(fd) < 0) return io_error("cannot close", name_, errno);
  return {};
}

Result<ImageFile> ImageDir::create(const std::string& name) const {
  const int fd = ::openat(dirfd_, name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return io_error("cannot create", name, errno);
  return ImageFile(fd, name);
}

Result<ImageFile> ImageDir::open(const std::string& name) const {
  const int fd = ::openat(dirfd_, name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open", name, errno);
  return ImageFile(fd, name);
}

std::vector<std::string> ImageDir::list(const std::string& prefix) const {
  std::vector<std::string> names;
  const int fd = ::openat(dirfd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return names;
  DIR* dir = ::fdopendir(fd);
  if (!dir) {
    ::close(fd);
    return names;
  }
  while (const dirent* entry = ::readdir(dir)) {
    if (std::strncmp(entry->d_name, prefix.c_str(), prefix.size()) == 0) names.emplace_back(entry->d_name);
  }
  ::closedir(dir);
  return names;
}

Result<void> ImageDir::write_framed(const std::string& name, const std::string& payload) const {
  GPUCKPT_TRY(auto file, create(name));
  GPUCKPT_TRY_VOID(file.write_size_header(payload.size()));
  GPUCKPT_TRY_VOID(file.write_all(payload.data(), payload.size()));
  return file.close();
}

Result<std::string> ImageDir::read_framed(const std::string& name) const {
  GPUCKPT_TRY(auto file, open(name));
  GPUCKPT_TRY(const std::uint64_t size, file.read_size_header());
  if (size > (1ull << 32)) {
    return make_error("image " + name + " claims " + std::to_string(size) +
                      " bytes of metadata, more than any checkpoint writes; the image is damaged");
  }
  std::string payload(static_cast<std::size_t>(size), '\0');
  GPUCKPT_TRY_VOID(file.read_exact(payload.data(), payload.size()));
  return payload;
}

std::string kfd_image_name(std::uint32_t id) { return "gpuckpt-amd-kfd-" + std::to_string(id) + ".img"; }
std::string render_image_name(std::uint32_t id) { return "gpuckpt-amd-render-" + std::to_string(id) + ".img"; }
std::string dmabuf_image_name(std::uint32_t id) { return "gpuckpt-amd-dmabuf-" + std::to_string(id) + ".img"; }
std::string bo_content_image_name(std::uint32_t id, std::uint32_t gpu_id) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "gpuckpt-amd-bo-%u-%04x.img", id, gpu_id);
  return buf;
}

}  // namespace gpuckpt::amd
