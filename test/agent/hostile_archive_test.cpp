// Archives an attacker wrote: deep JSON, wrong types, bad versions. Each is refused with a reason (or ignored
// where the field is only descriptive); nothing crashes, and the kubelet watcher quarantines what it cannot use.
#include <catch2/catch_test_macros.hpp>

#include <archive.h>
#include <archive_entry.h>

#include <cstdio>

#include "agent/kubelet_watch.h"
#include "base/log.h"
#include "archive/checkpoint_archive.h"
#include "base/json_reader.h"
#include "archive/restore_archive.h"
#include "restore/restore_plan.h"
#include "test/support/archive_builder.h"

namespace fs = std::filesystem;
using namespace gpuckpt;
using nlohmann::json;

namespace {

std::string deep_json(int levels) { return std::string(levels, '[') + std::string(levels, ']'); }

std::vector<test::TestEntry> with_entry(std::string name, std::string data) {
  auto entries = test::podman_checkpoint_entries();
  for (auto& e : entries)
    if (e.name == name) {
      e.data = std::move(data);
      return entries;
    }
  entries.emplace_back(std::move(name), std::move(data));
  return entries;
}

json podman_spec() { return json::parse(test::podman_checkpoint_entries()[1].data); }

// An uncompressed tar of `entries` whose entry `name` declares `declared` bytes in its header while holding only
// its real data, cut after that data: the input a rewrite meets half-way (a truncated upload, a forged header).
std::string tar_declaring(const std::vector<test::TestEntry>& entries, const std::string& name, std::uint64_t declared) {
  std::string tar = test::build_tar(entries, test::Compression::None);
  for (std::size_t at = 0; at + 512 <= tar.size(); at += 512) {
    if (tar.compare(at, name.size() + 1, std::string(name.c_str(), name.size() + 1)) != 0) continue;
    const std::uint64_t real = std::stoull(tar.substr(at + 124, 11), nullptr, 8);
    char field[13];
    std::snprintf(field, sizeof field, "%011llo", static_cast<unsigned long long>(declared));
    tar.replace(at + 124, 11, field, 11);
    tar.replace(at + 148, 8, 8, ' ');
    unsigned sum = 0;
    for (std::size_t i = 0; i < 512; ++i) sum += static_cast<unsigned char>(tar[at + i]);
    char checksum[8];
    std::snprintf(checksum, sizeof checksum, "%06o", sum);
    tar.replace(at + 148, 7, checksum, 7);
    tar[at + 154] = '\0';
    return tar.substr(0, at + 512 + ((real + 511) / 512) * 512);   // the data it has, then the end of input
  }
  FAIL("no entry " << name);
  return {};
}

// `text` gzip'd (libarchive's raw format: the bytes themselves, compressed).
std::string gzipped(const std::string& text) {
  std::string out;
  struct archive* a = archive_write_new();
  archive_write_add_filter_gzip(a);
  archive_write_set_format_raw(a);
  test::open_in_memory(a, out);
  struct archive_entry* e = archive_entry_new();
  archive_entry_set_pathname(e, "raw");
  archive_entry_set_filetype(e, AE_IFREG);
  archive_write_header(a, e);
  archive_write_data(a, text.data(), text.size());
  archive_entry_free(e);
  archive_write_close(a);
  archive_write_free(a);
  return out;
}

}  // namespace

TEST_CASE("inspect refuses archives whose metadata nests 100k levels deep, without crashing", "[unit]") {
  test::TempDir tmp;
  for (const char* entry : {"spec.dump", "config.dump", kRecordEntry}) {
    INFO(entry);
    const auto archive = test::make_archive(tmp.path / "deep.tar.zst", with_entry(entry, deep_json(100000)));
    auto info = inspect_checkpoint_archive(archive, ArchiveLimits{});
    REQUIRE_FALSE(info.ok());
    CHECK(info.error().message.find(std::string(entry) + ": JSON nested deeper") != std::string::npos);
  }
}

TEST_CASE("wrongly typed spec.dump sections are read as absent for display and refused when a plan applies", "[unit]") {
  test::TempDir tmp;
  json spec = podman_spec();
  spec["annotations"] = json::array({"io.container.manager"});
  spec["linux"] = "not an object";
  auto info = inspect_checkpoint_archive(test::make_archive(tmp.path / "a.tar", with_entry("spec.dump", spec.dump())),
                                         ArchiveLimits{});
  REQUIRE(info.ok());
  CHECK(info->engine == "unknown");
  CHECK(info->spec_devices.empty());

  RestorePlan plan;
  plan.id = new_restore_plan_id();
  plan.devices = {{"/dev/nvidia0", "/dev/nvidia1", "GPU-0", "GPU-1", "/dev/nvidia1"}};
  const DeviceNumberLookup numbers = [](const std::string&) -> Result<std::pair<std::uint32_t, std::uint32_t>> {
    return std::make_pair(195u, 1u);
  };
  struct Case {
    std::function<void(json&)> edit;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {[](json& s) { s["linux"]["devices"] = json::array({"x"}); }, "linux.devices[0] is not a device object"},
      {[](json& s) { s["linux"]["devices"][0]["path"] = 7; }, "linux.devices[0] is not a device object"},
      {[](json& s) { s["linux"]["devices"] = json::object(); }, "linux.devices is object"},
      {[](json& s) { s["linux"] = json::array(); }, "linux is array"},
      {[](json& s) { s["linux"]["resources"] = 5; }, "linux.resources is integer"},
      {[](json& s) { s["annotations"] = "x"; }, "annotations is string"},
  };
  for (const auto& c : cases) {
    json bad = podman_spec();
    bad["linux"]["devices"][0]["major"] = "one-nine-five";   // tolerated: replaced by the plan
    c.edit(bad);
    INFO(bad.dump());
    const auto archive = test::make_archive(tmp.path / "b.tar", with_entry("spec.dump", bad.dump()));
    auto inspected = inspect_checkpoint_archive(archive, ArchiveLimits{});
    REQUIRE(inspected.ok());
    auto edits = restore_edits(inspected.value(), plan, numbers, ArchiveLimits{});
    REQUIRE_FALSE(edits.ok());
    CHECK(edits.error().message.find(c.expect) != std::string::npos);
  }
}

TEST_CASE("the kubelet watcher quarantines an archive it cannot use and does not retry it after a restart", "[unit]") {
  test::TempDir tmp;
  const auto dir = tmp.path / "kubelet";
  const auto state_dir = tmp.path / "state";
  const auto bomb = test::make_archive(dir / "checkpoint-evil_ns-c-2026.tar", with_entry("spec.dump", deep_json(100000)),
                                       test::Compression::None);
  test::make_archive(dir / "checkpoint-good_ns-c-2026.tar", test::podman_checkpoint_entries(), test::Compression::None);
  int inventory_reads = 0;
  auto inventory = [&] { ++inventory_reads; return Result<NodeInventory>(NodeInventory{}); };
  {
    node::Metrics metrics;
    agent::KubeletArchiveWatcher watcher(dir, state_dir, ArchiveLimits{}, inventory, metrics);
    CHECK(watcher.scan() == 0);
    CHECK(watcher.scan() == 1);   // the good one; the bad one is quarantined, the watcher goes on
    CHECK(metrics.render().find("gpuckpt_kubelet_archives_quarantined_total 1") != std::string::npos);
  }
  const auto record = state_dir / "quarantine" / "checkpoint-evil_ns-c-2026.tar.json";
  REQUIRE(fs::exists(record));
  auto reason = read_json_file(record);
  REQUIRE(reason.ok());
  CHECK(reason.value()->at("reason").get<std::string>().find("nested deeper") != std::string::npos);
  CHECK(fs::exists(bomb));   // kubelet's file stays where kubelet put it
  {
    node::Metrics metrics;   // the agent restarted
    agent::KubeletArchiveWatcher watcher(dir, state_dir, ArchiveLimits{}, inventory, metrics);
    CHECK(watcher.scan() == 0);
    CHECK(watcher.scan() == 0);
    CHECK(metrics.render().find("gpuckpt_kubelet_archives_quarantined_total 0") != std::string::npos);
  }
  // Once it changes, it is looked at again.
  test::make_archive(bomb, test::podman_checkpoint_entries(), test::Compression::None);
  node::Metrics metrics;
  agent::KubeletArchiveWatcher watcher(dir, state_dir, ArchiveLimits{}, inventory, metrics);
  watcher.scan();
  CHECK(watcher.scan() == 1);
}

TEST_CASE("paths through symlinks the archive already holds are refused, whatever the entry order", "[unit]") {
  test::TempDir tmp;
  using E = test::TestEntry;
  const std::vector<std::pair<std::vector<E>, std::string>> cases = {
      // The chain from the report: every link lexically inside, the file lands outside.
      {{E::symlink("a", "."), E::symlink("a/b", ".."), E("a/b/escaped", "x")}, "lies under the symlink a"},
      {{E::symlink("l1", "."), E::symlink("l2", "l1/..")}, "points through the symlink l1"},
      {{E::symlink("l2", "l1/.."), E::symlink("l1", ".")}, "points through the symlink l1"},
      {{E("d/file", "x"), E::symlink("d", ".")}, "replaces a directory"},
      {{E::symlink("s", "checkpoint"), E::hardlink_to("h", "s/inventory.img")}, "hardlink h points through the symlink s"},
  };
  for (const auto& [extra, expect] : cases) {
    auto entries = test::podman_checkpoint_entries();
    entries.insert(entries.end(), extra.begin(), extra.end());
    const auto archive = test::make_archive(tmp.path / "links.tar.zst", entries);
    auto listed = list_archive(archive, ArchiveLimits{});
    INFO(expect);
    REQUIRE_FALSE(listed.ok());
    CHECK(listed.error().message.find(expect) != std::string::npos);
  }
  // Links that only point at files or directories (or at other links as a whole) stay allowed.
  auto fine = test::podman_checkpoint_entries();
  fine.push_back(E::symlink("latest", "checkpoint/inventory.img"));
  fine.push_back(E::symlink("alias", "latest"));
  fine.push_back(E::symlink("checkpoint/up", "../config.dump"));
  CHECK(list_archive(test::make_archive(tmp.path / "fine.tar.zst", fine), ArchiveLimits{}).ok());
}

TEST_CASE("a /dev tmpfs image that expands past the nested limit is refused, quickly", "[unit]") {
  // 96 MiB of zeros gzip to about 0.1 MiB: the restore must stop at max_nested_bytes, not unpack it all.
  const std::string bomb = test::build_tar({test::TestEntry::dir("."), test::TestEntry::chardev("./nvidia0", 1, 3),
                                            test::TestEntry("./zeros", std::string(96u << 20, '\0'))},
                                           test::Compression::Gzip);
  CHECK(bomb.size() < (4u << 20));
  auto renumbered = renumber_device_nodes(bomb, {{"nvidia0", {"nvidia0", 195, 1}}}, ArchiveLimits{});
  REQUIRE_FALSE(renumbered.ok());
  CHECK(renumbered.error().message.find("expands to more than") != std::string::npos);
  CHECK(renumbered.error().errno_value == EFBIG);
  ArchiveLimits few;
  few.max_entries = 2;
  auto counted = renumber_device_nodes(test::dev_tmpfs_image(1, 3), {{"nvidia0", {"nvidia0", 195, 1}}}, few);
  REQUIRE_FALSE(counted.ok());
  CHECK(counted.error().message.find("more than 2 entries") != std::string::npos);
}

TEST_CASE("a /dev tmpfs image libarchive cannot open is an error, not a crash (fuzz finding)", "[unit]") {
  // libarchive gives no message for an empty image; building the error from its NULL crashed (archive_fuzz).
  for (const std::string& image : {std::string(), std::string("\x1f\x8b", 2), std::string(10, '\0')}) {
    auto renumbered = renumber_device_nodes(image, {{"nvidia0", {"nvidia0", 195, 1}}}, ArchiveLimits{});
    CHECK_FALSE(renumbered.ok());
  }
}

TEST_CASE("rootfs-diff.tar is held to the outer limits and names", "[unit]") {
  test::TempDir tmp;
  using E = test::TestEntry;
  const auto rootfs = [](std::vector<E> entries) { return test::build_tar(entries, test::Compression::None); };
  auto inspect_with = [&](std::string diff, ArchiveLimits limits = {}) {
    return inspect_checkpoint_archive(test::make_archive(tmp.path / "r.tar.zst", with_entry("rootfs-diff.tar", diff)),
                                      limits);
  };
  CHECK(inspect_with(rootfs({E("etc/motd", "hi"), E::symlink("bin/sh", "/bin/busybox")})).ok());
  auto climbing = inspect_with(rootfs({E("../../etc/shadow", "x")}));
  REQUIRE_FALSE(climbing.ok());
  CHECK(climbing.error().message.find("rootfs-diff.tar: entry name '../../etc/shadow' climbs out") != std::string::npos);
  CHECK_FALSE(inspect_with("not a tar at all, just text that goes on for a while........").ok());
  ArchiveLimits few;
  few.max_entries = 9;   // the outer archive has 8 entries
  std::vector<E> ten;
  for (char c = 'a'; c < 'k'; ++c) ten.emplace_back(std::string(1, c), "");
  CHECK(inspect_with(rootfs({ten.begin(), ten.begin() + 5}), few).ok());
  auto many = inspect_with(rootfs(ten), few);
  REQUIRE_FALSE(many.ok());
  CHECK(many.error().message.find("rootfs-diff.tar holds more than 9 entries") != std::string::npos);
  // A gzip'd rootfs-diff whose content is far larger than the archive: the total limit holds.
  ArchiveLimits small_total;
  small_total.max_total_bytes = 8 << 20;
  auto bomb = inspect_with(test::build_tar({E("zeros", std::string(16u << 20, '\0'))}, test::Compression::Gzip),
                           small_total);
  REQUIRE_FALSE(bomb.ok());
  CHECK(bomb.error().errno_value == EFBIG);
}

TEST_CASE("a /dev tmpfs image entry declaring more than the nested limit is refused before it is rewritten", "[unit]") {
  // 1.2 KB declaring 4 GiB: the rewrite used to stop at the truncation and libarchive then padded the unfinished
  // entry to 4 GiB of gzip'd zeros as the writer was freed (13-15 s). Now the declared size is checked first.
  using E = test::TestEntry;
  const std::string image = gzipped(tar_declaring({E::dir("."), E::chardev("./nvidia0", 1, 3), E("./big", "tiny")},
                                                  "./big", 4ULL << 30));
  CHECK(image.size() < 2048);
  auto renumbered = renumber_device_nodes(image, {{"nvidia0", {"nvidia0", 195, 1}}}, ArchiveLimits{});
  REQUIRE_FALSE(renumbered.ok());
  CHECK(renumbered.error().errno_value == EFBIG);
  CHECK(renumbered.error().message.find("entry big declares 4294967296 bytes") != std::string::npos);
}

TEST_CASE("a rewrite that stops early writes no padding for the unfinished entry", "[unit]") {
  test::TempDir tmp;
  auto entries = test::podman_checkpoint_entries();
  entries.emplace_back("checkpoint/pages-2.img", std::string(4096, 'q'));
  const auto archive = tmp.path / "truncated.tar";
  test::write_file(archive, tar_declaring(entries, "checkpoint/pages-2.img", 256ULL << 20));
  std::uint64_t sent = 0;
  const ArchiveByteSink sink = [&](const char*, std::size_t size) -> Result<void> {
    sent += size;
    return {};
  };
  auto streamed = send_archive(archive, sink, ArchiveEdit{}, ArchiveLimits{});
  REQUIRE_FALSE(streamed.ok());
  CHECK(streamed.error().message.find("truncated in checkpoint/pages-2.img") != std::string::npos);
  // Before: the freed writer padded the entry to its declared 256 MiB, all of it into the sink.
  CHECK(sent < (1u << 20));
  CHECK_FALSE(fs::exists(tmp.path / "out.tar"));
  CHECK_FALSE(rewrite_archive(archive, tmp.path / "out.tar", ArchiveEdit{}, ArchiveLimits{}).ok());
  CHECK_FALSE(fs::exists(tmp.path / "out.tar"));
}

TEST_CASE("a walk past its deadline stops with ETIMEDOUT, naming the budget", "[unit]") {
  test::TempDir tmp;
  const auto archive = test::make_archive(tmp.path / "a.tar.zst", test::podman_checkpoint_entries());
  ArchiveLimits limits;
  CHECK(inspect_checkpoint_archive(archive, limits).ok());
  limits.deadline = std::chrono::steady_clock::now() - std::chrono::seconds(1);
  auto late = inspect_checkpoint_archive(archive, limits);
  REQUIRE_FALSE(late.ok());
  CHECK(late.error().errno_value == ETIMEDOUT);
  CHECK(late.error().message.find("time budget") != std::string::npos);
  CHECK_FALSE(rewrite_archive(archive, tmp.path / "b.tar.zst", ArchiveEdit{}, limits).ok());
}

TEST_CASE("the kubelet watcher bounds each file's work and annotates only archives with CRIU images", "[unit]") {
  test::TempDir tmp;
  const auto dir = tmp.path / "kubelet";
  const auto state_dir = tmp.path / "state";
  auto inventory = [] { return Result<NodeInventory>(NodeInventory{}); };
  SECTION("a file past its budget is quarantined, the next one is still looked at") {
    test::make_archive(dir / "checkpoint-slow_ns-c-2026.tar", test::podman_checkpoint_entries(), test::Compression::None);
    node::Metrics metrics;
    // A base budget already spent (the size-based part of a small file is a few milliseconds).
    agent::KubeletArchiveWatcher watcher(dir, state_dir, ArchiveLimits{}, inventory, metrics, -std::chrono::seconds(60));
    watcher.scan();
    CHECK(watcher.scan() == 0);
    auto reason = read_json_file(state_dir / "quarantine" / "checkpoint-slow_ns-c-2026.tar.json");
    REQUIRE(reason.ok());
    REQUIRE(reason.value().has_value());
    CHECK(reason.value()->at("reason").get<std::string>().find("time budget") != std::string::npos);
  }
  SECTION("an archive without CRIU images is not annotated") {
    auto entries = test::podman_checkpoint_entries();
    std::erase_if(entries, [](const test::TestEntry& e) { return e.name == "checkpoint/inventory.img"; });
    const auto archive = test::make_archive(dir / "checkpoint-nocriu_ns-c-2026.tar", entries, test::Compression::None);
    const std::string before = test::read_file(archive);
    node::Metrics metrics;
    agent::KubeletArchiveWatcher watcher(dir, state_dir, ArchiveLimits{}, inventory, metrics);
    watcher.scan();
    CHECK(watcher.scan() == 0);
    CHECK(test::read_file(archive) == before);
    auto reason = read_json_file(state_dir / "quarantine" / "checkpoint-nocriu_ns-c-2026.tar.json");
    REQUIRE(reason.ok());
    REQUIRE(reason.value().has_value());
    CHECK(reason.value()->at("reason").get<std::string>().find("no CRIU images") != std::string::npos);
  }
}

TEST_CASE("file names and container names from outside cannot forge log lines", "[unit]") {
  test::TempDir tmp;
  const auto dir = tmp.path / "kubelet";
  auto entries = test::podman_checkpoint_entries();
  json config = json::parse(entries[0].data);
  config["name"] = "c\ngpuckpt-agent: error: forged by the container name";
  entries[0].data = config.dump();
  test::make_archive(dir / "checkpoint-a_ns-c-2026.tar", entries, test::Compression::None);
  test::make_archive(dir / "checkpoint-b\ngpuckpt-agent: error: forged by the file name.tar",
                     with_entry("spec.dump", "{"), test::Compression::None);
  std::vector<std::string> lines;
  log::set_sink([&](log::Level, std::string_view line) { lines.emplace_back(line); });
  {
    node::Metrics metrics;
    agent::KubeletArchiveWatcher watcher(dir, tmp.path / "state", ArchiveLimits{},
                                         [] { return Result<NodeInventory>(NodeInventory{}); }, metrics);
    watcher.scan();
    watcher.scan();
  }
  log::set_sink(nullptr);
  bool saw_name = false, saw_file = false;
  for (const auto& line : lines) {
    INFO(line);
    CHECK(line.find('\n') == std::string::npos);
    saw_name = saw_name || line.find("c\\x0agpuckpt-agent: error: forged by the container name") != std::string::npos;
    saw_file = saw_file || line.find("b\\x0agpuckpt-agent: error: forged by the file name") != std::string::npos;
  }
  CHECK(saw_name);
  CHECK(saw_file);
}
