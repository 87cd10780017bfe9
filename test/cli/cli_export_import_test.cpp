// `gpuckpt export` / `gpuckpt import` as a user runs them, on a zstd archive like podman's: the exported archive
// carries the chunks and inspect says so; import into an empty store brings every chunk back byte for byte, writes
// the references `store gc` keeps them by, counts the ones already there; a corrupt carried chunk, a missing chunk
// and bad arguments fail with exit 2 naming what is wrong, leaving no output.
#include <catch2/catch_test_macros.hpp>

#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "archive/checkpoint_archive.h"
#include "archive/directory_archive.h"
#include "test/support/store_checkpoint.h"
#include "test/support/temp_dir.h"

namespace fs = std::filesystem;
using gpuckpt::test::TempDir;
using nlohmann::json;

namespace {

struct Run {
  int rc = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

Run run_cli(const fs::path& scratch, const std::string& args, const std::string& env = "") {
  static std::atomic<int> n{0};
  const int id = n++;
  const fs::path out = scratch / ("out" + std::to_string(id)), err = scratch / ("err" + std::to_string(id));
  const std::string cmd = "env -u GPUCKPT_GPU_STORE " + env + " " + GPUCKPT_CLI + " " + args + " >" + out.string() +
                          " 2>" + err.string() + " </dev/null";
  const int status = std::system(cmd.c_str());
  Run r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// The test's store-backed checkpoint as podman exports it: tar.zst.
gpuckpt::test::StoreCheckpoint zstd_checkpoint(const std::shared_ptr<gpuckpt::chunk_store::Store>& store,
                                               const fs::path& dir) {
  auto c = gpuckpt::test::store_checkpoint(store, dir);
  const fs::path zst = dir / "ck.tar.zst";
  REQUIRE(std::system(("zstd -q --rm -o " + zst.string() + " " + c.archive.string()).c_str()) == 0);
  c.archive = zst;
  return c;
}

// The test's checkpoint in node-a's store, exported by `gpuckpt export` to moved.tar and unpacked into unpacked/.
struct Unpacked {
  TempDir dir{"gpuckpt-cli-export"};
  gpuckpt::test::StoreCheckpoint c;
  fs::path moved = dir.path / "moved.tar";
  fs::path tree = dir.path / "unpacked";
  Unpacked() {
    auto source = gpuckpt::test::open_store(dir.path / "node-a");
    c = gpuckpt::test::store_checkpoint(source, dir.path);
    REQUIRE(run_cli(dir.path, "export " + c.archive.string() + " --store " + (dir.path / "node-a").string() + " -o " +
                                  moved.string()).rc == 0);
    fs::create_directories(tree);
    REQUIRE(gpuckpt::extract_archive(moved, tree, gpuckpt::ArchiveLimits{}));
  }
};

}  // namespace

TEST_CASE("gpuckpt export, inspect, import, store gc: a store-backed checkpoint moved to an empty store", "[unit]") {
  TempDir dir("gpuckpt-cli-export");
  const fs::path node_a = dir.path / "node-a", node_b = dir.path / "node-b";
  auto source = gpuckpt::test::open_store(node_a);
  const auto c = zstd_checkpoint(source, dir.path);
  const fs::path moved = dir.path / "moved.tar.zst", back = dir.path / "back.tar.zst";

  Run exported = run_cli(dir.path, "export " + c.archive.string() + " --store " + node_a.string() + " -o " +
                                       moved.string() + " --json");
  REQUIRE(exported.rc == 0);
  const json report = json::parse(exported.out);
  CHECK(report["chunks"] == gpuckpt::test::kStoreCheckpointChunks);
  CHECK(report["checkpoints"] == json::array({c.id}));
  Run inspected = run_cli(dir.path, "inspect " + moved.string() + " --json");
  REQUIRE(inspected.rc == 0);
  CHECK(json::parse(inspected.out)["gpu_memory"]["carried_chunks"] == gpuckpt::test::kStoreCheckpointChunks);
  Run text = run_cli(dir.path, "inspect " + moved.string());
  CHECK(contains(text.out, "exported: this archive carries 4 chunks"));

  Run imported = run_cli(dir.path, "import " + moved.string() + " --store " + node_b.string() + " -o " +
                                       back.string() + " --json");
  REQUIRE(imported.rc == 0);
  const json got = json::parse(imported.out);
  CHECK(got["added_chunks"] == gpuckpt::test::kStoreCheckpointChunks);
  CHECK(got["present_chunks"] == 0);
  CHECK(got["references"] == 2);
  auto target = gpuckpt::test::open_store(node_b);
  gpuckpt::test::check_restorable(c, back, target);
  Run again = run_cli(dir.path, "import " + moved.string() + " --store " + node_b.string() + " -o " +
                                    (dir.path / "again.tar.zst").string());
  REQUIRE(again.rc == 0);
  CHECK(contains(again.out, "0 added (0.0 MiB), 4 already there"));

  // The chunks are hours old: only the import's references keep them from a collection.
  for (const auto& e : fs::recursive_directory_iterator(node_b / "sha256"))
    if (e.is_regular_file()) fs::last_write_time(e.path(), fs::file_time_type::clock::now() - std::chrono::hours(3));
  Run gc = run_cli(dir.path, "store gc --delete --grace 60 --json --store " + node_b.string());
  REQUIRE(gc.rc == 0);
  CHECK(json::parse(gc.out)["garbage_chunks"] == 0);
  Run refs = run_cli(dir.path, "store refs --store " + node_b.string());
  CHECK(contains(refs.out, c.id));
  gpuckpt::test::check_restorable(c, back, target);
}

TEST_CASE("gpuckpt import refuses a corrupt carried chunk with exit 2, naming the archive and the chunk", "[unit]") {
  Unpacked u;
  auto& [dir, c, moved, tree] = u;
  const std::string victim = gpuckpt::chunk_store::sha256(gpuckpt::test::random_chunk(1)).hex();
  {
    std::fstream f(tree / gpuckpt::kCarriedChunksDir / "sha256" / victim.substr(0, 2) / victim,
                   std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(4000);
    const char was = static_cast<char>(f.get());
    f.seekp(4000);
    f.put(static_cast<char>(was ^ 0x42));
  }
  const fs::path corrupt = dir.path / "corrupt.tar";
  REQUIRE(std::system(("tar -C " + tree.string() + " -cf " + corrupt.string() + " .").c_str()) == 0);
  const fs::path out = dir.path / "out" / "back.tar";
  fs::create_directories(out.parent_path());
  Run refused = run_cli(dir.path, "import " + corrupt.string() + " --store " + (dir.path / "node-b").string() +
                                      " -o " + out.string());
  CHECK(refused.rc == 2);
  CHECK(contains(refused.err, corrupt.string()));
  CHECK(contains(refused.err, "carried chunk " + victim));
  CHECK(contains(refused.err, "SHA-256 mismatch"));
  CHECK(fs::is_empty(out.parent_path()));
  CHECK_FALSE(fs::exists(dir.path / "node-b" / "sha256" / victim.substr(0, 2) / victim));
}

TEST_CASE("gpuckpt import: a duplicated manifest entry, or a kept checkpoint's id and process, exit 2 naming it",
          "[unit]") {
  Unpacked u;
  auto& [dir, c, moved, tree] = u;
  // The manifest of pid 7 appended a second time, with pid 8's content: tar keeps both entries.
  const fs::path doubled = dir.path / "doubled.tar";
  REQUIRE(std::system(("tar -C " + tree.string() + " -cf " + doubled.string() + " .").c_str()) == 0);
  const fs::path other = dir.path / "other" / "checkpoint" / "gpuckpt-gpumem-7.manifest.json";
  fs::create_directories(other.parent_path());
  fs::copy_file(tree / "checkpoint" / "gpuckpt-gpumem-8.manifest.json", other);
  REQUIRE(std::system(("tar -C " + (dir.path / "other").string() + " -rf " + doubled.string() +
                       " ./checkpoint/gpuckpt-gpumem-7.manifest.json").c_str()) == 0);
  Run refused = run_cli(dir.path, "import " + doubled.string() + " --store " + (dir.path / "node-b").string() +
                                      " -o " + (dir.path / "back.tar").string());
  CHECK(refused.rc == 2);   // before: exit 1, "changed while it was read; try again"
  CHECK(contains(refused.err, "gpuckpt-gpumem-7.manifest.json is in the archive twice"));
  CHECK_FALSE(fs::exists(dir.path / "back.tar"));

  // Into the store that keeps the checkpoint, an archive of other memory under its id: refused, the reference kept.
  TempDir elsewhere("gpuckpt-cli-export-attacker");
  auto attacker_store = gpuckpt::test::open_store(elsewhere.path / "store");
  auto attacker = gpuckpt::test::write_store_checkpoint(attacker_store, elsewhere.path,
                                                        {{7, {gpuckpt::test::random_chunk(77)}}}, c.id);
  REQUIRE(attacker);
  const fs::path attack = elsewhere.path / "attack.tar";
  REQUIRE(run_cli(dir.path, "export " + attacker->archive.string() + " --store " + (elsewhere.path / "store").string() +
                                " -o " + attack.string()).rc == 0);
  const fs::path ref = dir.path / "node-a" / "refs" / gpuckpt::chunk_store::ref_name(c.id, 7);
  const std::string kept = slurp(ref);
  Run conflict = run_cli(dir.path, "import " + attack.string() + " --store " + (dir.path / "node-a").string() +
                                       " -o " + (dir.path / "attack-back.tar").string());
  CHECK(conflict.rc == 2);
  CHECK(contains(conflict.err, "checkpoint " + c.id + " (process 7) is kept with other content"));
  CHECK(slurp(ref) == kept);
  CHECK_FALSE(fs::exists(dir.path / "attack-back.tar"));
}

TEST_CASE("gpuckpt export with a chunk missing: exit 2 naming checkpoint, chunk and path; no output", "[unit]") {
  TempDir dir("gpuckpt-cli-export");
  auto source = gpuckpt::test::open_store(dir.path / "node-a");
  const auto c = gpuckpt::test::store_checkpoint(source, dir.path);
  const auto lost = gpuckpt::chunk_store::sha256(gpuckpt::test::random_chunk(4));
  REQUIRE(fs::remove(source->path_of(lost)));
  const fs::path out = dir.path / "out" / "moved.tar";
  fs::create_directories(out.parent_path());
  Run refused = run_cli(dir.path, "export " + c.archive.string() + " --store " + (dir.path / "node-a").string() +
                                      " -o " + out.string());
  CHECK(refused.rc == 2);
  CHECK(contains(refused.err, "checkpoint " + c.id));
  CHECK(contains(refused.err, lost.hex()));
  CHECK(contains(refused.err, source->path_of(lost).string()));
  CHECK(fs::is_empty(out.parent_path()));
}

TEST_CASE("gpuckpt export and import: bad arguments and archives without manifests exit 2", "[unit]") {
  TempDir dir("gpuckpt-cli-export");
  const fs::path plain = dir.path / "inline.tar";
  REQUIRE(gpuckpt::pack_tar({{"config.dump", {}, R"({"name":"x"})"}, {"spec.dump", {}, "{}"},
                             {"checkpoint/inventory.img", {}, "criu"}},
                            plain));
  gpuckpt::test::open_store(dir.path / "store");
  const std::string store = " --store " + (dir.path / "store").string();
  Run none = run_cli(dir.path, "export " + plain.string() + store + " -o " + (dir.path / "x.tar").string());
  CHECK(none.rc == 2);
  CHECK(contains(none.err, "holds no manifest of store-backed memory"));
  Run no_out = run_cli(dir.path, "export " + plain.string() + store);
  CHECK(no_out.rc == 2);
  CHECK(contains(no_out.err, "-o OUT"));
  // -o names the file these verbs write, not an output format.
  Run named_json = run_cli(dir.path, "export " + plain.string() + store + " -o json");
  CHECK(named_json.rc == 2);
  CHECK_FALSE(contains(named_json.err, "-o must be"));
  CHECK(contains(named_json.err, "holds no manifest"));
  Run not_archive = run_cli(dir.path, "import " + (dir.path / "store").string() + "/sha256" + store);
  CHECK(not_archive.rc == 2);
  Run absent = run_cli(dir.path, "import " + (dir.path / "absent.tar").string() + store);
  CHECK(absent.rc == 2);
  CHECK(contains(absent.err, "absent.tar"));
}
