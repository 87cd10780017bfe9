#include "archive/checkpoint_export.h"

#include <cerrno>
#include <functional>
#include <map>
#include <vector>

#include "gpumem/gpu_image.h"
#include "gpumem/gpu_manifest.h"

namespace gpuckpt::checkpoint_export {

namespace fs = std::filesystem;
namespace cs = chunk_store;

namespace {

// The manifests of an archive, parsed, by their file name in checkpoint/.
struct ArchiveManifests {
  CheckpointInfo info;
  std::map<std::string, gpu_image::Manifest> parsed;
};

Result<ArchiveManifests> read_manifests(const fs::path& archive, const ArchiveLimits& limits, const char* verb) {
  auto info = inspect_checkpoint_archive(archive, limits);
  // Whatever stops this pass is the archive's doing (unreadable, corrupt, hostile, too slow to read): bad input.
  if (!info) return make_error(info.error().message, info.error().errno_value == ETIMEDOUT ? ETIMEDOUT : EINVAL);
  if (info->memory_manifests.empty())
    return make_error(archive.string() + " holds no manifest of store-backed memory (checkpoint/" +
                      gpu_image::kFilePrefix + "<PID>" + gpu_image::kManifestSuffix + " or " +
                      gpu_image::kPagesManifestPrefix + "<ID>" + gpu_image::kManifestSuffix + "): nothing to " + verb +
                      "; it is self-contained as it is", EINVAL);
  ArchiveManifests out;
  for (const auto& [name, text] : info->memory_manifests) {
    auto manifest = gpu_image::parse_manifest(text, archive.string() + ": checkpoint/" + name);
    if (!manifest) return make_error(manifest.error().message, EINVAL);
    // A manifest's reference is named by its checkpoint, kind and vpid (or pages id): with each file's name bound to
    // those, no two manifests of one archive can claim one reference (the last would replace the first's).
    if (const std::string expected = gpu_image::manifest_name(*manifest); expected != name)
      return make_error(archive.string() + ": checkpoint/" + name + " is the manifest of " +
                        (manifest->kind == gpu_image::MemoryKind::CpuPages ? "page image " : "process ") +
                        std::to_string(manifest->header.vpid) + ", but its file name says otherwise; that manifest "
                        "is named " + expected + ". Refusing the archive", EINVAL);
    out.parsed.emplace(name, std::move(*manifest));
  }
  out.info = std::move(*info);
  return out;
}

// The second pass reads the manifests again: they must be what the first pass checked (the file did not change).
// Written as they were, or as `written` has them (by name).
void keep_manifests_as_read(ArchiveEdit& edit, const ArchiveManifests& found, const fs::path& archive,
                            const std::map<std::string, std::string>& written = {}) {
  for (const auto& manifest : found.info.memory_manifests) {
    // Not structured bindings: clang before 16 cannot capture those (the fuzz build).
    const std::string& name = manifest.first;
    const std::string& text = manifest.second;
    const auto replaced = written.find(name);
    const std::string out = replaced == written.end() ? text : replaced->second;
    edit.transform["checkpoint/" + name] = [text, out, name, archive](const std::string& now) -> Result<std::string> {
      if (now != text)
        return make_error("checkpoint/" + name + " changed while " + archive.string() + " was read; try again", EIO);
      return out;
    };
  }
}

std::string carried_name(const cs::Digest& d) {
  const std::string hex = d.hex();
  return std::string(kCarriedChunksDir) + "/" + cs::kHashName + "/" + hex.substr(0, 2) + "/" + hex;
}

// The digest an entry under kCarriedChunksDir names: exactly <dir>/sha256/<first 2 hex>/<64 hex>.
Result<cs::Digest> carried_digest(const std::string& name, const fs::path& archive) {
  const std::string prefix = std::string(kCarriedChunksDir) + "/" + cs::kHashName + "/";
  const auto refuse = [&] {
    return make_error(archive.string() + ": entry " + name.substr(0, 200) + " under " + kCarriedChunksDir +
                      "/ is not a carried chunk (" + prefix + "<2 hex>/<64 hex digits>); refusing the archive",
                      EBADMSG);
  };
  if (!name.starts_with(prefix) || name.size() != prefix.size() + 3 + cs::kDigestHexChars || name[prefix.size() + 2] != '/')
    return refuse();
  auto digest = cs::parse_digest(name.substr(prefix.size() + 3), "the chunk name");
  if (!digest || name.compare(prefix.size(), 2, name, prefix.size() + 3, 2) != 0) return refuse();
  return *digest;
}

bool under_carried_dir(const std::string& name) {
  return name == kCarriedChunksDir || name.starts_with(std::string(kCarriedChunksDir) + "/");
}

// Whether every manifest's reference is free in `store` or holds that very text already (the same archive admitted
// again): else the refusal (EEXIST) names the manifest, the checkpoint and the process, before anything is written.
Result<void> check_references(const ArchiveManifests& found, const cs::Store& store, const fs::path& archive,
                              const std::function<std::string(const std::string&)>& text_of) {
  for (const auto& [name, manifest] : found.parsed)
    GPUCKPT_TRY_VOID(store.check_ref(gpu_image::reference_name(manifest), text_of(name)),
                     archive.string() + ": checkpoint/" + name);
  return {};
}

// Every chunk of every manifest checked in `store`, all touched (a collection running now keeps them until the
// references exist), then one reference per manifest: what makes a checkpoint's chunks kept. Returns the references.
// `text_of(name)`: the manifest text a reference keeps (an import's, rewritten where the store holds a chunk in
// another form; else the archive's own).
Result<std::size_t> reference_chunks(const ArchiveManifests& found, cs::Store& store, const fs::path& archive,
                                     const std::function<std::string(const std::string&)>& text_of) {
  for (const auto& [name, manifest] : found.parsed)
    if (auto complete = gpu_image::check_chunks(manifest, store, archive.string() + ": checkpoint/" + name); !complete)
      return make_error(complete.error().message, ENOENT);
  for (const auto& [name, manifest] : found.parsed)
    for (std::size_t i = 0; i < manifest.entries.size(); ++i)
      if (manifest.entries[i].encoding != gpu_image::Encoding::Zero)
        if (auto ok = store.touch(manifest.digests[i]); !ok)
          return make_error(ok.error().message + " while referencing " + archive.string() + "; try again", ENOENT);
  GPUCKPT_TRY_VOID(check_references(found, store, archive, text_of));
  std::size_t references = 0;
  std::vector<std::string> made;
  for (const auto& [name, manifest] : found.parsed) {
    const std::string ref = gpu_image::reference_name(manifest);
    auto ok = store.put_ref(ref, text_of(name));
    if (!ok) {
      // All of the archive's references or none: those this call made go again (a writer came between the check
      // and here).
      for (const auto& undo : made) (void)store.remove_ref(undo);
      return make_error(archive.string() + ": checkpoint/" + name + ": " + ok.error().message, ok.error().errno_value);
    }
    if (*ok) made.push_back(ref);
    ++references;
  }
  return references;
}

}  // namespace

Result<ExportReport> export_checkpoint(const fs::path& archive, std::shared_ptr<const cs::Store> store,
                                       const fs::path& out, const ArchiveLimits& limits,
                                       const std::set<cs::Digest>* carry) {
  GPUCKPT_TRY(const auto found, read_manifests(archive, limits, "export"));
  if (found.info.carried_chunks > 0)
    return make_error(archive.string() + " carries " + std::to_string(found.info.carried_chunks) + " chunks already (" +
                      kCarriedChunksDir + "/): it is an exported archive; `gpuckpt import` it into a store instead",
                      EINVAL);
  ExportReport report;
  // Which manifest and entry reads each distinct chunk: its first use, in digest order.
  std::map<cs::Digest, std::pair<const std::string*, std::size_t>> chunks;
  for (const auto& [name, manifest] : found.parsed) {
    if (auto complete = gpu_image::check_chunks(manifest, *store, archive.string() + ": checkpoint/" + name); !complete)
      return make_error("nothing exported: " + complete.error().message, ENOENT);
    report.checkpoints.insert(manifest.checkpoint);
    ++report.manifests;
    for (std::size_t i = 0; i < manifest.entries.size(); ++i)
      if (manifest.entries[i].encoding != gpu_image::Encoding::Zero) chunks.try_emplace(manifest.digests[i], &name, i);
  }
  if (carry != nullptr) {
    for (const auto& digest : *carry)
      if (!chunks.contains(digest))
        return make_error("nothing exported: chunk " + digest.hex() + " was asked to be carried but no manifest of " +
                          archive.string() + " names it", EINVAL);
    for (auto it = chunks.begin(); it != chunks.end();)
      if (carry->contains(it->first)) {
        ++it;
      } else {
        it = chunks.erase(it);
        ++report.left_out;
      }
  }
  std::map<std::string, gpu_image::StoreReader> readers;
  for (const auto& [name, manifest] : found.parsed)
    readers.try_emplace(name, manifest, store, archive.string() + ": checkpoint/" + name);
  ArchiveEdit edit;
  keep_manifests_as_read(edit, found, archive);
  edit.take = [&](const ArchiveEntry& entry, const EntryDataReader&) -> Result<bool> {
    if (under_carried_dir(entry.name))
      return make_error(archive.string() + " changed while it was read: it carries " + entry.name, EIO);
    return false;
  };
  edit.append = [&](const EntryAppender& append) -> Result<void> {
    gpu_image::ChunkCodec codec(gpu_image::kMaxChunkSize);
    std::vector<std::byte> file, raw;
    for (const auto& [digest, use] : chunks) {
      const auto& reader = readers.at(*use.first);
      raw.resize(reader.entries()[use.second].raw_size);
      // Read whole and checked against its digest: a chunk corrupt in this store is not carried to another.
      GPUCKPT_TRY_VOID(reader.read_chunk(use.second, codec, file, raw));
      GPUCKPT_TRY_VOID(append(carried_name(digest), file));
      ++report.chunks;
      report.chunk_bytes += file.size();
    }
    return {};
  };
  GPUCKPT_TRY(report.archive_bytes, rewrite_archive(archive, out, edit, limits));
  return report;
}

namespace {

// What each chunk the manifests name must be, as carried: the entry of its first use.
std::map<cs::Digest, gpu_image::ChunkEntry> chunks_named(const ArchiveManifests& found) {
  std::map<cs::Digest, gpu_image::ChunkEntry> expected;
  for (const auto& [name, manifest] : found.parsed)
    for (std::size_t i = 0; i < manifest.entries.size(); ++i)
      if (manifest.entries[i].encoding != gpu_image::Encoding::Zero)
        expected.try_emplace(manifest.digests[i], manifest.entries[i]);
  return expected;
}

// A chunk the store has already, stored another way (one node compressed it, the other did not): the checkpoints
// of this node name the store's file as it is, so it stays, and the imported manifests say how it is stored (as a
// dump reusing a chunk does). Replacing it would leave those checkpoints naming a file that is not there.
std::map<cs::Digest, cs::ChunkHeader> stored_another_way(const std::map<cs::Digest, gpu_image::ChunkEntry>& expected,
                                                         const cs::Store& store) {
  std::map<cs::Digest, cs::ChunkHeader> out;
  for (const auto& [digest, e] : expected)
    if (auto present = store.stat(digest);
        present && present->raw_size == e.raw_size &&
        (present->stored_size != e.stored_size || present->encoding != static_cast<std::uint8_t>(e.encoding)))
      out.emplace(digest, *present);
  return out;
}

// The manifests that name such a chunk, changed (in `found` too) to say how the store holds it: their text by name.
std::map<std::string, std::string> manifests_as_stored(ArchiveManifests& found,
                                                       const std::map<cs::Digest, cs::ChunkHeader>& stored_otherwise) {
  std::map<std::string, std::string> patched;
  for (auto& [name, manifest] : found.parsed) {
    bool changed = false;
    for (std::size_t i = 0; i < manifest.entries.size(); ++i)
      if (const auto it = stored_otherwise.find(manifest.digests[i]);
          it != stored_otherwise.end() && manifest.entries[i].encoding != gpu_image::Encoding::Zero) {
        manifest.entries[i].encoding = static_cast<gpu_image::Encoding>(it->second.encoding);
        manifest.entries[i].stored_size = it->second.stored_size;
        changed = true;
      }
    if (changed) patched.emplace(name, gpu_image::serialize_manifest(manifest));
  }
  return patched;
}

// An import's pass over the chunks its archive carries: each checked against the manifests and decoded before it
// lands in the store; one the store holds already as the manifests say is touched and counted instead.
class ChunkIntake {
 public:
  ChunkIntake(const fs::path& archive, cs::Store& store, const std::map<cs::Digest, gpu_image::ChunkEntry>& expected,
              const std::map<cs::Digest, cs::ChunkHeader>& stored_otherwise, ImportReport& report)
      : archive_(archive), store_(store), expected_(expected), stored_otherwise_(stored_otherwise), report_(report),
        into_("the chunk store " + store.root().string()) {}

  // edit.take: true for what lies under kCarriedChunksDir (none of it goes into the output).
  Result<bool> take(const ArchiveEntry& entry, const EntryDataReader& read) {
    if (!under_carried_dir(entry.name)) return false;
    if (entry.kind == ArchiveEntry::Kind::Directory) return true;
    if (entry.kind != ArchiveEntry::Kind::File)
      return make_error(archive_.string() + ": " + entry.name + " is a link; carried chunks are regular files; "
                        "refusing the archive", EBADMSG);
    GPUCKPT_TRY(const auto digest, carried_digest(entry.name, archive_));
    const std::string chunk = "carried chunk " + digest.hex() + " (" + entry.name + ")";
    GPUCKPT_TRY(const gpu_image::ChunkEntry* const expected, expected_entry(digest, chunk, entry.size));
    const gpu_image::ChunkEntry& e = *expected;
    GPUCKPT_TRY_VOID(read_whole(entry, read));
    raw_.resize(e.raw_size);
    if (auto ok = gpu_image::decode_chunk_file(file_, e, digest, codec_, raw_); !ok)
      return make_error(archive_.string() + ": " + chunk + " is refused: " + ok.error().message + "; nothing of it "
                        "entered " + into_, EBADMSG);
    ++report_.carried_chunks;
    GPUCKPT_TRY(const bool present, kept_as_present(digest, e, chunk));
    if (present) return true;
    cs::ChunkHeader header;
    header.encoding = static_cast<std::uint8_t>(e.encoding);
    header.raw_size = e.raw_size;
    header.stored_size = e.stored_size;
    GPUCKPT_TRY_VOID(store_.put(digest, header, std::span<const std::byte>(file_).subspan(cs::kChunkHeaderSize)));
    ++report_.added_chunks;
    report_.added_bytes += file_.size();
    return true;
  }

 private:
  // The manifests' entry for a carried chunk, which must name it, once, with the size it has.
  Result<const gpu_image::ChunkEntry*> expected_entry(const cs::Digest& digest, const std::string& chunk,
                                                      std::uint64_t size) {
    const auto it = expected_.find(digest);
    if (it == expected_.end())
      return make_error(archive_.string() + ": " + chunk + " is named by none of its manifests; refusing the archive",
                        EBADMSG);
    if (!carried_.insert(digest).second)
      return make_error(archive_.string() + ": " + chunk + " is carried twice; refusing the archive", EBADMSG);
    const gpu_image::ChunkEntry& e = it->second;
    if (size != cs::kChunkHeaderSize + e.stored_size)
      return make_error(archive_.string() + ": " + chunk + " is " + std::to_string(size) + " bytes, its manifest "
                        "says " + std::to_string(cs::kChunkHeaderSize + e.stored_size) + "; refused, nothing of it "
                        "entered " + into_, EBADMSG);
    return &e;
  }

  Result<void> read_whole(const ArchiveEntry& entry, const EntryDataReader& read) {
    file_.resize(entry.size);
    for (std::size_t got = 0; got < file_.size();) {
      GPUCKPT_TRY(const std::size_t n, read(reinterpret_cast<char*>(file_.data()) + got, file_.size() - got));
      if (n == 0) return make_error(archive_.string() + " is truncated in " + entry.name, EBADMSG);
      got += n;
    }
    return {};
  }

  // True when the store holds the chunk as the manifests say and it could be touched: it stays as it is.
  Result<bool> kept_as_present(const cs::Digest& digest, const gpu_image::ChunkEntry& e, const std::string& chunk) {
    auto present = store_.stat(digest);
    if (!present || present->raw_size != e.raw_size) return false;
    const auto kept = stored_otherwise_.find(digest);
    const bool as_manifests_say =
        kept == stored_otherwise_.end()
            ? present->stored_size == e.stored_size && present->encoding == static_cast<std::uint8_t>(e.encoding)
            : present->stored_size == kept->second.stored_size && present->encoding == kept->second.encoding;
    // Stored another way since the first pass looked (a dump here wrote it meanwhile): kept, and this import,
    // whose manifests no longer say how it is stored, is to be run again.
    if (!as_manifests_say)
      return make_error(chunk + " was written into " + into_ + " while " + archive_.string() + " was imported; "
                        "import again", EAGAIN);
    if (!store_.touch(digest)) return false;
    ++report_.present_chunks;
    return true;
  }

  const fs::path& archive_;
  cs::Store& store_;
  const std::map<cs::Digest, gpu_image::ChunkEntry>& expected_;
  const std::map<cs::Digest, cs::ChunkHeader>& stored_otherwise_;
  ImportReport& report_;
  const std::string into_;
  std::set<cs::Digest> carried_;
  gpu_image::ChunkCodec codec_{gpu_image::kMaxChunkSize};
  std::vector<std::byte> file_, raw_;
};

}  // namespace

Result<ImportReport> import_checkpoint(const fs::path& archive, std::shared_ptr<cs::Store> store, const fs::path& out,
                                       const ArchiveLimits& limits) {
  GPUCKPT_TRY(auto found, read_manifests(archive, limits, "import"));
  ImportReport report;
  for (const auto& [name, manifest] : found.parsed) {
    report.checkpoints.insert(manifest.checkpoint);
    ++report.manifests;
  }
  const auto expected = chunks_named(found);
  const auto stored_otherwise = stored_another_way(expected, *store);
  const auto patched = manifests_as_stored(found, stored_otherwise);
  const auto manifest_text = [&](const std::string& name) {
    const auto it = patched.find(name);
    return it == patched.end() ? found.info.memory_manifests.at(name) : it->second;
  };
  // A reference this import could not write refuses it now, before any chunk enters the store.
  GPUCKPT_TRY_VOID(check_references(found, *store, archive, manifest_text));
  ChunkIntake intake(archive, *store, expected, stored_otherwise, report);
  ArchiveEdit edit;
  keep_manifests_as_read(edit, found, archive, patched);
  edit.take = [&intake](const ArchiveEntry& entry, const EntryDataReader& read) { return intake.take(entry, read); };
  // The chunks durable and complete, then touched (a collection running now keeps them until the references
  // exist), then the references, then the archive that needs them: the order a dump writes in (gpu_manifest.h).
  edit.before_commit = [&]() -> Result<void> {
    GPUCKPT_TRY_VOID(store->sync());
    GPUCKPT_TRY(report.references, reference_chunks(found, *store, archive, manifest_text));
    return {};
  };
  GPUCKPT_TRY(report.archive_bytes, rewrite_archive(archive, out, edit, limits));
  return report;
}

Result<ImportReport> reference_checkpoint(const fs::path& archive, std::shared_ptr<cs::Store> store,
                                          const ArchiveLimits& limits) {
  GPUCKPT_TRY(const auto found, read_manifests(archive, limits, "reference"));
  if (found.info.carried_chunks > 0)
    return make_error(archive.string() + " carries " + std::to_string(found.info.carried_chunks) + " chunks (" +
                      kCarriedChunksDir + "/): import it instead", EINVAL);
  ImportReport report;
  for (const auto& [name, manifest] : found.parsed) {
    report.checkpoints.insert(manifest.checkpoint);
    ++report.manifests;
  }
  GPUCKPT_TRY(report.references,
              reference_chunks(found, *store, archive,
                               [&](const std::string& name) { return found.info.memory_manifests.at(name); }));
  std::error_code ec;
  report.archive_bytes = fs::file_size(archive, ec);
  return report;
}

}  // namespace gpuckpt::checkpoint_export
