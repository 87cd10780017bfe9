// Archive retention: per container by count, age and bytes, never the newest unless asked (a table of cases); and
// applied to a directory of real archives, dropping the chunk store references of the checkpoints it deletes.
#include <catch2/catch_test_macros.hpp>

#include <sys/stat.h>

#include <filesystem>
#include <string>
#include <vector>

#include "archive/archive_retention.h"
#include "gpumem/chunk_store.h"
#include "test/support/archive_builder.h"

namespace rt = gpuckpt::retention;
namespace cs = gpuckpt::chunk_store;
namespace fs = std::filesystem;

namespace {

constexpr std::int64_t kNow = 1'800'000'000;
constexpr std::int64_t kHour = 3600;

std::vector<rt::Archive> two_containers() {
  // "a": four archives, one an hour apart, 100 bytes each (a0 newest); "b": one archive, 3 days old.
  return {{"a0", "a", kNow - 0 * kHour, 100},
          {"a2", "a", kNow - 2 * kHour, 100},
          {"a1", "a", kNow - 1 * kHour, 100},
          {"a3", "a", kNow - 3 * kHour, 100},
          {"b0", "b", kNow - 72 * kHour, 100}};
}

std::vector<std::string> names(const std::vector<fs::path>& paths) {
  std::vector<std::string> out;
  for (const auto& p : paths) out.push_back(p.string());
  return out;
}

}  // namespace

TEST_CASE("retention: which archives go, per container, newest kept unless asked", "[unit]") {
  struct Case {
    const char* what;
    rt::Policy policy;
    std::vector<std::string> deleted;
  };
  rt::Policy count2;
  count2.keep_count = 2;
  rt::Policy count0;
  count0.keep_count = 0;
  rt::Policy count0_newest = count0;
  count0_newest.include_newest = true;
  rt::Policy age;
  age.max_age = std::chrono::seconds(90 * 60);
  rt::Policy bytes;
  bytes.max_bytes = 250;
  rt::Policy bytes_small;
  bytes_small.max_bytes = 50;
  rt::Policy combined;
  combined.keep_count = 3;
  combined.max_age = std::chrono::seconds(150 * 60);
  const std::vector<Case> cases = {
      {"no policy: nothing", rt::Policy{}, {}},
      {"keep 2: the two oldest of a", count2, {"a2", "a3"}},
      {"keep 0: all but each container's newest", count0, {"a1", "a2", "a3"}},
      {"keep 0 with the newest: everything", count0_newest, {"a0", "a1", "a2", "a3", "b0"}},
      {"90 minutes: older ones, b's only archive stays", age, {"a2", "a3"}},
      {"250 bytes per container: the newest two fit", bytes, {"a2", "a3"}},
      {"50 bytes: none fits, the newest stays anyway", bytes_small, {"a1", "a2", "a3"}},
      {"count and age together: either removes", combined, {"a3"}},
  };
  for (const auto& c : cases) {
    INFO(c.what);
    CHECK(names(rt::archives_to_delete(two_containers(), c.policy, kNow)) == c.deleted);
  }
}

TEST_CASE("retention: applied to a directory of archives, with the store's references", "[unit]") {
  gpuckpt::test::TempDir dir, store_dir;
  auto store = cs::Store::open(store_dir.path, true);
  REQUIRE(store);
  // Container "counter": three archives of checkpoints c1 (oldest), c2, c3; "other": one of checkpoint c1 (a copy
  // of the same checkpoint under another container name, so c1's reference must stay).
  const std::string ids[] = {"11111111111111111111111111111111", "22222222222222222222222222222222",
                             "33333333333333333333333333333333"};
  auto archive = [&](const std::string& file, const std::string& container, const std::string& id, int hours_old) {
    auto entries = gpuckpt::test::podman_checkpoint_entries();
    entries[0].data = nlohmann::json({{"id", "abc123"}, {"name", container}, {"rootfsImageName", "busybox"},
                                      {"runtime", "runc"}, {"createdTime", "2026-11-21T10:00:00Z"}}).dump();
    const std::string manifest =
        R"({"format":"gpuckpt-gpu-memory-manifest","version":1,"checkpoint":")" + id +
        R"(","hash":"sha256","store":"/x","vpid":7,"dump_pid":1,"chunk_size":4096,"regions":[[4096,4096]],)"
        R"("chunks":[["raw",4096,4096,")" + std::string(64, 'a') + R"("]]})";
    entries.emplace_back("checkpoint/gpuckpt-gpumem-7.manifest.json", manifest);
    const fs::path path = gpuckpt::test::make_archive(dir.path / file, entries);
    const fs::file_time_type when = fs::file_time_type::clock::now() - std::chrono::hours(hours_old);
    fs::last_write_time(path, when);
    REQUIRE((*store)->put_ref(cs::ref_name(id, 7), manifest));
  };
  archive("counter-1.tar.zst", "counter", ids[0], 3);
  archive("counter-2.tar.zst", "counter", ids[1], 2);
  archive("counter-3.tar.zst", "counter", ids[2], 1);
  archive("other-1.tar.zst", "other", ids[0], 5);
  gpuckpt::test::write_file(dir.path / "broken.tar", "not an archive");
  fs::create_symlink(dir.path / "counter-3.tar.zst", dir.path / "link.tar.zst");

  rt::Policy policy;
  policy.keep_count = 1;
  const auto outcome = rt::apply(dir.path, policy, store->get(), gpuckpt::ArchiveLimits{}, ::time(nullptr));
  CHECK(names(outcome.deleted) ==
        std::vector<std::string>{(dir.path / "counter-1.tar.zst").string(), (dir.path / "counter-2.tar.zst").string()});
  CHECK(outcome.deleted_bytes > 0);
  CHECK(fs::exists(dir.path / "counter-3.tar.zst"));
  CHECK(fs::exists(dir.path / "other-1.tar.zst"));
  CHECK(fs::is_symlink(dir.path / "link.tar.zst"));
  REQUIRE(outcome.problems.size() == 1);
  CHECK(outcome.problems[0].find((dir.path / "broken.tar").string() + ": kept") == 0);
  CHECK(fs::exists(dir.path / "broken.tar"));
  // c2's reference went with its only archive; c1 is still held by other-1, c3 by counter-3.
  CHECK(outcome.references_removed == 1);
  CHECK(*(*store)->list_refs() == std::vector<std::string>{cs::ref_name(ids[0], 7), cs::ref_name(ids[2], 7)});
}

TEST_CASE("retention: deleting an archive that claims a kept checkpoint's id and process leaves that reference",
          "[unit]") {
  gpuckpt::test::TempDir dir, store_dir;
  auto store = cs::Store::open(store_dir.path, true);
  REQUIRE(store);
  const std::string id = "44444444444444444444444444444444";
  const auto manifest = [](char digest, const std::string& checkpoint = "44444444444444444444444444444444") {
    return R"({"format":"gpuckpt-gpu-memory-manifest","version":1,"checkpoint":")" + checkpoint +
           R"(","hash":"sha256","store":"/x","vpid":7,"dump_pid":1,"chunk_size":4096,"regions":[[4096,4096]],)"
           R"("chunks":[["raw",4096,4096,")" + std::string(64, digest) + R"("]]})";
  };
  // The kept checkpoint's reference (its archive lives elsewhere: an import's output, another directory).
  REQUIRE((*store)->put_ref(cs::ref_name(id, 7), manifest('a')));
  // An archive placed as bytes (a transfer commit not declared store-backed) whose manifest claims that id and
  // process with other chunks; old, so retention deletes it.
  auto entries = gpuckpt::test::podman_checkpoint_entries();
  entries.emplace_back("checkpoint/gpuckpt-gpumem-7.manifest.json", manifest('b'));
  const fs::path claimed = gpuckpt::test::make_archive(dir.path / "claim-1.tar.zst", entries);
  fs::last_write_time(claimed, fs::file_time_type::clock::now() - std::chrono::hours(5));
  // The container's newest archive, of another checkpoint: what keep_count keeps.
  entries.back().data = manifest('c', "55555555555555555555555555555555");
  gpuckpt::test::make_archive(dir.path / "claim-2.tar.zst", entries);
  rt::Policy policy;
  policy.keep_count = 1;
  const auto outcome = rt::apply(dir.path, policy, store->get(), gpuckpt::ArchiveLimits{}, ::time(nullptr));
  CHECK(names(outcome.deleted) == std::vector<std::string>{claimed.string()});
  // Before: removed with the claiming archive, and the kept checkpoint's chunks were the next collection's.
  CHECK(outcome.references_removed == 0);
  auto kept = (*store)->read_ref(cs::ref_name(id, 7), 4096);
  REQUIRE(kept);
  CHECK(*kept == manifest('a'));
}
