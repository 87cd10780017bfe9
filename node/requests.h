// The API's request bodies, parsed: parse -> model, no HTTP and no service here (the fuzzer links this alone).
// Bodies are JSON objects with only the listed keys, each a string (target_gpus: an array of strings), read
// with the bounded JSON reader (depth 3, 1024 values).
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/container_runtime.h"
#include "base/result.h"

namespace gpuckpt::node {

struct CheckpointRequest {
  ContainerRef ref;
  std::string image_tag;   // empty: no OCI image
};

struct RestoreRequest {
  std::string archive;                            // name in checkpoints.dir, or an absolute path inside it
  std::string name;                               // name of the restored container; empty: the original name
  std::optional<std::vector<std::string>> target_gpus;   // GPUs the scheduler assigned
};

struct ImageRequest {
  std::string archive;   // as RestoreRequest::archive
  std::string tag;       // the image's tag; empty: the job's id
};

struct TransferRequest {
  std::string archive;   // as RestoreRequest::archive
  std::string to;        // the target agent: http://A.B.C.D:PORT (node/archive_transfer.h)
};

struct ChunkPullRequest {
  std::string image;     // HOST[:PORT]/PATH:TAG: a checkpoint image pushed with its chunks (node/registry_chunks.h)
};

// POST /v1/checkpoints: {"namespace", "pod", "container", "image"}
Result<CheckpointRequest> parse_checkpoint_request(std::string_view body);
// POST /v1/restores: {"archive", "name", "target_gpus"}
Result<RestoreRequest> parse_restore_request(std::string_view body);
// POST /v1/images: {"archive", "image"}
Result<ImageRequest> parse_image_request(std::string_view body);
// POST /v1/transfers: {"archive", "to"}
Result<TransferRequest> parse_transfer_request(std::string_view body);
// POST /v1/chunk-pulls: {"image"}
Result<ChunkPullRequest> parse_chunk_pull_request(std::string_view body);

}  // namespace gpuckpt::node
