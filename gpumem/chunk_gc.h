// Garbage collection of a chunk store (docs/formats.md "Chunk store"): removes the chunks no kept checkpoint needs.
//
// Reference counts come from the store's references (refs/<checkpoint>-<vpid>.json, one per process of a kept
// checkpoint, written by the dump before its manifest; chunk_store.h): a chunk one of them names is live. Counting
// them at every collection, instead of keeping counters that a crash could leave wrong, makes the count correct
// by construction; the references live in the store, so a shared store's collection sees every node's.
//
// A collection, in phases (each safe to be killed after):
//   begin        one collection at a time (flock on <root>/gc.lock); a fresh generation file <root>/gc.generation
//                whose mtime, set by the store's own clock (a shared volume's server), is the collection's start.
//   mark         every reference read and counted. One that cannot be read stops the collection: a chunk it
//                names might otherwise go.
//   recover      chunks a killed collection left in trash/ go back when live or young; the rest stay there.
//   sweep        every chunk neither live nor young (mtime before start - grace) is renamed into trash/, then its
//                mtime read again: a dump that reused it (touched it) between the two is seen and it goes back.
//                Writers' temporary files older than the grace period are removed.
//   empty_trash  the trash is removed, each chunk checked once more.
// A dump writing at the same time is safe: the chunks it writes or reuses are young (writes and reuses set their
// mtime, chunk_store.h touch) until its reference exists, as long as a dump takes less than the grace period;
// one that misses a chunk moved into trash/ moves it back (Store::rescue). Killed anywhere, nothing a kept
// checkpoint needs is lost (it is at its name or in trash/, where every reader finds it) and what is left over
// (trash, temporary files) is what the next collection removes.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "gpumem/chunk_store.h"
#include "gpumem/gpu_manifest.h"
#include "base/result.h"

namespace gpuckpt::chunk_gc {

// Long enough for any dump between its first chunk and its reference; and for clocks of nodes sharing a store.
inline constexpr std::chrono::seconds kDefaultGrace{3600};
inline constexpr const char* kLockFile = "gc.lock";
inline constexpr const char* kGenerationFile = "gc.generation";
inline constexpr std::size_t kMaxListed = 1000;   // garbage and missing chunks listed in a report (all are counted)

struct Options {
  std::chrono::seconds grace = kDefaultGrace;
  bool remove = false;   // false: a dry run, nothing changes but the generation file
  bool list_young = false;   // Report::young lists every unreferenced chunk kept for the grace period
};

struct Chunk {
  chunk_store::Digest digest;
  std::uint64_t bytes = 0;   // the chunk file's size
};

struct MissingChunk {
  chunk_store::Digest digest;
  std::string ref;   // the first reference naming it
};

struct Report {
  bool dry_run = true;
  std::size_t refs = 0;
  std::size_t live_chunks = 0;          // distinct chunks the references name
  std::size_t chunks = 0;               // chunk files found
  std::uint64_t chunk_bytes = 0;
  std::size_t garbage_chunks = 0;       // removed (or, in a dry run, would be)
  std::uint64_t garbage_bytes = 0;
  std::vector<Chunk> garbage;           // the first kMaxListed of them
  std::size_t young_chunks = 0;         // unreferenced, kept for the grace period
  std::vector<Chunk> young;             // all of them, when Options::list_young
  std::size_t returned_chunks = 0;      // reused by a dump during the sweep, or left in trash/ and still needed
  std::size_t missing_chunks = 0;       // named by a reference, not in the store: those checkpoints cannot restore
  std::vector<MissingChunk> missing;    // the first kMaxListed of them
  std::size_t partials_removed = 0;     // temporary files of writers that died
  std::vector<std::string> unknown;     // entries that are none of the store's (left alone)
};

class Collection {
 public:
  // Fails when another collection holds the store's lock.
  static Result<std::unique_ptr<Collection>> begin(chunk_store::Store& store, Options options);
  ~Collection();
  Collection(const Collection&) = delete;
  Collection& operator=(const Collection&) = delete;

  Result<void> mark();
  Result<void> recover();
  Result<void> sweep();
  Result<void> empty_trash();

  const Report& report() const { return report_; }
  // How many references name each live chunk.
  const std::map<chunk_store::Digest, std::uint32_t>& refcounts() const { return refcounts_; }

 private:
  Collection(chunk_store::Store& store, Options options) : store_(store), options_(options) {}
  bool keep(const chunk_store::Digest& d, const struct ::timespec& mtime) const;
  Result<void> sweep_fanout(int dir_fd, const std::string& fanout, int trash_fd, std::set<chunk_store::Digest>& found);
  Result<void> sweep_partials(int dir_fd, const std::string& shown);

  chunk_store::Store& store_;
  Options options_;
  int lock_fd_ = -1;
  struct ::timespec cutoff_ {};   // the collection's start minus the grace period, in the store's clock
  bool marked_ = false;
  std::map<chunk_store::Digest, std::uint32_t> refcounts_;
  std::map<chunk_store::Digest, std::string> first_ref_;
  Report report_;
};

// A reference read and checked (parse_manifest: it may come from a shared volume another node writes); an error
// with errno ENOENT when it was removed since it was listed.
Result<gpu_image::Manifest> read_reference(const chunk_store::Store& store, const std::string& name);

// What each reference holds, for `gpuckpt store refs`: `exclusive_bytes` is what removing it alone would free.
struct ReferenceSummary {
  std::string name;
  std::string checkpoint;
  int vpid = 0;
  std::size_t chunks = 0;               // distinct stored chunks
  std::uint64_t stored_bytes = 0;
  std::uint64_t exclusive_bytes = 0;    // of chunks no other reference names
};
Result<std::vector<ReferenceSummary>> summarize_references(const chunk_store::Store& store);

// Every phase in order.
Result<Report> collect(chunk_store::Store& store, Options options);

// What a report says, for a person: counts, bytes, the garbage and the missing chunks (their first few).
std::string format_report(const Report& r, const std::string& store_root);

}  // namespace gpuckpt::chunk_gc
