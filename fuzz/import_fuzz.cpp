// `gpuckpt import` (archive/checkpoint_export.h) of an exported checkpoint from another node: its manifests, its
// carried chunks checked and put into a fresh chunk store, the references, the store-backed archive written.
//
// The input is the archive's entries, written as a tar in that order, so that tar's header checksums do not stop
// nearly every mutation at the first block. Records until the input ends:
//   u8 kind (low 2 bits: file, directory, symlink, hardlink) | u8 name length | name | u16 LE data length | data
// (a link's data is its target; a short record takes what is left). fuzz/make_import_seeds.cpp writes the seeds
// from exports of small store-backed checkpoints.
//
// The store starts holding one chunk (fuzz::present_chunk()), so the path that skips a chunk the store has runs too.
// What must hold: the store's chunk stays as it was stored (the node's checkpoints name it so); a refused import
// references nothing (refs/ empty) and leaves no output, not even a temporary one beside it; an accepted one leaves
// an archive carrying no chunks, a reference per manifest, and every chunk of every manifest in the store, decoding
// to bytes whose SHA-256 is its digest.
#include <archive.h>
#include <archive_entry.h>

#include <algorithm>
#include <cstdio>
#include <vector>

#include "archive/checkpoint_export.h"
#include "gpumem/gpu_manifest.h"
#include "fuzz/fuzz_support.h"

using namespace gpuckpt;
namespace cs = chunk_store;
namespace fs = std::filesystem;

namespace {

void violated(const std::string& what) {
  std::fprintf(stderr, "import_fuzz: invariant violated: %s\n", what.c_str());
  std::abort();
}

// The records of the input as a tar at `path`; an entry libarchive will not write is left out.
void write_records(std::string_view in, const fs::path& path) {
  archive* tar = archive_write_new();
  archive_write_set_format_pax_restricted(tar);
  if (archive_write_open_filename(tar, path.c_str()) != ARCHIVE_OK) std::abort();
  const auto take = [&in](std::size_t n) {
    const std::string_view out = in.substr(0, n);
    in.remove_prefix(out.size());
    return out;
  };
  while (in.size() >= 2) {
    const unsigned kind = static_cast<unsigned char>(in[0]) & 3u;
    const std::size_t name_size = static_cast<unsigned char>(in[1]);
    in.remove_prefix(2);
    const std::string name(take(name_size));
    const std::string_view size_bytes = take(2);
    std::size_t data_size = 0;
    for (std::size_t i = 0; i < size_bytes.size(); ++i)
      data_size |= std::size_t{static_cast<unsigned char>(size_bytes[i])} << (8 * i);
    const std::string data(take(data_size));
    archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, name.c_str());
    archive_entry_set_mtime(entry, 1700000000, 0);
    switch (kind) {
      case 0:
        archive_entry_set_filetype(entry, AE_IFREG);
        archive_entry_set_perm(entry, 0644);
        archive_entry_set_size(entry, static_cast<la_int64_t>(data.size()));
        break;
      case 1:
        archive_entry_set_filetype(entry, AE_IFDIR);
        archive_entry_set_perm(entry, 0755);
        break;
      case 2:
        archive_entry_set_filetype(entry, AE_IFLNK);
        archive_entry_set_perm(entry, 0777);
        archive_entry_set_symlink(entry, data.c_str());
        break;
      default:
        archive_entry_set_filetype(entry, AE_IFREG);
        archive_entry_set_perm(entry, 0644);
        archive_entry_set_hardlink(entry, data.c_str());
        break;
    }
    if (archive_write_header(tar, entry) == ARCHIVE_OK && kind == 0 && !data.empty())
      (void)archive_write_data(tar, data.data(), data.size());
    archive_entry_free(entry);
  }
  archive_write_close(tar);
  archive_write_free(tar);
}

cs::ChunkHeader present_header() {
  cs::ChunkHeader header;
  header.encoding = static_cast<std::uint8_t>(gpu_image::Encoding::Raw);
  header.raw_size = static_cast<std::uint32_t>(fuzz::present_chunk().size());
  header.stored_size = header.raw_size;
  return header;
}

std::shared_ptr<cs::Store> fresh_store(const fs::path& root) {
  std::error_code ec;
  fs::remove_all(root, ec);
  auto store = cs::Store::open(root, true);
  if (!store) violated("a fresh store at " + root.string() + ": " + store.error().message);
  std::shared_ptr<cs::Store> out(std::move(*store));
  const auto raw = fuzz::present_chunk();
  if (!out->put(cs::sha256(raw), present_header(), raw)) violated("the store's first chunk could not be put");
  return out;
}

void check_present_kept(const cs::Store& store) {
  const auto raw = fuzz::present_chunk();
  std::vector<std::byte> file;
  const auto expected = present_header();
  auto header = store.stat(cs::sha256(raw));
  if (!header || header->encoding != expected.encoding || header->stored_size != expected.stored_size ||
      !store.read(cs::sha256(raw), cs::kChunkHeaderSize + raw.size(), file) ||
      !std::equal(raw.begin(), raw.end(), file.begin() + cs::kChunkHeaderSize, file.end()))
    violated("the chunk the store had is no longer stored as it was");
}

void check_refused(const cs::Store& store, const fs::path& out, const std::string& why) {
  std::error_code ec;
  const fs::path refs = store.root() / cs::kRefsDir;
  if (fs::exists(refs, ec) && !fs::is_empty(refs, ec)) violated("refused (" + why + ") but refs/ is not empty");
  for (const auto& entry : fs::directory_iterator(out.parent_path()))
    if (entry.path().filename().string().find(out.filename().string()) != std::string::npos)
      violated("refused (" + why + ") but " + entry.path().string() + " exists");
}

void check_imported(const cs::Store& store, const fs::path& out, const checkpoint_export::ImportReport& report,
                    const ArchiveLimits& limits) {
  auto info = inspect_checkpoint_archive(out, limits);
  if (!info) violated("the imported archive cannot be read: " + info.error().message);
  if (info->carried_chunks != 0) violated("the imported archive still carries chunks");
  if (info->memory_manifests.size() != report.manifests) violated("the imported archive lost a manifest");
  auto refs = store.list_refs();
  if (!refs || refs->size() != report.references || report.references != report.manifests)
    violated("not one reference per manifest");
  std::vector<std::byte> record, raw;
  for (const auto& [name, text] : info->memory_manifests) {
    auto manifest = gpu_image::parse_manifest(text, name);
    if (!manifest) violated("an imported manifest does not parse: " + manifest.error().message);
    if (auto complete = gpu_image::check_chunks(*manifest, store, name); !complete)
      violated("imported but incomplete: " + complete.error().message);
    gpu_image::StoreReader reader(*manifest, std::shared_ptr<const cs::Store>(&store, [](const cs::Store*) {}), name);
    gpu_image::ChunkCodec codec(manifest->header.chunk_size);
    for (std::size_t i = 0; i < reader.entries().size(); ++i) {
      raw.resize(reader.entries()[i].raw_size);
      if (auto read = reader.read_chunk(i, codec, record, raw); !read)
        violated("an imported chunk does not read back: " + read.error().message);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const fs::path archive = fuzz::scratch() / "exported.tar";
  const fs::path out = fuzz::scratch() / "imported" / "restorable.tar";
  write_records(std::string_view(reinterpret_cast<const char*>(data), size), archive);
  std::error_code ec;
  fs::remove_all(out.parent_path(), ec);
  fs::create_directories(out.parent_path());
  auto store = fresh_store(fuzz::scratch() / "store");
  ArchiveLimits limits = fuzz::small_limits();
  limits.max_archive_bytes = 1 << 20;
  limits.max_entries = 256;
  auto imported = checkpoint_export::import_checkpoint(archive, store, out, limits);
  check_present_kept(*store);
  if (!imported)
    check_refused(*store, out, imported.error().message);
  else
    check_imported(*store, out, *imported, limits);
  return 0;
}
