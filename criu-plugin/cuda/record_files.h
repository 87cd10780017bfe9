// gpuckpt's own files in CRIU's image directory: gpuckpt-cuda-<pid>.img holds the GPU properties record
// (gpu/properties_record.h, protobuf) of one checkpointed CUDA process: this node's GPUs and the ones the
// process had open. CRIU ignores files it does not know, and they travel with the images.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "gpu/gpu_model.h"
#include "base/result.h"

namespace gpuckpt::cuda {

inline constexpr const char* kRecordPrefix = "gpuckpt-cuda-";
inline constexpr const char* kRecordSuffix = ".img";

struct ProcessRecords {
  std::map<int, GpuPropertiesRecord> by_pid;   // pid at dump time -> its record
  GpuPropertiesRecord merged;                  // the first record's node, every process's GPUs
};

Result<void> write_process_record(int dir_fd, int pid, const GpuPropertiesRecord& record);
// Every gpuckpt-cuda-*.img in the directory; an unreadable or newer-version file is an error naming it.
Result<ProcessRecords> read_process_records(int dir_fd);

// A whole file of the image directory; the error carries ENOENT when it does not exist.
Result<std::string> read_image_file(int dir_fd, const std::string& name);

// The UUIDs (format_uuid form) of the GPUs a record says were used.
std::vector<std::string> record_uuids(const GpuPropertiesRecord& record);
// "pid 41 used GPU-..., GPU-...; pid 42 used ..." for error messages.
std::string describe_needed_gpus(const ProcessRecords& records);

}  // namespace gpuckpt::cuda
