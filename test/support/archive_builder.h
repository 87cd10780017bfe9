// Builds small checkpoint archives for tests with libarchive: the podman layout (config.dump, spec.dump,
// checkpoint/...) plus whatever hostile entries a test needs.
#pragma once

#include <archive.h>
#include <archive_entry.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test/support/temp_dir.h"   // TempDir

namespace gpuckpt::test {

struct TestEntry {
  std::string name;
  std::string data;
  int type = AE_IFREG;          // AE_IFREG, AE_IFDIR, AE_IFLNK, AE_IFCHR
  std::string link;             // symlink or hardlink target
  unsigned rdev_major = 0, rdev_minor = 0;
  bool hardlink = false;

  TestEntry(std::string n, std::string d) : name(std::move(n)), data(std::move(d)) {}
  static TestEntry dir(std::string n) {
    TestEntry e(std::move(n), "");
    e.type = AE_IFDIR;
    return e;
  }
  static TestEntry symlink(std::string n, std::string target) {
    TestEntry e(std::move(n), "");
    e.type = AE_IFLNK;
    e.link = std::move(target);
    return e;
  }
  static TestEntry hardlink_to(std::string n, std::string target) {
    TestEntry e(std::move(n), "");
    e.hardlink = true;
    e.link = std::move(target);
    return e;
  }
  static TestEntry chardev(std::string n, unsigned major, unsigned minor) {
    TestEntry e(std::move(n), "");
    e.type = AE_IFCHR;
    e.rdev_major = major;
    e.rdev_minor = minor;
    return e;
  }
};

enum class Compression { None, Gzip, Zstd };

// Opens writer `a` into `out`, with no zero padding after the (compressed) stream.
inline void open_in_memory(struct archive* a, std::string& out) {
  archive_write_set_bytes_in_last_block(a, 1);
  archive_write_open(
      a, &out, nullptr,
      [](struct archive*, void* sink, const void* data, std::size_t size) -> la_ssize_t {
        static_cast<std::string*>(sink)->append(static_cast<const char*>(data), size);
        return static_cast<la_ssize_t>(size);
      },
      nullptr);
}

inline std::string build_tar(const std::vector<TestEntry>& entries, Compression compression) {
  std::string out;
  struct archive* a = archive_write_new();
  if (compression == Compression::Gzip) archive_write_add_filter_gzip(a);
  if (compression == Compression::Zstd) archive_write_add_filter_zstd(a);
  archive_write_set_format_pax_restricted(a);
  open_in_memory(a, out);
  for (const auto& e : entries) {
    struct archive_entry* entry = archive_entry_new();
    archive_entry_set_pathname(entry, e.name.c_str());
    if (e.hardlink) {
      archive_entry_set_hardlink(entry, e.link.c_str());
    } else {
      archive_entry_set_filetype(entry, static_cast<unsigned>(e.type));
      if (e.type == AE_IFLNK) archive_entry_set_symlink(entry, e.link.c_str());
      if (e.type == AE_IFCHR) {
        archive_entry_set_rdevmajor(entry, e.rdev_major);
        archive_entry_set_rdevminor(entry, e.rdev_minor);
      }
    }
    archive_entry_set_perm(entry, e.type == AE_IFDIR ? 0755 : 0644);
    archive_entry_set_size(entry, e.type == AE_IFREG && !e.hardlink ? static_cast<la_int64_t>(e.data.size()) : 0);
    archive_write_header(a, entry);
    if (e.type == AE_IFREG && !e.data.empty()) archive_write_data(a, e.data.data(), e.data.size());
    archive_entry_free(entry);
  }
  archive_write_close(a);
  archive_write_free(a);
  return out;
}

inline void write_file(const std::filesystem::path& path, const std::string& data) {
  std::filesystem::create_directories(path.parent_path());
  FILE* f = std::fopen(path.c_str(), "wb");
  std::fwrite(data.data(), 1, data.size(), f);
  std::fclose(f);
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The /dev tmpfs image CRIU writes (gzip'd tar of the container's /dev).
inline std::string dev_tmpfs_image(unsigned nvidia0_major, unsigned nvidia0_minor) {
  return build_tar({TestEntry::dir("."), TestEntry::chardev("./null", 1, 3),
                    TestEntry::chardev("./nvidia0", nvidia0_major, nvidia0_minor), TestEntry::chardev("./kfd", 1, 5),
                    TestEntry::symlink("./stdout", "/proc/self/fd/1")},
                   Compression::Gzip);
}

// The entries of a podman checkpoint of a container "counter" (id abc123) with /dev/nvidia0 and /dev/kfd.
inline std::vector<TestEntry> podman_checkpoint_entries() {
  const nlohmann::json config = {{"id", "abc123"}, {"name", "counter"}, {"rootfsImageName", "localhost/busybox:latest"},
                                 {"runtime", "runc"}, {"createdTime", "2026-11-21T10:00:00Z"}};
  const nlohmann::json spec = {
      {"ociVersion", "1.0.2-dev"},
      {"process", {{"env", nlohmann::json::array({"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=0"})}}},
      {"annotations", {{"io.container.manager", "libpod"}}},
      {"linux",
       {{"devices", nlohmann::json::array({{{"path", "/dev/nvidia0"}, {"type", "c"}, {"major", 1}, {"minor", 3}},
                                           {{"path", "/dev/kfd"}, {"type", "c"}, {"major", 1}, {"minor", 5}}})}}}};
  return {{"config.dump", config.dump()},
          {"spec.dump", spec.dump()},
          {"network.status", "{}"},
          TestEntry::dir("checkpoint"),
          {"checkpoint/inventory.img", std::string(86, '\x01')},
          {"checkpoint/pages-1.img", std::string(4096 * 3, 'p')},
          {"checkpoint/tmpfs-dev-44.tar.gz.img", dev_tmpfs_image(1, 3)},
          {"rootfs-diff.tar", std::string(1024, '\0')}};
}

// The stats-dump image CRIU 4.1.1 wrote for `podman container checkpoint --export` (podman 4.3.1, runc 1.1.5) of
// a busybox shell loop, as podman put it at the top of its archive: freezing 123527 us, frozen 539814 us, memdump
// 557 us, memwrite 119 us, 48 pages scanned, 33 written.
inline std::string criu_dump_stats_image() {
  const unsigned char bytes[] = {0x40, 0x59, 0x10, 0x55, 0x06, 0x33, 0x09, 0x57, 0x23, 0x00, 0x00, 0x00,
                                 0x0a, 0x21, 0x08, 0x87, 0xc5, 0x07, 0x10, 0xa6, 0xf9, 0x20, 0x18, 0xad,
                                 0x04, 0x20, 0x77, 0x28, 0x30, 0x30, 0x00, 0x38, 0x21, 0x40, 0x00, 0x48,
                                 0x00, 0x50, 0x08, 0x58, 0x08, 0x60, 0x00, 0x68, 0x00, 0x70, 0x00};
  return std::string(reinterpret_cast<const char*>(bytes), sizeof bytes);
}

inline std::filesystem::path make_archive(const std::filesystem::path& path, const std::vector<TestEntry>& entries,
                                          Compression compression = Compression::Zstd) {
  write_file(path, build_tar(entries, compression));
  return path;
}

}  // namespace gpuckpt::test
