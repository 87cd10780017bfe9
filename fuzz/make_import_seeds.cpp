// make_import_seeds DIR: the seeds of import_fuzz and chunk_file_fuzz, made the way they arrive: small store-backed
// checkpoints (4 KiB chunks) written by StoreWriter into a chunk store, exported by export_checkpoint, and each
// export's entries written as import_fuzz's records; the chunk files of the store as chunk_file_fuzz's inputs.
// Run by hand when a format changes: make_import_seeds fuzz/corpus.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <map>
#include <vector>

#include "archive/checkpoint_export.h"
#include "archive/directory_archive.h"
#include "gpumem/gpu_manifest.h"
#include "fuzz/fuzz_support.h"

using namespace gpuckpt;
namespace cs = chunk_store;
namespace gi = gpu_image;
namespace fs = std::filesystem;

namespace {

constexpr std::uint32_t kChunk = 4096;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "make_import_seeds: %s\n", what.c_str());
  std::exit(1);
}

std::vector<std::byte> pattern(unsigned seed, bool compressible) {
  std::vector<std::byte> out(kChunk);
  std::uint64_t x = 0x2545f4914f6cdd1dULL * (seed + 1);
  for (std::size_t i = 0; i < out.size(); ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    out[i] = static_cast<std::byte>(compressible ? (i / 64 + seed) % 5 : x >> 56);
  }
  return out;
}

// A checkpoint of these processes' memory (by vpid) in `store`, packed as podman packs one, at dir/ck.tar.
fs::path checkpoint(const std::shared_ptr<cs::Store>& store, const fs::path& dir,
                    const std::map<int, std::vector<std::vector<std::byte>>>& memory) {
  const std::string id = gi::new_checkpoint_id();
  const fs::path images = dir / "checkpoint";
  fs::create_directories(images);
  fuzz::write_file(images / "inventory.img", "criu inventory");
  const int images_fd = ::open(images.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (images_fd < 0) fail("cannot open " + images.string());
  for (const auto& [vpid, chunks] : memory) {
    gi::ImageHeader header;
    header.vpid = vpid;
    header.dump_pid = 1000 + vpid;
    header.chunk_size = kChunk;
    auto writer = gi::StoreWriter::create(store, header, {{0x7f0000000000, chunks.size() * kChunk}}, id);
    if (!writer) fail(writer.error().message);
    gi::ChunkCodec codec(kChunk);
    gi::CompressionHistory history;
    for (std::size_t i = 0; i < chunks.size(); ++i)
      if (auto ok = (*writer)->add(0, i, chunks[i], codec, gi::Settings{}, history); !ok) fail(ok.error().message);
    if (auto ok = (*writer)->finish(images_fd); !ok) fail(ok.error().message);
  }
  ::close(images_fd);
  const fs::path archive = dir / "ck.tar";
  if (auto ok = pack_tar({{"config.dump", {}, R"({"name":"train","id":"0123abcd","rootfsImageName":"img"})"},
                          {"spec.dump", {}, R"({"annotations":{"io.container.manager":"libpod"}})"},
                          {"checkpoint", images, {}}},
                         archive);
      !ok)
    fail(ok.error().message);
  return archive;
}

// The entries of `archive`, in its order, as import_fuzz's records.
std::string records(const fs::path& archive) {
  auto entries = list_archive(archive, ArchiveLimits{});
  if (!entries) fail(entries.error().message);
  std::string out;
  for (const auto& e : *entries) {
    std::string data = e.link_target;
    if (e.kind == ArchiveEntry::Kind::File) {
      auto content = read_archive_entry(archive, e.name, ArchiveLimits{});
      if (!content || !*content) fail("cannot read " + e.name);
      data = **content;
    }
    if (e.name.size() > 255 || data.size() > 0xffff) fail(e.name + " does not fit a record");
    out += static_cast<char>(static_cast<int>(e.kind));
    out += static_cast<char>(e.name.size());
    out += e.name;
    out += static_cast<char>(data.size() & 0xff);
    out += static_cast<char>(data.size() >> 8);
    out += data;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) fail("usage: make_import_seeds DIR (fuzz/corpus)");
  const fs::path corpus = argv[1];
  const fs::path work = fuzz::scratch() / "seeds";
  fs::remove_all(work);
  auto opened = cs::Store::open(work / "store", true);
  if (!opened) fail(opened.error().message);
  std::shared_ptr<cs::Store> store(std::move(*opened));
  const auto shared = pattern(3, false);
  // Two processes: raw, zstd, zero, the chunk import_fuzz's store has already, and one they share.
  const std::map<int, std::vector<std::vector<std::byte>>> two = {
      {7, {pattern(1, false), pattern(2, true), std::vector<std::byte>(kChunk), fuzz::present_chunk(), shared}},
      {8, {shared, pattern(4, false)}}};
  const std::map<int, std::vector<std::vector<std::byte>>> one = {{9, {pattern(5, true)}}};
  for (const auto& [name, memory] : {std::pair{"two-processes", two}, std::pair{"one-chunk", one}}) {
    const fs::path dir = work / name;
    const fs::path exported = dir / "exported.tar";
    if (auto ok = checkpoint_export::export_checkpoint(checkpoint(store, dir, memory), store, exported,
                                                       ArchiveLimits{});
        !ok)
      fail(ok.error().message);
    fuzz::write_file(corpus / "import_fuzz" / (std::string(name) + ".records"), records(exported));
  }
  // chunk_file_fuzz: the digest, then the chunk as read() gives it (the version-1 wire form).
  for (const auto& [name, raw] : {std::pair{"raw", pattern(1, false)}, std::pair{"zstd", pattern(2, true)}}) {
    const cs::Digest digest = cs::sha256(raw);
    std::vector<std::byte> file;
    if (auto stat = store->stat(digest); !stat) fail(stat.error().message);
    if (auto ok = store->read(digest, cs::kChunkHeaderSize + store->stat(digest)->stored_size, file); !ok)
      fail(ok.error().message);
    std::string input(reinterpret_cast<const char*>(digest.bytes.data()), digest.bytes.size());
    input.append(reinterpret_cast<const char*>(file.data()), file.size());
    fuzz::write_file(corpus / "chunk_file_fuzz" / name, input);
  }
  fs::remove_all(work);
  return 0;
}
