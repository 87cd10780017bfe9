#include "criu-plugin/cuda/record_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "gpu/properties_record.h"
#include "criu-plugin/cuda/uuid.h"

namespace gpuckpt::cuda {
namespace {

Error io_error(const std::string& what, int e) { return make_error(what + ": " + std::strerror(e), e); }

// The pid in "gpuckpt-cuda-<pid>.img", or -1.
int pid_of(const std::string& name) {
  const std::string prefix = kRecordPrefix, suffix = kRecordSuffix;
  if (name.size() <= prefix.size() + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.empty() || digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoi(digits);
}

}  // namespace

Result<void> write_process_record(int dir_fd, int pid, const GpuPropertiesRecord& record) {
  if (dir_fd < 0) return make_error("no CRIU image directory to write the GPU record of pid " + std::to_string(pid));
  const std::string name = kRecordPrefix + std::to_string(pid) + kRecordSuffix;
  const std::string bytes = to_protobuf(record);
  int fd = ::openat(dir_fd, name.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return io_error("cannot create " + name + " in the image directory", errno);
  std::size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      int e = errno;
      ::close(fd);
      return io_error("cannot write " + name, e);
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(fd) != 0) return io_error("cannot write " + name, errno);
  return {};
}

Result<std::string> read_image_file(int dir_fd, const std::string& name) {
  if (dir_fd < 0) return make_error("no CRIU image directory to read " + name + " from", ENOENT);
  int fd = ::openat(dir_fd, name.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return io_error("cannot open " + name + " in the image directory", errno);
  std::string text;
  char buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int e = errno;
      ::close(fd);
      return io_error("cannot read " + name, e);
    }
    if (n == 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return text;
}

Result<ProcessRecords> read_process_records(int dir_fd) {
  ProcessRecords records;
  if (dir_fd < 0) return records;
  // Through /proc/self/fd: fdopendir would take over (and close) CRIU's descriptor.
  DIR* dir = ::opendir(("/proc/self/fd/" + std::to_string(dir_fd)).c_str());
  if (dir == nullptr) return io_error("cannot list the CRIU image directory", errno);
  std::vector<std::string> names;
  while (dirent* entry = ::readdir(dir)) {
    std::string name = entry->d_name;
    if (pid_of(name) > 0) names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  bool first = true;
  for (const auto& name : names) {
    GPUCKPT_TRY(const std::string bytes, read_image_file(dir_fd, name));
    GPUCKPT_TRY(GpuPropertiesRecord record, record_from_protobuf(bytes, name));
    if (first) {
      records.merged.node = record.node;
      first = false;
    }
    for (const auto& id : record.used_gpu_ids)
      if (std::find(records.merged.used_gpu_ids.begin(), records.merged.used_gpu_ids.end(), id) ==
          records.merged.used_gpu_ids.end())
        records.merged.used_gpu_ids.push_back(id);
    records.by_pid.emplace(pid_of(name), std::move(record));
  }
  return records;
}

std::vector<std::string> record_uuids(const GpuPropertiesRecord& record) {
  std::vector<std::string> out;
  for (const auto& id : record.used_gpu_ids) {
    const GpuDevice* gpu = find_gpu(record.node, id);
    std::string text = gpu ? (gpu->uuid.empty() ? gpu->id : gpu->uuid) : id;
    auto uuid = parse_uuid(text, "record");
    if (uuid) out.push_back(format_uuid(*uuid));
  }
  return out;
}

std::string describe_needed_gpus(const ProcessRecords& records) {
  std::string out;
  for (const auto& [pid, record] : records.by_pid) {
    if (!out.empty()) out += "; ";
    out += "pid " + std::to_string(pid) + " used ";
    auto uuids = record_uuids(record);
    if (uuids.empty()) out += "a GPU";
    for (std::size_t i = 0; i < uuids.size(); ++i) out += (i ? ", " : "") + uuids[i];
  }
  return out;
}

}  // namespace gpuckpt::cuda
