// A store-backed checkpoint's chunks through a real registry (Debian's docker-registry, distribution 2.8;
// node/registry_chunks.h): pushed beside its image as blobs under an artifact manifest whose subject is the image,
// a second checkpoint sending only the chunks the registry lacks; pulled into an empty store bit for bit (by the
// library and by `gpuckpt pull-chunks`), a second pull downloading nothing; a blob the registry serves tampered, one
// annotated with another chunk's digest, or one whose descriptor gives another size, refused with nothing of it in
// the store. The artifact manifest's
// parser refuses hostile manifests field by field.
#include <catch2/catch_test_macros.hpp>

#include <httplib.h>

#include <cstdlib>
#include <fstream>
#include <set>

#include <nlohmann/json.hpp>

#include "archive/checkpoint_image.h"
#include "gpumem/chunk_store.h"
#include "node/chunk_transfer.h"
#include "node/registry_chunks.h"
#include "node/registry_push.h"
#include "test/support/registry_server.h"
#include "test/support/store_checkpoint.h"
#include "test/support/temp_dir.h"

namespace fs = std::filesystem;
namespace cs = gpuckpt::chunk_store;
using namespace gpuckpt;
using nlohmann::json;
using test::compressible_chunk;
using test::random_chunk;

namespace {

std::string bytes_of(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A chunk as a registry carries it: the version-1 form Store::read gives (32-byte header | payload), whatever layout
// the store keeps it in.
std::string wire_form(const cs::Store& store, const cs::Digest& d) {
  auto header = store.stat(d);
  REQUIRE(header);
  std::vector<std::byte> file;
  REQUIRE(store.read(d, cs::kChunkHeaderSize + header->stored_size, file));
  return std::string(reinterpret_cast<const char*>(file.data()), file.size());
}

// The chunk files in a store, by name.
std::set<std::string> chunk_files(const fs::path& store) {
  std::set<std::string> names;
  if (!fs::exists(store / "sha256")) return names;
  for (const auto& e : fs::recursive_directory_iterator(store / "sha256"))
    if (e.is_regular_file() && e.path().filename().string().size() == cs::kDigestHexChars)
      names.insert(e.path().filename().string());
  return names;
}

// A checkpoint of `memory` in `store`, its image in `dir`, both pushed to `options.repository` under `tag`.
struct Pushed {
  test::StoreCheckpoint checkpoint;
  CheckpointImage image;
  node::ChunkPushReport chunks;
  std::set<cs::Digest> named;
};
Pushed push(const std::shared_ptr<cs::Store>& store, const fs::path& dir, const node::RegistryOptions& options,
            const std::string& tag, std::vector<std::vector<std::byte>> memory) {
  fs::create_directories(dir);
  auto c = test::write_store_checkpoint(store, dir, {{7, std::move(memory)}});
  REQUIRE(c);
  auto image = write_checkpoint_image(c->archive, dir / "ck.oci", tag, ArchiveLimits{});
  REQUIRE(image);
  auto pushed = node::push_checkpoint_image(options, image->layout, tag);
  INFO((pushed.ok() ? std::string() : pushed.error().message));
  REQUIRE(pushed);
  auto named = node::manifest_chunks(c->archive, ArchiveLimits{});
  REQUIRE(named);
  const auto subject_size = fs::file_size(image->layout / "blobs" / "sha256" / image->manifest_digest.substr(7));
  auto chunks = node::push_chunks(options, *store, *named, tag, image->manifest_digest, subject_size);
  INFO((chunks.ok() ? std::string() : chunks.error().message));
  REQUIRE(chunks);
  return {std::move(*c), *image, *chunks, *named};
}

}  // namespace

TEST_CASE("chunks through a registry: pushed once each, pulled bit for bit, tampered blobs refused", "[e2e]") {
  test::RegistryServer registry;
  if (!registry.ready()) SKIP("docker-registry is not installed or did not start (scripts/setup.sh installs it)");
  test::TempDir tmp("gpuckpt-registry-chunks");
  auto source = test::open_store(tmp.path / "source");
  node::RegistryOptions options;
  options.repository = registry.host() + "/ml/checkpoints";
  options.plain_http = true;
  options.chunk_streams = 3;

  // The first checkpoint: three chunks (raw, zstd, raw) and a zero one (never stored), all sent.
  auto first = push(source, tmp.path / "one", options, "ck-1",
                    {random_chunk(1), compressible_chunk(2), random_chunk(3), std::vector<std::byte>(test::kStoreChunk)});
  CHECK(first.named.size() == 3);
  CHECK(first.chunks.chunks == 3);
  CHECK(first.chunks.uploaded == 3);
  CHECK(first.chunks.present == 0);
  CHECK(first.chunks.pages == 1);

  // What the registry holds: the artifact manifest under ck-1.gpuckpt-chunks naming the image, each chunk's file as
  // a blob, annotated with the chunk's digest.
  httplib::Client client("127.0.0.1", registry.port());
  auto manifest = client.Get("/v2/ml/checkpoints/manifests/ck-1.gpuckpt-chunks",
                             {{"Accept", "application/vnd.oci.image.manifest.v1+json"}});
  REQUIRE(manifest);
  REQUIRE(manifest->status == 200);
  CHECK(first.chunks.artifact == options.repository + ":ck-1.gpuckpt-chunks@" +
                                     manifest->get_header_value("Docker-Content-Digest"));
  const json artifact = json::parse(manifest->body);
  CHECK(artifact["artifactType"] == "application/vnd.gpuckpt.chunks.v1");
  CHECK(artifact["subject"]["digest"] == first.image.manifest_digest);
  CHECK(artifact["config"]["mediaType"] == "application/vnd.oci.empty.v1+json");
  REQUIRE(artifact["layers"].size() == 3);
  std::set<cs::Digest> listed;
  for (const auto& layer : artifact["layers"]) {
    auto chunk = cs::parse_digest(layer["annotations"]["io.gpuckpt.chunk.digest"].get<std::string>(), "test");
    REQUIRE(chunk);
    listed.insert(*chunk);
    auto blob = client.Get(("/v2/ml/checkpoints/blobs/" + layer["digest"].get<std::string>()).c_str());
    REQUIRE(blob);
    CHECK(blob->status == 200);
    // The chunk's version-1 form, never recompressed: what an older gpuckpt pushed, so blob digests stay the same.
    CHECK(blob->body == wire_form(*source, *chunk));
    const auto body = std::as_bytes(std::span(blob->body.data(), blob->body.size()));
    auto header = cs::decode_header(body);
    REQUIRE(header);
    CHECK(header->version == cs::kPackedChunkVersion);
    CHECK(body.size() == cs::kChunkHeaderSize + header->stored_size);
    if (header->encoding == 0) CHECK(cs::sha256(body.subspan(cs::kChunkHeaderSize)) == *chunk);
    CHECK(layer["size"] == blob->body.size());
  }
  CHECK(listed == first.named);

  // A second checkpoint sharing two of those chunks: only its new one is sent.
  auto second = push(source, tmp.path / "two", options, "ck-2", {random_chunk(1), random_chunk(3), random_chunk(4)});
  CHECK(second.chunks.chunks == 3);
  CHECK(second.chunks.uploaded == 1);
  CHECK(second.chunks.present == 2);
  CHECK(second.chunks.uploaded_bytes == wire_form(*source, cs::sha256(random_chunk(4))).size());

  // Pulled into an empty store: exactly the second checkpoint's chunks, bit for bit, and it restores from them.
  auto target = test::open_store(tmp.path / "target");
  auto pulled = node::pull_chunks(options, options.repository + ":ck-2", *target);
  INFO((pulled.ok() ? std::string() : pulled.error().message));
  REQUIRE(pulled);
  CHECK(pulled->subject == second.image.manifest_digest);
  CHECK(pulled->chunks == 3);
  CHECK(pulled->added == 3);
  CHECK(pulled->present == 0);
  std::set<std::string> expected;
  for (const auto& d : second.named) {
    expected.insert(d.hex());
    CHECK(bytes_of(target->path_of(d)) == bytes_of(source->path_of(d)));
  }
  CHECK(chunk_files(tmp.path / "target") == expected);
  test::check_restorable(second.checkpoint, second.checkpoint.archive, target);
  // Again: everything is there, nothing is downloaded.
  auto again = node::pull_chunks(options, options.repository + ":ck-2", *target);
  REQUIRE(again);
  CHECK(again->added == 0);
  CHECK(again->present == 3);

  // The CLI pulls the first checkpoint's chunks into another store (a process of its own, as an operator runs it).
  const fs::path cli_store = tmp.path / "cli-store";
  const std::string command = std::string(GPUCKPT_CLI) + " pull-chunks " + options.repository + ":ck-1 --plain-http "
                              "--store " + cli_store.string() + " --streams 2 --json > " +
                              (tmp.path / "cli.json").string() + " 2>&1";
  CHECK(std::system(command.c_str()) == 0);
  INFO(bytes_of(tmp.path / "cli.json"));
  const json cli = json::parse(bytes_of(tmp.path / "cli.json"), nullptr, false);
  CHECK(cli.value("added", 0) == 3);
  std::set<std::string> first_chunks;
  for (const auto& d : first.named) first_chunks.insert(d.hex());
  CHECK(chunk_files(cli_store) == first_chunks);

  SECTION("a blob the registry serves changed is refused; nothing of it enters the store") {
    const cs::Digest victim = cs::sha256(random_chunk(4));   // only the second checkpoint has it
    std::string blob_digest;
    const json listing = json::parse(client.Get("/v2/ml/checkpoints/manifests/ck-2.gpuckpt-chunks",
                                                {{"Accept", "application/vnd.oci.image.manifest.v1+json"}})->body);
    for (const auto& layer : listing["layers"])
      if (layer["annotations"]["io.gpuckpt.chunk.digest"] == victim.hex()) blob_digest = layer["digest"];
    REQUIRE(!blob_digest.empty());
    const fs::path stored = registry.blob_file(blob_digest);
    REQUIRE(fs::exists(stored));
    std::string bytes = bytes_of(stored);
    bytes[bytes.size() / 2] = static_cast<char>(bytes[bytes.size() / 2] ^ 0x5a);
    std::ofstream(stored, std::ios::binary | std::ios::trunc) << bytes;
    auto fresh = test::open_store(tmp.path / "fresh");
    auto refused = node::pull_chunks(options, options.repository + ":ck-2", *fresh);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().errno_value == EBADMSG);
    CHECK(refused.error().message.find("chunk " + victim.hex()) != std::string::npos);
    CHECK(refused.error().message.find("not the blob digest") != std::string::npos);
    CHECK_FALSE(chunk_files(tmp.path / "fresh").contains(victim.hex()));
  }

  SECTION("a blob annotated with another chunk's digest is refused; nothing of it enters the store") {
    // A hand-made artifact: chunk 4's file, annotated as chunk 9 (which nobody has).
    const cs::Digest real = cs::sha256(random_chunk(4)), claimed = cs::sha256(random_chunk(9));
    const std::string file = wire_form(*source, real);
    node::ChunkBlob lying{claimed, "sha256:" + cs::sha256(std::as_bytes(std::span(file.data(), file.size()))).hex(),
                          file.size()};
    auto repo = node::split_repository(options.repository);
    REQUIRE(repo);
    node::RegistryClient writer(options, *repo, "pull,push", std::chrono::steady_clock::now() + std::chrono::minutes(1));
    REQUIRE(writer.push_manifest(node::chunks_manifest({lying}, second.image.manifest_digest, 100, 1),
                                 "application/vnd.oci.image.manifest.v1+json", "liar.gpuckpt-chunks"));
    auto fresh = test::open_store(tmp.path / "fresh");
    auto refused = node::pull_chunks(options, options.repository + ":liar", *fresh);
    REQUIRE_FALSE(refused);
    CHECK(refused.error().errno_value == EBADMSG);
    CHECK(refused.error().message.find("SHA-256 mismatch") != std::string::npos);
    CHECK(chunk_files(tmp.path / "fresh").empty());
  }

  SECTION("a descriptor whose size is not the blob's is refused; nothing of it enters the store") {
    const cs::Digest real = cs::sha256(random_chunk(4));
    const std::string file = wire_form(*source, real);
    const std::string digest = "sha256:" + cs::sha256(std::as_bytes(std::span(file.data(), file.size()))).hex();
    auto repo = node::split_repository(options.repository);
    REQUIRE(repo);
    node::RegistryClient writer(options, *repo, "pull,push", std::chrono::steady_clock::now() + std::chrono::minutes(1));
    auto fresh = test::open_store(tmp.path / "fresh");
    // Smaller: the registry sends more than the descriptor allows (refused as it streams). Larger: it sends less.
    for (const auto& [size, says] : std::vector<std::pair<std::uint64_t, std::string>>{
             {file.size() - 100, "sent more than the"}, {file.size() + 100, "its descriptor says"}}) {
      const std::string tag = "sized-" + std::to_string(size);
      auto stored = writer.push_manifest(node::chunks_manifest({{real, digest, size}}, second.image.manifest_digest, 100, 1),
                                         "application/vnd.oci.image.manifest.v1+json", tag + ".gpuckpt-chunks");
      INFO((stored ? std::string() : stored.error().message));
      REQUIRE(stored);
      auto refused = node::pull_chunks(options, options.repository + ":" + tag, *fresh);
      REQUIRE_FALSE(refused);
      INFO(refused.error().message);
      CHECK(refused.error().message.find(says) != std::string::npos);
      CHECK(refused.error().message.find("chunk " + real.hex()) != std::string::npos);
    }
    CHECK(chunk_files(tmp.path / "fresh").empty());
  }

  SECTION("an image without chunks, or a name that is no image, says what to do") {
    auto fresh = test::open_store(tmp.path / "fresh");
    auto none = node::pull_chunks(options, options.repository + ":no-such", *fresh);
    REQUIRE_FALSE(none);
    CHECK(none.error().errno_value == ENOENT);
    CHECK(none.error().message.find("gpuckpt-chunks") != std::string::npos);
    for (const char* bad : {"no-tag/at-all", "127.0.0.1:5000/ml:ck@sha256:00", "HOST/UPPER:ck", "127.0.0.1:5000/ml:"})
      CHECK_FALSE(node::pull_chunks(options, bad, *fresh));
    CHECK(chunk_files(tmp.path / "fresh").empty());
  }
}

TEST_CASE("chunk pulls: credentials go to the configured registry only", "[e2e]") {
  test::RegistryServer registry("gpuckpt", "s3cret-pass");
  if (!registry.ready()) SKIP("docker-registry is not installed or did not start (scripts/setup.sh installs it)");
  test::TempDir tmp("gpuckpt-registry-chunks");
  auto source = test::open_store(tmp.path / "source");
  test::write_file(tmp.path / "credentials", "gpuckpt:s3cret-pass\n");
  node::RegistryOptions options;
  options.repository = registry.host() + "/ml/private";
  options.plain_http = true;
  options.credentials_file = (tmp.path / "credentials").string();
  auto pushed = push(source, tmp.path / "one", options, "ck-1", {random_chunk(1), random_chunk(2)});
  CHECK(pushed.chunks.uploaded == 2);
  auto target = test::open_store(tmp.path / "target");
  // The agent's registry is another host: the image is pulled anonymously, and this registry refuses that.
  node::RegistryOptions elsewhere = options;
  elsewhere.repository = "registry.example:5000/ml/private";
  auto anonymous = node::pull_chunks(elsewhere, options.repository + ":ck-1", *target);
  REQUIRE_FALSE(anonymous);
  CHECK(anonymous.error().errno_value == EACCES);
  CHECK(anonymous.error().message.find("asks for credentials") != std::string::npos);
  CHECK(anonymous.error().message.find("is for registry.example:5000 alone: it is never sent to " + registry.host()) !=
        std::string::npos);
  CHECK(chunk_files(tmp.path / "target").empty());
  // The configured registry: with its credentials.
  auto pulled = node::pull_chunks(options, options.repository + ":ck-1", *target);
  INFO((pulled ? std::string() : pulled.error().message));
  REQUIRE(pulled);
  CHECK(pulled->added == 2);
}

TEST_CASE("chunks' manifest: hostile fields are refused by name", "[unit]") {
  const cs::Digest chunk = cs::sha256(random_chunk(1));
  const std::string blob = "sha256:" + std::string(64, 'a');
  const std::string subject = "sha256:" + std::string(64, 'b');
  const json good = json::parse(node::chunks_manifest({{chunk, blob, 1000}}, subject, 500, 1));
  auto parsed = node::parse_chunks_manifest(good.dump(), "test");
  REQUIRE(parsed);
  REQUIRE(parsed->chunks.size() == 1);
  CHECK(parsed->chunks[0].chunk == chunk);
  CHECK(parsed->chunks[0].blob_digest == blob);
  CHECK(parsed->chunks[0].size == 1000);
  CHECK(parsed->subject == subject);
  CHECK(parsed->pages == 1);

  const auto refused = [&](const std::function<void(json&)>& change, const std::string& says) {
    json m = good;
    change(m);
    auto r = node::parse_chunks_manifest(m.dump(), "the test manifest");
    INFO(m.dump() << " / " << (r ? std::string("accepted") : r.error().message));
    REQUIRE_FALSE(r);
    CHECK(r.error().message.find("the test manifest") != std::string::npos);
    CHECK(r.error().message.find(says) != std::string::npos);
  };
  const auto layer0 = [](json& m) -> json& { return m["layers"][0]; };
  refused([](json& m) { m["artifactType"] = "application/vnd.oci.image.config.v1+json"; }, "artifactType");
  refused([](json& m) { m["schemaVersion"] = 1; }, "schemaVersion");
  refused([](json& m) { m.erase("subject"); }, "subject");
  refused([](json& m) { m["subject"]["digest"] = "sha256:../../etc"; }, "subject's digest");
  refused([](json& m) { m["annotations"]["io.gpuckpt.chunks.pages"] = "0"; }, "io.gpuckpt.chunks.pages");
  refused([](json& m) { m["annotations"]["io.gpuckpt.chunks.pages"] = "65"; }, "io.gpuckpt.chunks.pages");
  refused([&](json& m) { layer0(m)["size"] = 64ull << 30; }, "at most");              // an oversize descriptor
  refused([&](json& m) { layer0(m)["size"] = 32; }, "bytes; a chunk file");          // no payload
  refused([&](json& m) { layer0(m)["size"] = -5; }, "no size");
  refused([&](json& m) { layer0(m)["digest"] = "sha512:" + std::string(128, 'a'); }, "digest is not sha256");
  refused([&](json& m) { layer0(m)["digest"] = "sha256:" + std::string(64, 'A'); }, "digest is not sha256");
  refused([&](json& m) { layer0(m)["mediaType"] = "application/vnd.oci.image.layer.v1.tar"; }, "mediaType");
  refused([&](json& m) { layer0(m).erase("annotations"); }, "io.gpuckpt.chunk.digest");
  refused([&](json& m) { layer0(m)["annotations"]["io.gpuckpt.chunk.digest"] = "../../../etc/passwd"; },
          "io.gpuckpt.chunk.digest");
  refused([&](json& m) { layer0(m)["annotations"]["io.gpuckpt.chunk.digest"] = std::string(64, 'F'); },
          "io.gpuckpt.chunk.digest");
  refused([&](json& m) { m["layers"].push_back(layer0(m)); }, "listed twice");
  refused([&](json& m) {
    for (std::size_t i = 0; i < node::kMaxChunkLayers; ++i) m["layers"].push_back(layer0(m));
  }, "more than the");
  CHECK_FALSE(node::parse_chunks_manifest("{\"layers\": [", "test"));
  CHECK_FALSE(node::parse_chunks_manifest(std::string(node::kMaxChunksManifestBytes + 1, ' '), "test"));
  // Tags: the chunks' tag of a tag too long for it is refused, not cut.
  CHECK(node::chunks_tag("ck-1", 0).value() == "ck-1.gpuckpt-chunks");
  CHECK(node::chunks_tag("ck-1", 2).value() == "ck-1.gpuckpt-chunks.2");
  CHECK_FALSE(node::chunks_tag(std::string(120, 'a'), 0));
  CHECK_FALSE(node::chunks_tag("-bad", 0));
}
