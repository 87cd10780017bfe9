// Moving a store-backed checkpoint between agents (docs/node-flow.md "Transfers of store-backed checkpoints"): its
// archive holds only manifests, its GPU memory is chunks in the source node's chunk store. The source asks the
// target which of the manifests' chunks its store lacks (POST /v1/chunks/missing), uploads those over several
// streams at once (PUT /v1/chunks/<digest>, each body the store's own chunk file, verified by the target before it
// gets its name: gpumem/chunk_receive.h), then pushes the archive itself, unchanged, like any archive
// (archive_transfer.h). On commit the target checks that every chunk is in its store and writes the references that
// keep them (no chunk data moves inside the commit), and only then puts the archive in place; whatever fails
// discards the received file. The uploaded chunks are young until then, so the store's garbage collection keeps
// them for its grace period (chunk_gc.h). Sending the same checkpoint again sends the same bytes: the target answers
// that it has them.
//
// The target's store is its gpu_memory.store setting (node, the default, or a path); an agent whose setting is inline
// keeps no chunk store and refuses chunks and store-backed archives, naming the setting. An archive that carries
// its chunks (`gpuckpt export`, uploaded by hand) is still admitted: its chunks are imported on commit.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "archive/checkpoint_archive.h"
#include "gpumem/chunk_store.h"
#include "runtime/container_runtime.h"
#include "base/result.h"
#include "node/archive_transfer.h"
#include "node/config.h"

namespace gpuckpt::node {

// Digests in one POST /v1/chunks/missing: 512 of them and their JSON are about 35 KiB, inside the default
// limits.max_request_bytes (64 KiB) that bounds every request body.
inline constexpr std::size_t kMaxMissingQuery = 512;

// The chunk store directory this agent's checkpoints use, or an error (EBUSY) naming gpu_memory.store when the
// agent keeps none.
Result<std::filesystem::path> agent_store_dir(const GpuMemoryConfig& config);

// The chunks of one store that this agent received (PUT /v1/chunks/<digest>) or its collection found young, and that
// no reference named when last looked: what limits.unreferenced_chunk_bytes and limits.unreferenced_chunks bound.
// Kept in memory so that an upload costs no scan of the store: a chunk is counted when it is received, uncounted
// when a commit references it (admit_received_archive) or a collection removed it (drop_collected, at a refusal),
// and the whole count is made again from the store by each collection (agent/storage_maintenance.h, also once at
// the agent's start), which sees every reference: so a restart, a local dump's reference or a reference removed
// since is right again after the next collection. A local dump in flight while a collection runs counts until the
// next one.
class UnreferencedChunks {
 public:
  struct Usage {
    std::uint64_t bytes = 0;
    std::uint64_t chunks = 0;
  };
  // One upload of `digest` (`bytes`, its chunk file's size) begins: counted when the quota has room for it, or joining
  // the count of an upload of it under way or done; else an error (EDQUOT: 507) naming the quota, the usage and what
  // to do. Every reserve that succeeded is ended by one settle().
  Result<void> reserve(const chunk_store::Digest& digest, std::uint64_t bytes, const UnreferencedChunkQuota& quota);
  // That upload ended: `landed` when the chunk is in the store now. A chunk stays counted while an upload of it runs
  // or once one landed it; when the last ends and none did, it is uncounted (nothing of it was kept).
  void settle(const chunk_store::Digest& digest, bool landed);
  void referenced(const std::set<chunk_store::Digest>& digests);
  // The count made again: `young` the store's unreferenced chunks a collection that began at `since` (a value of
  // epoch() taken before it) kept; chunks counted after that stay counted.
  std::uint64_t epoch() const;
  void recount(const std::map<chunk_store::Digest, std::uint64_t>& young, std::uint64_t since);
  bool contains(const chunk_store::Digest& digest) const;
  Usage usage() const;
  // When a collection began since the last call (`store`'s gc.generation file is new: the agent's upkeep, or
  // `gpuckpt store gc` in another process), the counted chunks no upload holds that are no longer in `store` are
  // uncounted: what the quota's refusal asks the operator to do then makes room at once, not at the agent's next
  // upkeep. Looks at each counted chunk's file once per collection at most; a call while another looks waits for it.
  void drop_collected(const chunk_store::Store& store);

 private:
  struct Entry {
    std::uint64_t bytes = 0;
    std::uint64_t epoch = 0;
    unsigned uploads = 0;   // uploads of it under way
    bool landed = false;    // in the store (an upload put it there, or a collection found it)
  };
  void uncount(std::map<chunk_store::Digest, Entry>::iterator it);
  mutable std::mutex mutex_;
  std::mutex dropping_;   // one drop_collected() at a time (held without mutex_ while it looks at the files)
  std::map<chunk_store::Digest, Entry> chunks_;
  Usage usage_;
  std::uint64_t epoch_ = 0;
  // The gc.generation file drop_collected() last saw (inode, mtime in ns; 0: none yet).
  std::pair<std::uint64_t, std::int64_t> collection_seen_{0, 0};
};

// The one count of the store at `store_dir` in this process (every route and the upkeep share it).
UnreferencedChunks& unreferenced_chunks_of(const std::filesystem::path& store_dir);

// POST /v1/chunks/missing: {"digests": ["<64 lowercase hex>", ...]} (at most kMaxMissingQuery, no duplicates) ->
// {"missing": [the digests the store lacks, in the order asked], "present": count}. A present chunk that a reference
// may name is touched, so a garbage collection between this answer and the commit that references it keeps it. One
// that no reference named when last counted (UnreferencedChunks) is never touched: asking again must not keep
// garbage alive; it is answered present while younger than half of `gc_grace` (time enough for the commit) and
// missing after that, so the sender uploads it again (counted against the quota) if it still needs it.
Result<nlohmann::json> missing_chunks(const GpuMemoryConfig& config, const nlohmann::json& body,
                                      std::chrono::seconds gc_grace = std::chrono::seconds(3600));

// The target's step on a received, digest-verified archive before it is put in place (IncomingArchives' admit
// hook). Without manifests: nothing to do (null). Without carried chunks (what a transfer sends: its chunks were
// uploaded before): every chunk must be in the store already (reference_checkpoint), the file left as it is. With
// carried chunks (an exported archive uploaded by hand), or with a chunk the store holds in another encoding than
// the manifests say: imported into the store in place (import_checkpoint: the manifests rewritten to say how the
// store holds it). Either way the
// references are written. Answers what was done: {"manifests", "carried_chunks", "added_chunks", "added_bytes",
// "present_chunks", "references"}. Errors: EBADMSG for what the archive did wrong, ETIMEDOUT past limits.deadline
// (the chunks that landed stay, unreferenced: a commit again skips them), others as they came.
Result<nlohmann::json> admit_received_archive(const std::filesystem::path& received, const GpuMemoryConfig& config,
                                              const ArchiveLimits& limits);

// The sender's side: the distinct non-zero chunks the archive's manifests name (empty for an inline or CPU-only
// archive).
Result<std::set<chunk_store::Digest>> manifest_chunks(const std::filesystem::path& archive, const ArchiveLimits& limits);

// Chunk uploads a target serves at once; more are answered 429 (each holds up to two chunks in memory: the file
// as it came and its decoded bytes). Also the most streams a sender uses (transfer.chunk_streams).
inline constexpr unsigned kMaxChunkUploads = 8;

// The target's side of PUT /v1/chunks/<digest>. `digest_text` is the URL's last part (checked: 64 lowercase hex);
// `content_length` the request's Content-Length (required, at most chunk_receive::kMaxChunkFileBytes); `read_body`
// feeds the body. The chunk is verified whole and put into the agent's store under its digest
// (chunk_receive::receive_chunk), made durable, and answered {"digest", "present": false, "stored_bytes",
// "raw_bytes"}; a chunk the store has already is touched and answered with "present": true. Errors (nothing of the
// chunk is kept): EINVAL a name that is no digest or a body without a Content-Length, EFBIG a body over the
// bound, EBADMSG a body that is not that chunk (bad header, sizes, payload, digest, cut short), EBUSY no store kept
// (naming gpu_memory.store), EAGAIN kMaxChunkUploads being served already, EDQUOT (507) a chunk the store lacks
// when the unreferenced chunks already fill `quota` (checked before the body is read).
class ChunkUploads {
 public:
  explicit ChunkUploads(GpuMemoryConfig config, UnreferencedChunkQuota quota = {})
      : config_(std::move(config)), quota_(quota) {}
  Result<nlohmann::json> receive(std::string_view digest_text, std::string_view content_length,
                                 const IncomingArchives::BodyReader& read_body);

 private:
  GpuMemoryConfig config_;
  UnreferencedChunkQuota quota_;
  std::atomic<unsigned> in_flight_{0};
};

struct ChunkUploadReport {
  std::size_t sent = 0;            // chunks the target took (written into its store)
  std::uint64_t sent_bytes = 0;    // their files' bytes
  std::size_t present = 0;         // chunks the target answered it had meanwhile (nothing written)
  std::size_t retries = 0;         // uploads tried again after a transient failure
  unsigned streams = 0;            // parallel streams used
};

// The sender's side: every chunk of `digests` read from `store` (the file as it is stored, never recompressed) and
// PUT to the agent at `url`, `streams` uploads at once (one thread each, a connection per chunk; at most
// kMaxChunkUploads, at most one per chunk).
// A chunk whose upload fails transiently (the connection broke, 429, 5xx) is tried again, up to 6 times in a row,
// within `deadline`; a refusal (a 4xx naming what is wrong) or a chunk this store cannot read ends it all, naming the
// chunk. `progress` (may be empty) is told each chunk done, from the uploading threads. `stop` (may be null): the
// agent's, which ends every upload early (bounded_send).
Result<ChunkUploadReport> upload_chunks(const std::string& url, const std::string& token,
                                        const chunk_store::Store& store, const std::set<chunk_store::Digest>& digests,
                                        unsigned streams, JobDeadline deadline,
                                        const std::function<void(const ChunkUploadReport&)>& progress,
                                        const RequestStop* stop = nullptr);

// The answers upload_chunks and ask_missing_chunks act on, each read with its types checked (fed to
// fuzz/transfer_answer_fuzz); an error names `who` and what was wrong.
// PUT /v1/chunks/<digest>'s 2xx answer: whether the target had the chunk already ("present", a boolean).
Result<bool> parse_chunk_put_answer(std::string_view body, const std::string& who);
// POST /v1/chunks/missing's answer: the digests the target lacks, each one of `asked` (a hostile target cannot make
// the sender carry anything else).
Result<std::set<chunk_store::Digest>> parse_missing_answer(std::string_view body,
                                                           const std::set<chunk_store::Digest>& asked,
                                                           const std::string& who);

// Which of `digests` the agent at `url` lacks, asked kMaxMissingQuery at a time.
Result<std::set<chunk_store::Digest>> ask_missing_chunks(const std::string& url, const std::string& token,
                                                         const std::set<chunk_store::Digest>& digests,
                                                         JobDeadline deadline, const RequestStop* stop = nullptr);

}  // namespace gpuckpt::node
