#include "node/registry_chunks.h"

#include <algorithm>
#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <set>
#include <thread>

#include "base/caught.h"
#include "gpumem/chunk_receive.h"
#include "gpumem/gpu_image.h"
#include "base/json_reader.h"
#include "base/log.h"

namespace gpuckpt::node {

namespace cs = chunk_store;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kImageManifestType = "application/vnd.oci.image.manifest.v1+json";
// The OCI empty descriptor ("{}"): an artifact's config when it has none.
constexpr const char* kEmptyType = "application/vnd.oci.empty.v1+json";
constexpr const char* kEmptyDigest = "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";

std::string blob_digest_of(std::span<const std::byte> bytes) { return "sha256:" + cs::sha256(bytes).hex(); }

bool is_tag(std::string_view tag) {
  if (tag.empty() || tag.size() > 128) return false;
  for (std::size_t i = 0; i < tag.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(tag[i]);
    if (!std::isalnum(c) && c != '_' && (i == 0 || (c != '.' && c != '-'))) return false;
  }
  return true;
}

// What one connection's thread reuses from chunk to chunk.
struct StreamBuffers {
  std::unique_ptr<gpu_image::ChunkCodec> codec;   // made on first use
  std::vector<std::byte> file, raw;
};

// Runs `work(client, i, buffers)` for i in [0, count) on up to `streams` connections (siblings of `first`), each
// with its own buffers. The first failure stops the others before their next item and is returned.
Result<void> in_parallel(RegistryClient& first, std::size_t streams, std::size_t count,
                         const std::function<Result<void>(RegistryClient&, std::size_t, StreamBuffers&)>& work) {
  std::atomic<std::size_t> next{0};
  std::atomic<bool> stop{false};
  std::mutex mutex;
  std::optional<Error> failure;
  const auto fail = [&](const Error& error) {
    std::lock_guard lock(mutex);
    if (!failure) failure = error;
    stop = true;
  };
  // Whatever a stream meets (a bug, bad_alloc), it fails the pull and never the agent.
  const auto run = [&](RegistryClient& client) {
    auto streamed = caught("a chunk stream", [&] {
      StreamBuffers buffers;
      for (std::size_t i; !stop && (i = next++) < count;)
        if (auto done = work(client, i, buffers); !done) fail(done.error());
    });
    if (!streamed) fail(streamed.error());
  };
  const std::size_t n = std::clamp<std::size_t>(std::min(streams, count), 1, kMaxChunkStreams);
  std::vector<std::unique_ptr<RegistryClient>> clients;
  for (std::size_t i = 1; i < n; ++i) clients.push_back(first.sibling());
  std::vector<std::thread> threads;
  for (auto& client : clients) threads.emplace_back([&run, &client] { run(*client); });
  run(first);
  for (auto& t : threads) t.join();
  if (failure) return *failure;
  return {};
}

}  // namespace

Result<std::string> chunks_tag(const std::string& tag, std::size_t page) {
  std::string name = tag + kChunksTagSuffix;
  if (page > 0) name += "." + std::to_string(page);
  if (!is_tag(tag))
    return make_error("'" + log::escaped(tag, 140) + "' is not an image tag (1 to 128 letters, digits, '_', '.', '-'; "
                      "a letter, digit or '_' first)");
  if (!is_tag(name))
    return make_error("the image tag '" + log::escaped(tag, 140) + "' leaves no room for its chunks' tag '" +
                      log::escaped(name, 160) + "' (a tag is at most 128 characters); use a shorter tag");
  return name;
}

std::string chunks_manifest(const std::vector<ChunkBlob>& chunks, const std::string& subject_digest,
                            std::uint64_t subject_size, std::size_t pages) {
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& c : chunks)
    layers.push_back({{"mediaType", kChunkBlobMediaType},
                      {"digest", c.blob_digest},
                      {"size", c.size},
                      {"annotations", {{kChunkDigestAnnotation, c.chunk.hex()}}}});
  const nlohmann::json manifest = {
      {"schemaVersion", 2},
      {"mediaType", kImageManifestType},
      {"artifactType", kChunksArtifactType},
      {"config", {{"mediaType", kEmptyType}, {"digest", kEmptyDigest}, {"size", 2}, {"data", "e30="}}},
      {"layers", std::move(layers)},
      {"subject", {{"mediaType", kImageManifestType}, {"digest", subject_digest}, {"size", subject_size}}},
      {"annotations", {{kChunkPagesAnnotation, std::to_string(pages)}}}};
  return manifest.dump();
}

Result<ChunksPage> parse_chunks_manifest(std::string_view text, std::string_view source) {
  const std::string where(source);
  JsonLimits limits;
  limits.max_bytes = kMaxChunksManifestBytes;
  limits.max_depth = 8;
  limits.max_values = 16 * kMaxChunkLayers + 64;
  GPUCKPT_TRY(auto json, parse_json(text, where, limits));
  const auto bad = [&](const std::string& what) { return make_error(where + ": " + what, EBADMSG); };
  if (!json.is_object()) return bad("not a JSON object");
  const auto string_at = [](const nlohmann::json& o, const char* key) -> std::optional<std::string> {
    const auto it = o.find(key);
    if (it == o.end() || !it->is_string()) return std::nullopt;
    return it->get<std::string>();
  };
  if (json.value("schemaVersion", nlohmann::json()) != 2) return bad("schemaVersion is not 2");
  if (string_at(json, "artifactType") != kChunksArtifactType)
    return bad(std::string("artifactType is not ") + kChunksArtifactType + ": not gpuckpt's chunks");
  ChunksPage page;
  const auto subject = json.find("subject");
  if (subject == json.end() || !subject->is_object()) return bad("no subject (the checkpoint image's manifest)");
  const auto subject_digest = string_at(*subject, "digest");
  if (!subject_digest || !is_sha256(*subject_digest)) return bad("the subject's digest is not sha256:HEX");
  page.subject = *subject_digest;
  const auto annotations = json.find("annotations");
  const auto pages = annotations != json.end() && annotations->is_object()
                         ? string_at(*annotations, kChunkPagesAnnotation) : std::nullopt;
  if (!pages || pages->empty() || pages->size() > 3 || pages->find_first_not_of("0123456789") != std::string::npos ||
      std::stoul(*pages) < 1 || std::stoul(*pages) > kMaxChunkPages)
    return bad(std::string("annotation ") + kChunkPagesAnnotation + " is not a number from 1 to " +
               std::to_string(kMaxChunkPages));
  page.pages = std::stoul(*pages);
  const auto layers = json.find("layers");
  if (layers == json.end() || !layers->is_array()) return bad("no layers");
  if (layers->size() > kMaxChunkLayers)
    return bad(std::to_string(layers->size()) + " layers, more than the " + std::to_string(kMaxChunkLayers) +
               " one page holds");
  std::set<cs::Digest> seen;
  for (std::size_t i = 0; i < layers->size(); ++i) {
    const auto& layer = (*layers)[i];
    const std::string at = "layer " + std::to_string(i);
    if (!layer.is_object()) return bad(at + " is not an object");
    if (string_at(layer, "mediaType") != kChunkBlobMediaType)
      return bad(at + "'s mediaType is not " + kChunkBlobMediaType);
    ChunkBlob blob;
    const auto digest = string_at(layer, "digest");
    if (!digest || !is_sha256(*digest)) return bad(at + "'s digest is not sha256:HEX");
    blob.blob_digest = *digest;
    const auto size = layer.find("size");
    if (size == layer.end() || !size->is_number_unsigned()) return bad(at + " has no size");
    blob.size = size->get<std::uint64_t>();
    if (blob.size <= cs::kChunkHeaderSize || blob.size > chunk_receive::kMaxChunkFileBytes)
      return bad(at + " is " + std::to_string(blob.size) + " bytes; a chunk file is more than " +
                 std::to_string(cs::kChunkHeaderSize) + " and at most " + std::to_string(chunk_receive::kMaxChunkFileBytes));
    const auto layer_annotations = layer.find("annotations");
    const auto chunk = layer_annotations != layer.end() && layer_annotations->is_object()
                           ? string_at(*layer_annotations, kChunkDigestAnnotation) : std::nullopt;
    if (!chunk) return bad(at + " has no " + kChunkDigestAnnotation + " annotation");
    auto parsed = cs::parse_digest(*chunk, where + ": " + at + "'s " + kChunkDigestAnnotation);
    if (!parsed) return make_error(parsed.error().message, EBADMSG);
    blob.chunk = *parsed;
    if (!seen.insert(blob.chunk).second) return bad("chunk " + blob.chunk.hex() + " is listed twice");
    page.chunks.push_back(std::move(blob));
  }
  return page;
}

nlohmann::json ChunkPushReport::to_json() const {
  return {{"artifact", artifact}, {"pages", pages},   {"chunks", chunks},
          {"uploaded", uploaded}, {"uploaded_bytes", uploaded_bytes}, {"present", present}};
}

nlohmann::json ChunkPullReport::to_json() const {
  return {{"image", image}, {"subject", subject}, {"pages", pages},         {"chunks", chunks},
          {"added", added}, {"added_bytes", added_bytes}, {"present", present}};
}

Result<ChunkPushReport> push_chunks(const RegistryOptions& options, const cs::Store& store,
                                    const std::set<cs::Digest>& chunks, const std::string& tag,
                                    const std::string& subject_digest, std::uint64_t subject_size) {
  GPUCKPT_TRY(auto repo, split_repository(options.repository));
  const std::size_t pages = std::max<std::size_t>(1, (chunks.size() + kMaxChunkLayers - 1) / kMaxChunkLayers);
  if (pages > kMaxChunkPages)
    return make_error("the checkpoint has " + std::to_string(chunks.size()) + " chunks, more than the " +
                      std::to_string(kMaxChunkPages * kMaxChunkLayers) + " its chunks' manifests can list", EFBIG);
  std::vector<std::string> tags;
  for (std::size_t p = 0; p < pages; ++p) {
    GPUCKPT_TRY(auto t, chunks_tag(tag, p));
    tags.push_back(t);
  }
  RegistryClient first(options, repo, "pull,push", Clock::now() + options.push_timeout);
  // The artifact's config, the empty descriptor's blob: distribution checks that every blob a manifest names is there.
  const std::string empty = "{}";
  GPUCKPT_TRY(auto has_empty, first.has_blob(kEmptyDigest));
  if (!has_empty)
    GPUCKPT_TRY_VOID(first.upload_blob(kEmptyDigest, empty.size(), [&](std::uint64_t offset, std::span<char> buffer) {
      const std::size_t n = std::min<std::size_t>(buffer.size(), empty.size() - offset);
      std::copy_n(empty.data() + offset, n, buffer.data());
      return n;
    }));
  const std::vector<cs::Digest> order(chunks.begin(), chunks.end());
  std::vector<ChunkBlob> blobs(order.size());
  std::atomic<std::size_t> uploaded{0}, present{0};
  std::atomic<std::uint64_t> uploaded_bytes{0};
  auto moved = in_parallel(first, options.chunk_streams, order.size(), [&](RegistryClient& client, std::size_t i, StreamBuffers& buffers) {
    const cs::Digest& d = order[i];
    auto header = store.stat(d);
    if (!header)
      return Result<void>(make_error("chunk " + d.hex() + " is not in the chunk store " + store.root().string() +
                                     " (expected at " + store.path_of(d).string() + "): " + header.error().message,
                                     header.error().errno_value));
    std::vector<std::byte>& file = buffers.file;
    // Read whole and checked against its digest: a chunk corrupt in this store is not sent to the registry.
    if (auto read = store.read(d, cs::kChunkHeaderSize + header->stored_size, file); !read) return read;
    ChunkBlob& blob = blobs[i];
    blob.chunk = d;
    blob.blob_digest = blob_digest_of(file);
    blob.size = file.size();
    auto there = client.has_blob(blob.blob_digest);
    if (!there) return Result<void>(there.error());
    if (*there) {
      ++present;
      return Result<void>();
    }
    auto sent = client.upload_blob(blob.blob_digest, blob.size, [&file](std::uint64_t offset, std::span<char> buffer) {
      const std::size_t n = std::min<std::size_t>(buffer.size(), file.size() - offset);
      std::copy_n(reinterpret_cast<const char*>(file.data()) + offset, n, buffer.data());
      return n;
    });
    if (!sent) return sent;
    ++uploaded;
    uploaded_bytes += blob.size;
    return Result<void>();
  });
  GPUCKPT_TRY_VOID(moved);
  ChunkPushReport report;
  report.pages = pages;
  report.chunks = order.size();
  report.uploaded = uploaded;
  report.uploaded_bytes = uploaded_bytes;
  report.present = present;
  // The first page last: a puller that finds it finds every other page there already.
  for (std::size_t p = pages; p-- > 0;) {
    const auto from = blobs.begin() + static_cast<std::ptrdiff_t>(std::min(p * kMaxChunkLayers, blobs.size()));
    const auto to = blobs.begin() + static_cast<std::ptrdiff_t>(std::min((p + 1) * kMaxChunkLayers, blobs.size()));
    const std::string manifest = chunks_manifest(std::vector<ChunkBlob>(from, to), subject_digest, subject_size, pages);
    GPUCKPT_TRY(auto stored, first.push_manifest(manifest, kImageManifestType, tags[p]));
    const std::string own = blob_digest_of(std::as_bytes(std::span(manifest.data(), manifest.size())));
    if (stored != own)
      return make_error("the registry stored the chunks' manifest " + tags[p] + " as " + log::escaped(stored, 80) +
                        ", not " + own + "; the push counts as failed", EIO);
    if (p == 0) report.artifact = options.repository + ":" + tags[0] + "@" + own;
  }
  return report;
}

Result<ImageName> parse_image_name(const std::string& image) {
  const auto colon = image.rfind(':');
  const auto slash = image.rfind('/');
  if (image.size() > 400 || image.find('@') != std::string::npos || colon == std::string::npos ||
      (slash != std::string::npos && colon < slash))
    return make_error("the image '" + log::escaped(image, 120) + "' is not HOST[:PORT]/PATH:TAG (the tag the "
                      "checkpoint image was pushed under, e.g. registry.example:5000/ml/checkpoints:ck-1)");
  ImageName name{image.substr(0, colon), image.substr(colon + 1)};
  if (auto repo = split_repository(name.repository); !repo)
    return make_error("the image '" + log::escaped(image, 120) + "': " + repo.error().message);
  if (auto tag = chunks_tag(name.tag, 0); !tag) return make_error("the image '" + log::escaped(image, 120) + "': " +
                                                                  tag.error().message);
  return name;
}

namespace {

// The chunks the pages of `name`'s chunk manifest list (report.pages and report.subject set from the first page),
// each page tied to what was pushed by its digest; `refused` adds to an EACCES why no credentials went.
Result<std::vector<ChunkBlob>> read_chunk_pages(RegistryClient& client, const ImageName& name, ChunkPullReport& report,
                                                const std::function<Error(Error)>& refused) {
  std::vector<ChunkBlob> listed;
  std::set<cs::Digest> seen;
  for (std::size_t p = 0; p < std::max<std::size_t>(report.pages, 1); ++p) {
    GPUCKPT_TRY(auto tag, chunks_tag(name.tag, p));
    auto got = client.get_manifest(tag, kImageManifestType, kMaxChunksManifestBytes);
    if (!got) {
      if (got.error().errno_value == EACCES) return refused(got.error());
      if (p == 0 && got.error().errno_value == ENOENT)
        return make_error(got.error().message + " (the chunks of a store-backed checkpoint are pushed under the "
                          "image's tag + " + kChunksTagSuffix + " by an agent with image_registry set; an inline "
                          "checkpoint has none to pull)", ENOENT);
      return got.error();
    }
    const std::string source = "the chunks' manifest " + name.repository + ":" + tag;
    const std::string digest = blob_digest_of(std::as_bytes(std::span(got->text.data(), got->text.size())));
    // The registry's Docker-Content-Digest is what ties the page to what was pushed (docs/formats.md): an answer
    // without one (a proxy's page, a server that is no registry) is refused, not read.
    if (got->digest.empty())
      return make_error(source + ": the registry answered it without a Docker-Content-Digest header (bytes that hash "
                        "to " + digest + "): no OCI distribution registry answers so; refused. Is image_registry "
                        "a registry, and not a proxy or web server in front of one?", EBADMSG);
    if (got->digest != digest)
      return make_error(source + ": the registry names it " + log::escaped(got->digest, 80) + " but its bytes hash "
                        "to " + digest + "; refused", EBADMSG);
    GPUCKPT_TRY(auto page, parse_chunks_manifest(got->text, source));
    if (p == 0) {
      report.pages = page.pages;
      report.subject = page.subject;
    } else if (page.pages != report.pages || page.subject != report.subject) {
      return make_error(source + " belongs to another push (its subject or page count differs from the first "
                        "page's); push the checkpoint image again", EBADMSG);
    }
    for (auto& blob : page.chunks) {
      if (!seen.insert(blob.chunk).second)
        return make_error(source + ": chunk " + blob.chunk.hex() + " is listed on two pages; refused", EBADMSG);
      listed.push_back(std::move(blob));
    }
  }
  return listed;
}

}  // namespace

Result<ChunkPullReport> pull_chunks(const RegistryOptions& configured, const std::string& image, cs::Store& store) {
  GPUCKPT_TRY(auto name, parse_image_name(image));
  GPUCKPT_TRY(auto repo, split_repository(name.repository));
  RegistryOptions options = configured;
  options.repository = name.repository;
  // The credentials (and the token realm they may go to) are the configured registry's: another host gets none.
  auto own = split_repository(configured.repository);
  const bool foreign = !own || own->host != repo.host;
  if (foreign) {
    options.credentials_file.clear();
    options.token_realm_host.clear();
  }
  // A refusal where the credentials were kept back says why they were.
  const auto refused = [&](Error e) {
    if (foreign && e.errno_value == EACCES && !configured.credentials_file.empty())
      e.message += " (image_registry.credentials_file is for " + (own ? own->host : std::string("image_registry")) +
                   " alone: it is never sent to " + repo.host + ")";
    return e;
  };
  RegistryClient first(options, repo, "pull", Clock::now() + options.push_timeout);
  ChunkPullReport report;
  report.image = image;
  GPUCKPT_TRY(const std::vector<ChunkBlob> listed, read_chunk_pages(first, name, report, refused));
  report.chunks = listed.size();
  std::vector<const ChunkBlob*> wanted;
  for (const auto& blob : listed) {
    if (store.stat(blob.chunk) && store.touch(blob.chunk)) ++report.present;
    else wanted.push_back(&blob);
  }
  std::atomic<std::size_t> added{0}, present{report.present};
  std::atomic<std::uint64_t> added_bytes{0};
  auto moved = in_parallel(first, options.chunk_streams, wanted.size(), [&](RegistryClient& client, std::size_t i, StreamBuffers& buffers) {
    const ChunkBlob& blob = *wanted[i];
    if (!buffers.codec) buffers.codec = std::make_unique<gpu_image::ChunkCodec>(gpu_image::kMaxChunkSize);
    std::vector<std::byte>& file = buffers.file;
    const std::string what = "chunk " + blob.chunk.hex() + " (blob " + blob.blob_digest + " of " +
                             name.repository + ")";
    if (auto got = client.get_blob(blob.blob_digest, blob.size, file); !got)
      return Result<void>(make_error(what + ": " + got.error().message, got.error().errno_value));
    // The blob is the file its descriptor names, then the chunk its annotation names (chunk_receive.h).
    if (const std::string got = blob_digest_of(file); got != blob.blob_digest)
      return Result<void>(make_error(what + " is refused: its bytes hash to " + got + ", not the blob digest its "
                                     "descriptor names; nothing of it entered the chunk store " +
                                     store.root().string(), EBADMSG));
    auto received = chunk_receive::receive_chunk(store, blob.chunk, file, *buffers.codec, buffers.raw);
    if (!received)
      return Result<void>(make_error("the blob " + blob.blob_digest + " of " + name.repository + ": " +
                                     received.error().message, received.error().errno_value));
    if (received->present) {   // written meanwhile (another pull, a dump): kept as it is
      ++present;
      return Result<void>();
    }
    ++added;
    added_bytes += file.size();
    return Result<void>();
  });
  // What landed is made durable even when another chunk failed: a pull again skips it.
  auto synced = store.sync();
  GPUCKPT_TRY_VOID(moved);
  GPUCKPT_TRY_VOID(synced);
  report.added = added;
  report.present = present;
  report.added_bytes = added_bytes;
  return report;
}

}  // namespace gpuckpt::node
