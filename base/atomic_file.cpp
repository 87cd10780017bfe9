#include "base/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstring>

namespace gpuckpt {

namespace fs = std::filesystem;

bool is_safe_id(std::string_view id) {
  if (id.empty() || id.size() > 128 || !std::isalnum(static_cast<unsigned char>(id.front()))) return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') return false;
  return true;
}

void sync_parent_directory(const fs::path& path) {
  const fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

Result<void> write_file_atomically(const fs::path& path, std::string_view data) {
  static std::atomic<unsigned> counter{0};
  std::error_code ec;
  fs::create_directories(path.parent_path(), ec);
  if (ec) return make_error("cannot create " + path.parent_path().string() + ": " + ec.message(), EIO);
  const fs::path temp = path.parent_path() / ("." + path.filename().string() + ".tmp-" + std::to_string(::getpid()) +
                                               "-" + std::to_string(counter++));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return make_error("cannot write " + temp.string() + ": " + std::strerror(errno), errno);
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      fs::remove(temp, ec);
      return make_error("cannot write " + temp.string() + ": " + std::strerror(err), err);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const int err = errno;
    ::close(fd);
    fs::remove(temp, ec);
    return make_error("cannot write " + temp.string() + ": " + std::strerror(err), err);
  }
  ::close(fd);
  fs::rename(temp, path, ec);
  if (ec) {
    fs::remove(temp, ec);
    return make_error("cannot rename " + temp.string() + " to " + path.string(), EIO);
  }
  sync_parent_directory(path);
  return {};
}

}  // namespace gpuckpt
