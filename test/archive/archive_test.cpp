#include <catch2/catch_test_macros.hpp>

#include <filesystem>

#include "archive/checkpoint_archive.h"
#include "archive/restore_archive.h"
#include "restore/restore_plan.h"
#include "test/support/archive_builder.h"

namespace fs = std::filesystem;
using namespace gpuckpt;
using gpuckpt::test::Compression;
using gpuckpt::test::make_archive;
using gpuckpt::test::podman_checkpoint_entries;
using gpuckpt::test::TempDir;
using gpuckpt::test::TestEntry;

namespace {

CheckpointGpuRecord sample_record() {
  CheckpointGpuRecord r;
  r.checkpoint_id = "ck-1";
  GpuDevice gpu;
  gpu.id = "GPU-aaa";
  gpu.uuid = "GPU-aaa";
  gpu.vendor = GpuVendor::Nvidia;
  gpu.name = "NVIDIA H200";
  gpu.device_minor = 0;
  gpu.device_paths = {"/dev/nvidia0"};
  r.record.node.hostname = "node-a";
  r.record.node.gpus = {gpu};
  r.record.used_gpu_ids = {"GPU-aaa"};
  r.devices = {{"/dev/nvidia0", 1, 3, "GPU-aaa"}, {"/dev/kfd", 1, 5, ""}};
  r.gpu_env = {{"NVIDIA_VISIBLE_DEVICES", "0"}};
  return r;
}

std::vector<std::string> leftovers(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename().string());
  return names;
}

}  // namespace

TEST_CASE("a podman-layout archive is inspected: container, devices, CRIU images", "[unit]") {
  TempDir tmp;
  for (auto compression : {Compression::Zstd, Compression::Gzip, Compression::None}) {
    const auto path = make_archive(tmp.path / "a.tar", podman_checkpoint_entries(), compression);
    auto info = inspect_checkpoint_archive(path, ArchiveLimits{});
    REQUIRE(info.ok());
    CHECK(info->container_name == "counter");
    CHECK(info->container_id == "abc123");
    CHECK(info->engine == "podman");
    CHECK(info->runtime == "runc");
    CHECK(info->has_criu_images);
    CHECK(info->spec_devices == std::vector<std::string>{"/dev/nvidia0", "/dev/kfd"});
    CHECK_FALSE(info->gpus.has_value());
  }
}

TEST_CASE("a peeked entry is handed over as it passes and kept; an absent or oversized one is no error", "[unit]") {
  TempDir tmp;
  auto entries = podman_checkpoint_entries();
  entries.push_back({"stats-dump", "criu stats"});
  const auto in = make_archive(tmp.path / "in.tar.zst", entries);
  std::map<std::string, std::string> seen;
  ArchiveEdit edit;
  for (const char* name : {"stats-dump", "checkpoint/stats-dump", "checkpoint/pages-1.img"})
    edit.peek[name] = [&seen, name](const std::string& data) { seen[name] = data; };
  ArchiveLimits limits;
  limits.max_metadata_bytes = 4096;   // pages-1.img is 3 pages: too large to be handed over
  REQUIRE(rewrite_archive(in, tmp.path / "out.tar.zst", edit, limits).ok());
  CHECK(seen == std::map<std::string, std::string>{{"stats-dump", "criu stats"}});
  auto kept = read_archive_entry(tmp.path / "out.tar.zst", "stats-dump", ArchiveLimits{});
  REQUIRE(kept.ok());
  CHECK(kept->value_or("") == "criu stats");
  auto pages = read_archive_entry(tmp.path / "out.tar.zst", "checkpoint/pages-1.img", ArchiveLimits{});
  REQUIRE(pages.ok());
  CHECK(pages->value_or("") == std::string(4096 * 3, 'p'));
}

TEST_CASE("annotating keeps every entry, adds the record and spec.dump annotations", "[unit]") {
  TempDir tmp;
  const auto in = make_archive(tmp.path / "in.tar.zst", podman_checkpoint_entries());
  const auto out = tmp.path / "out.tar.zst";
  auto written = annotate_checkpoint_archive(in, out, sample_record(), ArchiveLimits{});
  REQUIRE(written.ok());
  CHECK(written.value() == fs::file_size(out));
  auto info = inspect_checkpoint_archive(out, ArchiveLimits{});
  REQUIRE(info.ok());
  REQUIRE(info->gpus.has_value());
  CHECK(info->gpus->checkpoint_id == "ck-1");
  CHECK(info->gpus->record.used_gpu_ids == std::vector<std::string>{"GPU-aaa"});
  CHECK(info->gpus->devices.at(0).gpu_id == "GPU-aaa");
  const auto& annotations = info->spec["annotations"];
  CHECK(annotations["io.container.manager"] == "libpod");   // the runtime's own annotations stay
  CHECK(annotations[kAnnotationCheckpointId] == "ck-1");
  CHECK(annotations[kAnnotationUsedGpus] == "GPU-aaa");
  CHECK(annotations[kAnnotationVersion] == "1");
  // Every original entry is still there with the same content size (CRIU images untouched).
  auto before = list_archive(in, ArchiveLimits{});
  auto after = list_archive(out, ArchiveLimits{});
  REQUIRE(before.ok());
  REQUIRE(after.ok());
  CHECK(after->size() == before->size() + 1);
  for (const auto& e : before.value()) {
    if (e.name == "spec.dump") continue;
    bool same = false;
    for (const auto& a : after.value()) same = same || (a.name == e.name && a.size == e.size);
    CHECK(same);
  }
  auto pages = read_archive_entry(out, "checkpoint/pages-1.img", ArchiveLimits{});
  REQUIRE(pages.ok());
  CHECK(*pages.value() == std::string(4096 * 3, 'p'));
  // Annotating again (in place) replaces the record instead of adding a second one.
  auto again = annotate_checkpoint_archive(out, out, sample_record(), ArchiveLimits{});
  REQUIRE(again.ok());
  CHECK(list_archive(out, ArchiveLimits{})->size() == after->size());
  CHECK(leftovers(tmp.path).size() == 2);
}

TEST_CASE("hostile archives are refused before anything uses them", "[unit]") {
  TempDir tmp;
  auto refused = [&](std::vector<TestEntry> extra, const std::string& expect) {
    auto entries = podman_checkpoint_entries();
    entries.insert(entries.end(), extra.begin(), extra.end());
    const auto path = make_archive(tmp.path / "bad.tar.zst", entries);
    auto listed = list_archive(path, ArchiveLimits{});
    REQUIRE_FALSE(listed.ok());
    CHECK(listed.error().message.find(expect) != std::string::npos);
    CHECK_FALSE(inspect_checkpoint_archive(path, ArchiveLimits{}).ok());
    const auto out = tmp.path / "never.tar.zst";
    CHECK_FALSE(annotate_checkpoint_archive(path, out, sample_record(), ArchiveLimits{}).ok());
    CHECK_FALSE(fs::exists(out));
  };
  SECTION("path traversal") { refused({TestEntry("../../etc/cron.d/x", "evil")}, "climbs out"); }
  SECTION("traversal in the middle") { refused({TestEntry("checkpoint/../../x", "evil")}, "climbs out"); }
  SECTION("absolute path") { refused({TestEntry("/etc/passwd", "evil")}, "absolute"); }
  SECTION("symlink out of the archive") { refused({TestEntry::symlink("checkpoint/link", "../../../etc")}, "outside"); }
  SECTION("absolute symlink") { refused({TestEntry::symlink("link", "/etc/shadow")}, "outside"); }
  SECTION("device node") { refused({TestEntry::chardev("dev-null", 1, 3)}, "device"); }
  SECTION("hardlink out of the archive") {
    refused({TestEntry::hardlink_to("hl", "../etc/passwd")}, "climbs out");
  }
}

TEST_CASE("a symlink that stays inside the archive is accepted", "[unit]") {
  TempDir tmp;
  auto entries = podman_checkpoint_entries();
  entries.push_back(TestEntry::symlink("checkpoint/alias.img", "inventory.img"));
  const auto path = make_archive(tmp.path / "ok.tar.zst", entries);
  CHECK(list_archive(path, ArchiveLimits{}).ok());
}

TEST_CASE("truncated, empty, non-archive and oversized inputs get clear errors", "[unit]") {
  TempDir tmp;
  const auto good = make_archive(tmp.path / "good.tar.zst", podman_checkpoint_entries());
  SECTION("truncated") {
    const auto size = fs::file_size(good);
    fs::resize_file(good, size / 2);
    auto info = inspect_checkpoint_archive(good, ArchiveLimits{});
    REQUIRE_FALSE(info.ok());
    CHECK(info.error().message.find(good.string()) != std::string::npos);
    const auto out = tmp.path / "out.tar.zst";
    CHECK_FALSE(annotate_checkpoint_archive(good, out, sample_record(), ArchiveLimits{}).ok());
    CHECK(leftovers(tmp.path) == std::vector<std::string>{"good.tar.zst"});   // no partial output anywhere
  }
  SECTION("uncompressed and truncated") {
    const auto plain = make_archive(tmp.path / "plain.tar", podman_checkpoint_entries(), Compression::None);
    fs::resize_file(plain, fs::file_size(plain) - 3000);
    CHECK_FALSE(list_archive(plain, ArchiveLimits{}).ok());
  }
  SECTION("not an archive") {
    gpuckpt::test::write_file(tmp.path / "junk.tar", "this is not a tar file at all, just text\n");
    CHECK_FALSE(list_archive(tmp.path / "junk.tar", ArchiveLimits{}).ok());
  }
  SECTION("missing") {
    auto r = list_archive(tmp.path / "absent.tar", ArchiveLimits{});
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().errno_value == ENOENT);
  }
  SECTION("a symlink to an archive is refused") {
    fs::create_symlink(good, tmp.path / "link.tar.zst");
    CHECK_FALSE(list_archive(tmp.path / "link.tar.zst", ArchiveLimits{}).ok());
  }
  SECTION("archive over the size limit") {
    ArchiveLimits limits;
    limits.max_archive_bytes = 100;
    auto r = list_archive(good, limits);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().errno_value == EFBIG);
  }
  SECTION("entry over the size limit") {
    ArchiveLimits limits;
    limits.max_entry_bytes = 4096;
    auto r = list_archive(good, limits);
    REQUIRE_FALSE(r.ok());
    CHECK(r.error().message.find("checkpoint/pages-1.img") != std::string::npos);
  }
  SECTION("too many entries") {
    ArchiveLimits limits;
    limits.max_entries = 3;
    CHECK_FALSE(list_archive(good, limits).ok());
  }
  SECTION("not a checkpoint: no spec.dump") {
    const auto path = make_archive(tmp.path / "other.tar.zst", {{"hello.txt", "hi"}});
    auto info = inspect_checkpoint_archive(path, ArchiveLimits{});
    REQUIRE_FALSE(info.ok());
    CHECK(info.error().message.find("not a container checkpoint") != std::string::npos);
  }
}

TEST_CASE("entry names are normalised or refused", "[unit]") {
  CHECK(normalise_entry_name("./checkpoint/inventory.img").value() == "checkpoint/inventory.img");
  CHECK(normalise_entry_name("./").value() == ".");
  CHECK(normalise_entry_name("a//b/").value() == "a/b");
  CHECK_FALSE(normalise_entry_name("/abs").ok());
  CHECK_FALSE(normalise_entry_name("a/../../b").ok());
  CHECK_FALSE(normalise_entry_name("..").ok());
  CHECK_FALSE(normalise_entry_name(std::string(5000, 'a')).ok());
}

TEST_CASE("the /dev tmpfs image gets the target GPU's device numbers", "[unit]") {
  const auto image = gpuckpt::test::dev_tmpfs_image(1, 3);
  auto renumbered = renumber_device_nodes(image, {{"nvidia0", {"nvidia0", 195, 1}}}, ArchiveLimits{});
  REQUIRE(renumbered.ok());
  REQUIRE(renumbered.value().has_value());
  // Read it back: nvidia0 moved, the others did not.
  TempDir tmp;
  gpuckpt::test::write_file(tmp.path / "dev.tar.gz", *renumbered.value());
  struct archive* a = archive_read_new();
  archive_read_support_filter_all(a);
  archive_read_support_format_tar(a);
  REQUIRE(archive_read_open_filename(a, (tmp.path / "dev.tar.gz").c_str(), 4096) == ARCHIVE_OK);
  struct archive_entry* e = nullptr;
  std::map<std::string, std::pair<unsigned, unsigned>> nodes;
  while (archive_read_next_header(a, &e) == ARCHIVE_OK)
    if (archive_entry_filetype(e) == AE_IFCHR)
      nodes[archive_entry_pathname(e)] = {archive_entry_rdevmajor(e), archive_entry_rdevminor(e)};
  archive_read_free(a);
  CHECK(nodes.at("./nvidia0") == std::pair<unsigned, unsigned>{195, 1});
  CHECK(nodes.at("./null") == std::pair<unsigned, unsigned>{1, 3});
  CHECK(nodes.at("./kfd") == std::pair<unsigned, unsigned>{1, 5});
  // An image without those nodes is left alone.
  auto untouched = renumber_device_nodes(image, {{"dri/renderD128", {"dri/renderD128", 226, 128}}}, ArchiveLimits{});
  REQUIRE(untouched.ok());
  CHECK_FALSE(untouched.value().has_value());
}

namespace {
std::map<std::string, std::pair<unsigned, unsigned>> char_devices_in(const std::string& gz_tar) {
  TempDir tmp;
  gpuckpt::test::write_file(tmp.path / "dev.tar.gz", gz_tar);
  struct archive* a = archive_read_new();
  archive_read_support_filter_all(a);
  archive_read_support_format_tar(a);
  std::map<std::string, std::pair<unsigned, unsigned>> nodes;
  if (archive_read_open_filename(a, (tmp.path / "dev.tar.gz").c_str(), 4096) == ARCHIVE_OK) {
    struct archive_entry* e = nullptr;
    while (archive_read_next_header(a, &e) == ARCHIVE_OK)
      if (archive_entry_filetype(e) == AE_IFCHR)
        nodes[archive_entry_pathname(e)] = {archive_entry_rdevmajor(e), archive_entry_rdevminor(e)};
  }
  archive_read_free(a);
  return nodes;
}
}  // namespace

TEST_CASE("the /dev tmpfs image gives a moved NVIDIA GPU its own node name", "[unit]") {
  using gpuckpt::test::TestEntry;
  using Nodes = std::map<std::string, std::pair<unsigned, unsigned>>;
  const auto two = gpuckpt::test::build_tar({TestEntry::dir("."), TestEntry::chardev("./null", 1, 3),
                                             TestEntry::chardev("./nvidia0", 195, 0), TestEntry::chardev("./nvidia1", 195, 1)},
                                            gpuckpt::test::Compression::Gzip);
  SECTION("renamed: nvidia1 -> nvidia0, and the node left at nvidia0 is dropped") {
    auto out = renumber_device_nodes(two, {{"nvidia1", {"nvidia0", 195, 0}}}, ArchiveLimits{});
    REQUIRE(out.ok());
    REQUIRE(out.value().has_value());
    CHECK(char_devices_in(*out.value()) == Nodes{{"./null", {1, 3}}, {"./nvidia0", {195, 0}}});
  }
  SECTION("swapped: each node is matched once, by its name in the image; neither is dropped") {
    // Another node's numbers (1:5 and 1:7, as aliases) tell which image entry became which.
    const auto aliased = gpuckpt::test::build_tar({TestEntry::dir("."), TestEntry::chardev("./nvidia0", 1, 5),
                                                   TestEntry::chardev("./nvidia1", 1, 7)},
                                                  gpuckpt::test::Compression::Gzip);
    auto out = renumber_device_nodes(aliased, {{"nvidia0", {"nvidia1", 195, 1}}, {"nvidia1", {"nvidia0", 195, 0}}},
                                     ArchiveLimits{});
    REQUIRE(out.ok());
    REQUIRE(out.value().has_value());
    CHECK(char_devices_in(*out.value()) == Nodes{{"./nvidia0", {195, 0}}, {"./nvidia1", {195, 1}}});
    // A map that swaps names only would be caught by a second pass; one entry per name is what CRIU must see.
    auto names = renumber_device_nodes(aliased, {{"nvidia0", {"nvidia1", 1, 5}}, {"nvidia1", {"nvidia0", 1, 7}}},
                                       ArchiveLimits{});
    REQUIRE(names.ok());
    CHECK(char_devices_in(*names.value()) == Nodes{{"./nvidia1", {1, 5}}, {"./nvidia0", {1, 7}}});
  }
}
