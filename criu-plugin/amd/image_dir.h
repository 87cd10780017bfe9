// Image files of the AMD backend. Every file is written front to back and read front to back, never sought
// or stat'ed, so images can go through CRIU's image streamer. Every file starts with its payload size as an
// 8-byte little-endian number, so a reader knows how much to expect without a seek and can tell a truncated
// image from a complete one.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/result.h"

namespace gpuckpt::amd {

class ImageFile {
 public:
  ImageFile() = default;
  ImageFile(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  ImageFile(ImageFile&& other) noexcept;
  ImageFile& operator=(ImageFile&& other) noexcept;
  ImageFile(const ImageFile&) = delete;
  ImageFile& operator=(const ImageFile&) = delete;
  ~ImageFile();

  const std::string& name() const { return name_; }

  Result<void> write_all(const void* data, std::size_t size);
  Result<void> write_size_header(std::uint64_t payload_size);
  // Reads exactly `size` bytes; a short file is an error that names the image and says it is truncated.
  Result<void> read_exact(void* data, std::size_t size);
  Result<std::uint64_t> read_size_header();
  // fsync + close; errors of either are reported (a lost write must not pass silently).
  Result<void> close();

 private:
  int fd_ = -1;
  std::string name_;
  std::uint64_t consumed_ = 0;
};

// The directory CRIU keeps images in (criu_get_image_dir() in the plugin, a temporary directory in tests).
class ImageDir {
 public:
  explicit ImageDir(int dirfd) : dirfd_(dirfd) {}
  Result<ImageFile> create(const std::string& name) const;
  // errno_value ENOENT when the image does not exist (the caller may decide the fd is not ours).
  Result<ImageFile> open(const std::string& name) const;
  // Names starting with `prefix` (used only to count GPU processes; a streamer setup does not need it).
  std::vector<std::string> list(const std::string& prefix) const;

  // A whole file holding one size-framed payload (the protobuf images).
  Result<void> write_framed(const std::string& name, const std::string& payload) const;
  Result<std::string> read_framed(const std::string& name) const;

 private:
  int dirfd_;
};

std::string kfd_image_name(std::uint32_t id);
std::string render_image_name(std::uint32_t id);
std::string dmabuf_image_name(std::uint32_t id);
std::string bo_content_image_name(std::uint32_t id, std::uint32_t gpu_id);

}  // namespace gpuckpt::amd
