#include "node/chunk_transfer.h"

#include <httplib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "base/caught.h"
#include "archive/checkpoint_export.h"
#include "gpumem/chunk_gc.h"
#include "gpumem/chunk_receive.h"
#include "gpumem/gpu_image.h"
#include "gpumem/gpu_manifest.h"
#include "base/json_reader.h"
#include "base/log.h"

namespace gpuckpt::node {

namespace fs = std::filesystem;
namespace cs = chunk_store;

namespace {

// Whether `store` holds a chunk the manifests name in another form than they say (same raw size, another encoding
// or stored size).
Result<bool> stored_otherwise(const std::map<std::string, std::string>& manifests, const cs::Store& store,
                              const fs::path& archive) {
  for (const auto& [name, text] : manifests) {
    GPUCKPT_TRY(auto manifest, gpu_image::parse_manifest(text, archive.string() + ": checkpoint/" + name));
    for (std::size_t i = 0; i < manifest.entries.size(); ++i) {
      const auto& e = manifest.entries[i];
      if (e.encoding == gpu_image::Encoding::Zero) continue;
      if (auto present = store.stat(manifest.digests[i]);
          present && present->raw_size == e.raw_size &&
          (present->stored_size != e.stored_size || present->encoding != static_cast<std::uint8_t>(e.encoding)))
        return true;
    }
  }
  return false;
}

// The source's connection settings towards a target agent: a connection per request (the target closes any older
// than limits.request_deadline_seconds), the agents' shared token.
void to_peer(httplib::Client& client, const std::string& token) {
  client.set_bearer_token_auth(token.c_str());
  client.set_connection_timeout(5);
  client.set_read_timeout(30);
  client.set_write_timeout(30);
}

// What a target answered that was not a success, or why it did not answer: for the error naming the request.
std::string peer_answer(const Result<PeerAnswer>& result) {
  return result ? peer_says(result->status, result->body) : result.error().message;
}

}  // namespace

Result<fs::path> agent_store_dir(const GpuMemoryConfig& config) {
  auto dir = gpu_image::parse_store(config.store, "gpu_memory.store");
  if (!dir) return make_error(dir.error().message, EBUSY);
  if (dir->empty())
    return make_error("this agent keeps no chunk store (gpu_memory.store is inline): it cannot take store-backed "
                      "checkpoints; set gpu_memory.store to node or a path (the chart's config.gpu_memory.store)",
                      EBUSY);
  return fs::path(*dir);
}

Result<void> UnreferencedChunks::reserve(const cs::Digest& digest, std::uint64_t bytes,
                                         const UnreferencedChunkQuota& quota) {
  std::lock_guard lock(mutex_);
  if (auto it = chunks_.find(digest); it != chunks_.end()) {
    ++it->second.uploads;
    return {};
  }
  if (usage_.chunks + 1 > quota.chunks || usage_.bytes + bytes > quota.bytes)
    return make_error("chunk " + digest.hex() + " (" + std::to_string(bytes) + " bytes) is refused: this agent's "
                      "store holds " + std::to_string(usage_.chunks) + " chunk(s), " + std::to_string(usage_.bytes) +
                      " bytes, that no checkpoint references yet, and the quota is " + std::to_string(quota.chunks) +
                      " chunk(s), " + std::to_string(quota.bytes) + " bytes (limits.unreferenced_chunks, "
                      "limits.unreferenced_chunk_bytes); commit the transfers in flight, run `gpuckpt store gc "
                      "--delete` to remove abandoned chunks older than the grace period, or raise the limits",
                      EDQUOT);
  chunks_.emplace(digest, Entry{bytes, ++epoch_, 1, false});
  usage_.chunks += 1;
  usage_.bytes += bytes;
  return {};
}

void UnreferencedChunks::uncount(std::map<cs::Digest, Entry>::iterator it) {
  usage_.chunks -= 1;
  usage_.bytes -= it->second.bytes;
  chunks_.erase(it);
}

void UnreferencedChunks::settle(const cs::Digest& digest, bool landed) {
  std::lock_guard lock(mutex_);
  const auto it = chunks_.find(digest);
  if (it == chunks_.end()) return;   // referenced meanwhile
  Entry& entry = it->second;
  if (entry.uploads > 0) --entry.uploads;
  entry.landed = entry.landed || landed;
  if (entry.uploads == 0 && !entry.landed) uncount(it);
}

void UnreferencedChunks::referenced(const std::set<cs::Digest>& digests) {
  std::lock_guard lock(mutex_);
  for (const auto& d : digests)
    if (auto it = chunks_.find(d); it != chunks_.end()) uncount(it);
}

std::uint64_t UnreferencedChunks::epoch() const {
  std::lock_guard lock(mutex_);
  return epoch_;
}

void UnreferencedChunks::recount(const std::map<cs::Digest, std::uint64_t>& young, std::uint64_t since) {
  std::lock_guard lock(mutex_);
  std::map<cs::Digest, Entry> next;
  // Kept: what was counted after the collection began, and what an upload still holds (it may land yet).
  for (const auto& [digest, entry] : chunks_)
    if (entry.epoch > since || entry.uploads > 0) next.emplace(digest, entry);
  for (const auto& [digest, bytes] : young) next.emplace(digest, Entry{bytes, 0, 0, true});
  usage_ = {};
  for (const auto& [digest, entry] : next) {
    usage_.chunks += 1;
    usage_.bytes += entry.bytes;
  }
  chunks_ = std::move(next);
}

bool UnreferencedChunks::contains(const cs::Digest& digest) const {
  std::lock_guard lock(mutex_);
  return chunks_.contains(digest);
}

UnreferencedChunks::Usage UnreferencedChunks::usage() const {
  std::lock_guard lock(mutex_);
  return usage_;
}

void UnreferencedChunks::drop_collected(const cs::Store& store) {
  std::lock_guard one_at_a_time(dropping_);
  struct ::stat st {};
  if (::fstatat(store.root_fd(), chunk_gc::kGenerationFile, &st, 0) != 0) return;   // never collected
  const std::pair<std::uint64_t, std::int64_t> stamp{st.st_ino,
                                                     std::int64_t{st.st_mtim.tv_sec} * 1'000'000'000 + st.st_mtim.tv_nsec};
  std::vector<cs::Digest> settled;
  {
    std::lock_guard lock(mutex_);
    if (stamp == collection_seen_) return;
    collection_seen_ = stamp;
    for (const auto& [digest, entry] : chunks_)
      if (entry.uploads == 0) settled.push_back(digest);
  }
  // The files looked up without the lock: uploads go on meanwhile.
  std::vector<cs::Digest> gone;
  for (const auto& digest : settled)
    if (!store.stat(digest)) gone.push_back(digest);
  std::lock_guard lock(mutex_);
  for (const auto& digest : gone)
    if (auto it = chunks_.find(digest); it != chunks_.end() && it->second.uploads == 0) uncount(it);
}

UnreferencedChunks& unreferenced_chunks_of(const fs::path& store_dir) {
  static std::mutex mutex;
  static std::map<fs::path, std::unique_ptr<UnreferencedChunks>> counts;
  std::lock_guard lock(mutex);
  auto& slot = counts[store_dir.lexically_normal()];
  if (!slot) slot = std::make_unique<UnreferencedChunks>();
  return *slot;
}

Result<nlohmann::json> missing_chunks(const GpuMemoryConfig& config, const nlohmann::json& body,
                                      std::chrono::seconds gc_grace) {
  const std::string usage = "the body is {\"digests\": [at most " + std::to_string(kMaxMissingQuery) +
                            " distinct SHA-256 digests, 64 lowercase hex digits each]}";
  if (!body.is_object() || !body.contains("digests") || !body["digests"].is_array() || body.size() != 1)
    return make_error(usage);
  const auto& list = body["digests"];
  if (list.size() > kMaxMissingQuery)
    return make_error(std::to_string(list.size()) + " digests asked at once: " + usage, EFBIG);
  std::vector<cs::Digest> digests;
  std::set<cs::Digest> seen;
  for (std::size_t i = 0; i < list.size(); ++i) {
    if (!list[i].is_string()) return make_error("digests[" + std::to_string(i) + "] is not a string: " + usage);
    auto digest = cs::parse_digest(list[i].get<std::string>(), "digests[" + std::to_string(i) + "]");
    if (!digest) return make_error(digest.error().message + ": " + usage);
    if (!seen.insert(*digest).second)
      return make_error("digests[" + std::to_string(i) + "] (" + digest->hex() + ") is asked twice: " + usage);
    digests.push_back(*digest);
  }
  GPUCKPT_TRY(auto dir, agent_store_dir(config));
  nlohmann::json missing = nlohmann::json::array();
  std::size_t present = 0;
  auto opened = cs::Store::open(dir, false);
  if (!opened && opened.error().errno_value != ENOENT) return make_error(opened.error().message, EIO);
  const auto& unreferenced = unreferenced_chunks_of(dir);
  const auto fresh_after = fs::file_time_type::clock::now() - gc_grace / 2;
  const auto kept = [&](const cs::Digest& digest) {
    // stat reads the chunk's header: a file that is there but cut short or foreign counts as missing.
    if (!opened || !(*opened)->stat(digest)) return false;
    if (!unreferenced.contains(digest)) return static_cast<bool>((*opened)->touch(digest));
    std::error_code ec;
    const auto mtime = fs::last_write_time((*opened)->path_of(digest), ec);
    return !ec && mtime > fresh_after;
  };
  for (const auto& digest : digests) {
    if (kept(digest)) {
      ++present;
      continue;
    }
    missing.push_back(digest.hex());
  }
  return nlohmann::json{{"missing", std::move(missing)}, {"present", present}};
}

Result<nlohmann::json> admit_received_archive(const fs::path& received, const GpuMemoryConfig& config,
                                              const ArchiveLimits& limits) {
  auto info = inspect_checkpoint_archive(received, limits);
  if (!info) return make_error(info.error().message, info.error().errno_value == ETIMEDOUT ? ETIMEDOUT : EBADMSG);
  if (info->memory_manifests.empty()) {
    if (info->carried_chunks > 0)
      return make_error("it carries " + std::to_string(info->carried_chunks) + " chunks (" + kCarriedChunksDir +
                        "/) but no manifest that names them", EBADMSG);
    return nlohmann::json(nullptr);
  }
  auto dir = agent_store_dir(config);
  if (!dir) return make_error("it is a store-backed checkpoint and " + dir.error().message, EBADMSG);
  auto opened = cs::Store::open(*dir, true);
  if (!opened) return make_error(opened.error().message, EIO);
  std::shared_ptr<cs::Store> store(std::move(*opened));
  // The archive's doing (a chunk corrupt, missing, unnamed) is EBADMSG or EINVAL/ENOENT from checkpoint_export: the
  // received file is refused for it. Time, the store's own trouble and a reference the store keeps with other
  // content (EEXIST: another checkpoint has that id and process here) keep their kinds.
  const auto kind = [](const Error& e) {
    return e.errno_value == ETIMEDOUT || e.errno_value == EIO || e.errno_value == ENOSPC || e.errno_value == EEXIST
               ? e.errno_value
               : EBADMSG;
  };
  // A chunk the store holds in another encoding than the manifests say (the nodes compressed it differently) stays
  // as it is (this node's checkpoints name its file so); the import rewrites the manifests to say how it is stored.
  // Otherwise the archive stays byte for byte as sent, so sending it again finds it here.
  auto otherwise = stored_otherwise(info->memory_manifests, *store, received);
  if (!otherwise) return make_error(otherwise.error().message, EBADMSG);
  auto report = info->carried_chunks > 0 || *otherwise
                    ? checkpoint_export::import_checkpoint(received, store, received, limits)
                    : checkpoint_export::reference_checkpoint(received, store, limits);
  if (!report) return make_error(report.error().message, kind(report.error()));
  std::set<cs::Digest> named;
  for (const auto& [name, text] : info->memory_manifests)
    if (auto manifest = gpu_image::parse_manifest(text, received.string() + ": checkpoint/" + name); manifest)
      for (std::size_t i = 0; i < manifest->entries.size(); ++i)
        if (manifest->entries[i].encoding != gpu_image::Encoding::Zero) named.insert(manifest->digests[i]);
  unreferenced_chunks_of(*dir).referenced(named);
  return nlohmann::json{{"store", dir->string()},
                        {"manifests", report->manifests},
                        {"carried_chunks", report->carried_chunks},
                        {"added_chunks", report->added_chunks},
                        {"added_bytes", report->added_bytes},
                        {"present_chunks", report->present_chunks},
                        {"references", report->references}};
}

Result<std::set<cs::Digest>> manifest_chunks(const fs::path& archive, const ArchiveLimits& limits) {
  GPUCKPT_TRY(auto info, inspect_checkpoint_archive(archive, limits));
  std::set<cs::Digest> out;
  for (const auto& [name, text] : info.memory_manifests) {
    auto manifest = gpu_image::parse_manifest(text, archive.string() + ": checkpoint/" + name);
    if (!manifest) return make_error(manifest.error().message, EBADMSG);
    for (std::size_t i = 0; i < manifest->entries.size(); ++i)
      if (manifest->entries[i].encoding != gpu_image::Encoding::Zero) out.insert(manifest->digests[i]);
  }
  return out;
}

Result<nlohmann::json> ChunkUploads::receive(std::string_view digest_text, std::string_view content_length,
                                             const IncomingArchives::BodyReader& read_body) {
  auto digest = cs::parse_digest(digest_text, "the chunk's name in PUT /v1/chunks/<digest>");
  if (!digest) return make_error(digest.error().message, EINVAL);
  const std::string chunk = "chunk " + digest->hex();
  auto dir = agent_store_dir(config_);
  if (!dir) return make_error(chunk + " is refused: " + dir.error().message, EBUSY);
  if (content_length.empty())
    return make_error(chunk + " is refused: send it with a Content-Length (its chunk file's size)", EINVAL);
  const auto limit = chunk_receive::kMaxChunkFileBytes;
  if (content_length.size() > 19 || content_length.find_first_not_of("0123456789") != std::string_view::npos ||
      std::stoull(std::string(content_length)) > limit)
    return make_error(chunk + " is refused: its body (Content-Length " + std::string(content_length.substr(0, 20)) +
                      ") is larger than a chunk file can be (" + std::to_string(limit) + " bytes)", EFBIG);
  const auto length = static_cast<std::size_t>(std::stoull(std::string(content_length)));
  // A chunk the store has already costs nothing more; any other counts against the quota before its body is read.
  auto& unreferenced = unreferenced_chunks_of(*dir);
  bool reserved = false;
  {
    auto present = cs::Store::open(*dir, false);
    if (!present || !(*present)->stat(*digest)) {
      auto room = unreferenced.reserve(*digest, length, quota_);
      // Full: a collection since the last look may have removed counted chunks (gpuckpt store gc --delete).
      if (!room && room.error().errno_value == EDQUOT && present) {
        unreferenced.drop_collected(**present);
        room = unreferenced.reserve(*digest, length, quota_);
      }
      GPUCKPT_TRY_VOID(room);
      reserved = true;
    }
  }
  // Another upload of the same chunk may run: only the last one to end, when none landed it, uncounts it.
  struct Settle {
    UnreferencedChunks& count;
    const cs::Digest& digest;
    bool reserved;
    bool landed = false;
    ~Settle() {
      if (reserved) count.settle(digest, landed);
    }
  } settle{unreferenced, *digest, reserved};
  // Each upload holds its chunk twice in memory (as it came, decoded): the count bounds what they take together.
  if (in_flight_.fetch_add(1) >= kMaxChunkUploads) {
    in_flight_.fetch_sub(1);
    return make_error(chunk + ": this agent takes " + std::to_string(kMaxChunkUploads) +
                      " chunk uploads at once; retry shortly", EAGAIN);
  }
  struct Release {
    std::atomic<unsigned>& count;
    ~Release() { count.fetch_sub(1); }
  } release{in_flight_};
  std::vector<std::byte> file;
  file.reserve(length);
  bool over = false;
  const bool whole = read_body([&](const char* data, std::size_t n) {
    if (n > length - file.size()) {
      over = true;
      return false;
    }
    const auto* bytes = reinterpret_cast<const std::byte*>(data);
    file.insert(file.end(), bytes, bytes + n);
    return true;
  });
  if (over) return make_error(chunk + " is refused: its body is longer than its Content-Length", EFBIG);
  if (!whole || file.size() != length)
    return make_error(chunk + " is refused: its body ended after " + std::to_string(file.size()) + " of " +
                      std::to_string(length) + " bytes; nothing of it is kept", EBADMSG);
  auto opened = cs::Store::open(*dir, true);
  if (!opened) return make_error(opened.error().message, EIO);
  gpu_image::ChunkCodec codec(gpu_image::kMaxChunkSize);
  std::vector<std::byte> raw;
  GPUCKPT_TRY(auto received, chunk_receive::receive_chunk(**opened, *digest, file, codec, raw));
  settle.landed = true;
  // Its name made durable now: the commit that references it may come from another request, after a crash.
  if (auto synced = (*opened)->sync(); !synced) return make_error(synced.error().message, EIO);
  return nlohmann::json{{"digest", digest->hex()},
                        {"present", received.present},
                        {"stored_bytes", received.header.stored_size},
                        {"raw_bytes", received.header.raw_size}};
}

// Longer than most, kept whole: the streams are lambdas over the state they share with it (the next chunk's index, the
// report, the first error, the stop) and that ends with it; split, all of it would be passed around by reference.
Result<ChunkUploadReport> upload_chunks(const std::string& url, const std::string& token, const cs::Store& store,
                                        const std::set<cs::Digest>& digests, unsigned streams, JobDeadline deadline,
                                        const std::function<void(const ChunkUploadReport&)>& progress,
                                        const RequestStop* agent_stop) {
  constexpr int kAttempts = 6;   // failed uploads of one chunk in a row before the transfer gives up
  const std::vector<cs::Digest> list(digests.begin(), digests.end());
  ChunkUploadReport report;
  const unsigned wanted = std::clamp(streams, 1U, kMaxChunkUploads);
  report.streams = static_cast<unsigned>(std::min<std::size_t>(wanted, list.size()));
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mutex;   // report and first_error
  std::optional<Error> first_error;
  const auto give_up = [&](Error error) {
    std::lock_guard lock(mutex);
    if (!first_error) first_error = std::move(error);
    stop = true;
  };
  const std::string who = "the target agent at " + url;
  const auto stream = [&] {
    httplib::Client client(url);
    to_peer(client, token);
    std::vector<std::byte> file;
    std::string body;
    for (std::size_t i = next++; i < list.size() && !stop; i = next++) {
      const cs::Digest& digest = list[i];
      const std::string path = "/v1/chunks/" + digest.hex();
      auto header = store.stat(digest);
      Result<void> read = header ? store.read(digest, cs::kChunkHeaderSize + header->stored_size, file)
                                 : Result<void>(header.error());
      if (!read)
        return give_up(make_error("chunk " + digest.hex() + " cannot be read from this node's store: " +
                                  read.error().message, ENOENT));
      for (int attempt = 1;; ++attempt) {
        if (std::chrono::steady_clock::now() >= deadline)
          return give_up(make_error("ran out of time uploading chunk " + digest.hex() + " to " + url, ETIMEDOUT));
        body.assign(reinterpret_cast<const char*>(file.data()), file.size());
        auto result = ask_peer(client, "PUT", path, std::move(body), "application/octet-stream", who, deadline,
                               agent_stop);
        if (!result && result.error().errno_value != EIO)   // past the deadline, or an answer over the bound
          return give_up(make_error("uploading chunk " + digest.hex() + ": " + result.error().message,
                                    result.error().errno_value));
        if (result && (result->status == 200 || result->status == 201)) {
          auto present = parse_chunk_put_answer(result->body, who + " (PUT " + path + ")");
          if (!present) return give_up(present.error());
          std::lock_guard lock(mutex);
          if (*present) ++report.present;
          else {
            ++report.sent;
            report.sent_bytes += file.size();
          }
          if (progress) progress(report);
          break;
        }
        // A refusal a retry cannot change ends the transfer; a broken connection, a busy or failing target is
        // tried again.
        // 507: the target's quota of unreferenced chunks is full; its message says what to do, a retry cannot.
        const bool transient =
            !result || result->status == 429 || (result->status >= 500 && result->status != 507);
        if (!transient || attempt >= kAttempts)
          return give_up(make_error(who + " (PUT " + path + ") " + peer_answer(result) +
                                    (transient ? " (" + std::to_string(attempt) + " attempts)" : ""),
                                    result && result->status == 409 ? EBUSY : EIO));
        {
          std::lock_guard lock(mutex);
          ++report.retries;
        }
        log::warn("upload of chunk " + digest.hex() + " to " + url + ": " + peer_answer(result) + "; again");
        client.stop();
        std::this_thread::sleep_for(std::chrono::milliseconds(200) * attempt);
      }
    }
  };
  // Whatever a stream meets (a bug, bad_alloc), it ends the transfer with an error and never the agent.
  const auto caught_stream = [&] {
    if (auto ok = caught("uploading chunks to " + url, stream); !ok) give_up(ok.error());
  };
  std::vector<std::thread> threads;
  for (unsigned i = 1; i < report.streams; ++i) threads.emplace_back(caught_stream);
  if (report.streams > 0) caught_stream();
  for (auto& thread : threads) thread.join();
  if (first_error) return *first_error;
  return report;
}

Result<bool> parse_chunk_put_answer(std::string_view body, const std::string& who) {
  const auto answer = peer_object(body);
  const auto field = answer.is_object() ? answer.find("present") : answer.end();
  if (field == answer.end() || !field->is_boolean())
    return make_error(who + " answered with " +
                      (field == answer.end() ? std::string("no \"present\"")
                                             : "\"present\" of type " + json_type(*field)) +
                      ", not a boolean: it is no gpuckpt agent, or another version's", EIO);
  return field->get<bool>();
}

Result<std::set<cs::Digest>> parse_missing_answer(std::string_view text, const std::set<cs::Digest>& asked,
                                                  const std::string& who) {
  const auto body = peer_object(text);
  const auto list = body.is_object() ? body.find("missing") : body.end();
  if (list == body.end() || !list->is_array())
    return make_error(who + " answered without \"missing\" (an array of digests)", EIO);
  std::set<cs::Digest> missing;
  for (const auto& item : *list) {
    auto digest = item.is_string() ? cs::parse_digest(item.get_ref<const std::string&>(), "missing digest")
                                   : Result<cs::Digest>(make_error("not a string"));
    if (!digest || !asked.contains(*digest)) return make_error(who + " answered a digest it was not asked about", EIO);
    missing.insert(*digest);
  }
  return missing;
}

Result<std::set<cs::Digest>> ask_missing_chunks(const std::string& url, const std::string& token,
                                                const std::set<cs::Digest>& digests, JobDeadline deadline,
                                                const RequestStop* stop) {
  httplib::Client client(url);
  to_peer(client, token);
  std::set<cs::Digest> missing;
  std::vector<cs::Digest> batch;
  const auto ask = [&]() -> Result<void> {
    if (std::chrono::steady_clock::now() >= deadline)
      return make_error("ran out of time asking " + url + " which chunks it lacks", ETIMEDOUT);
    nlohmann::json list = nlohmann::json::array();
    for (const auto& d : batch) list.push_back(d.hex());
    auto answer = ask_peer(client, "POST", "/v1/chunks/missing", nlohmann::json{{"digests", std::move(list)}}.dump(),
                           "application/json", "the target agent at " + url, deadline, stop);
    if (!answer || answer->status != 200)
      return make_error("the target agent at " + url + " (POST /v1/chunks/missing) " + peer_answer(answer),
                        answer && answer->status == 409 ? EBUSY
                        : !answer                       ? answer.error().errno_value
                                                        : EIO);
    GPUCKPT_TRY(auto lacking, parse_missing_answer(answer->body, std::set<cs::Digest>(batch.begin(), batch.end()),
                                                   "the target agent at " + url + " (POST /v1/chunks/missing)"));
    missing.merge(lacking);
    batch.clear();
    return {};
  };
  for (const auto& digest : digests) {
    batch.push_back(digest);
    if (batch.size() == kMaxMissingQuery)
      GPUCKPT_TRY_VOID(ask());
  }
  if (!batch.empty())
    GPUCKPT_TRY_VOID(ask());
  return missing;
}

}  // namespace gpuckpt::node
