#include <sys/utsname.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "archive/checkpoint_image.h"
#include "runtime/container_runtime.h"
#include "test/support/archive_builder.h"

namespace fs = std::filesystem;
using namespace gpuckpt;
using nlohmann::json;

namespace {

std::string sha256(const std::string& data) {
  Sha256 h;
  h.update(data.data(), data.size());
  return h.hex();
}

}  // namespace

TEST_CASE("SHA-256 matches the FIPS 180-2 test vectors", "[unit]") {
  CHECK(sha256("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  Sha256 million;   // fed in uneven pieces across block boundaries
  const std::string chunk(997, 'a');
  std::size_t fed = 0;
  while (fed < 1000000) {
    const std::size_t n = std::min<std::size_t>(chunk.size(), 1000000 - fed);
    million.update(chunk.data(), n);
    fed += n;
  }
  CHECK(million.hex() == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("a checkpoint archive becomes an OCI image layout engines recognise as a checkpoint", "[unit]") {
  test::TempDir tmp;
  auto entries = test::podman_checkpoint_entries();
  // spec.dump as gpuckpt annotates it
  auto spec = json::parse(entries[1].data);
  spec["annotations"]["io.gpuckpt.checkpoint-id"] = "ck-1";
  spec["annotations"]["io.gpuckpt.used-gpus"] = "GPU-0";
  entries[1].data = spec.dump();
  const auto archive = test::make_archive(tmp.path / "ck-1.tar", entries, test::Compression::None);
  const auto layout = tmp.path / "ck-1.oci";
  auto image = write_checkpoint_image(archive, layout, "ck-1", ArchiveLimits{});
  REQUIRE(image.ok());
  CHECK(json::parse(test::read_file(layout / "oci-layout"))["imageLayoutVersion"] == "1.0.0");
  // Every blob is named by its digest.
  for (const auto& blob : fs::directory_iterator(layout / "blobs" / "sha256"))
    CHECK(sha256(test::read_file(blob.path())) == blob.path().filename().string());
  const auto index = json::parse(test::read_file(layout / "index.json"));
  REQUIRE(index["manifests"].size() == 1);
  CHECK(index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"] == "ck-1");
  const std::string manifest_digest = index["manifests"][0]["digest"];
  CHECK(manifest_digest == image->manifest_digest);
  const auto manifest = json::parse(test::read_file(layout / "blobs" / "sha256" / manifest_digest.substr(7)));
  const auto& a = manifest["annotations"];
  CHECK(a["io.kubernetes.cri-o.annotations.checkpoint.name"] == "counter");
  CHECK(a["io.podman.annotations.checkpoint.name"] == "counter");
  CHECK(a["io.podman.annotations.checkpoint.runtime.name"] == "runc");
  CHECK(a["io.kubernetes.containerd.annotations.checkpoint.rootfsImageName"] == "localhost/busybox:latest");
  CHECK(a["io.gpuckpt.checkpoint-id"] == "ck-1");
  CHECK(a["io.gpuckpt.used-gpus"] == "GPU-0");
  CHECK(a["org.criu.checkpoint.container.name"] == "counter");   // checkpointctl / containerd 2.1
  CHECK(a["org.criu.checkpoint.rootfsImageName"] == "localhost/busybox:latest");
  CHECK(a["org.criu.checkpoint.runtime.name"] == "runc");
  CHECK(a["org.criu.checkpoint.engine.name"] == "podman");
  // The layer is the archive, unchanged; uncompressed, its diff id is its digest.
  REQUIRE(manifest["layers"].size() == 1);
  CHECK(manifest["layers"][0]["mediaType"] == "application/vnd.oci.image.layer.v1.tar");
  CHECK(manifest["layers"][0]["digest"] == "sha256:" + sha256(test::read_file(archive)));
  const auto config = json::parse(test::read_file(layout / "blobs" / "sha256" / manifest["config"]["digest"].get<std::string>().substr(7)));
  CHECK(config["rootfs"]["diff_ids"][0] == manifest["layers"][0]["digest"]);
  // The architecture is this machine's, by its OCI name (uname -m says x86_64/aarch64, OCI amd64/arm64).
  struct utsname machine {};
  REQUIRE(::uname(&machine) == 0);
  const std::map<std::string, std::string> oci_names = {{"x86_64", "amd64"}, {"aarch64", "arm64"},
      {"ppc64le", "ppc64le"}, {"s390x", "s390x"}, {"riscv64", "riscv64"}};
  REQUIRE(oci_names.count(machine.machine));
  CHECK(config["architecture"] == oci_names.at(machine.machine));
  CHECK(config["os"] == "linux");
  CHECK(a["org.criu.checkpoint.host.arch"] == config["architecture"]);
  // Never over an existing image.
  auto again = write_checkpoint_image(archive, layout, "ck-1", ArchiveLimits{});
  REQUIRE_FALSE(again.ok());
  CHECK(again.error().errno_value == EEXIST);
}

TEST_CASE("a compressed archive keeps its compression and gets the diff id of its tar stream", "[unit]") {
  test::TempDir tmp;
  const auto plain = test::build_tar(test::podman_checkpoint_entries(), test::Compression::None);
  test::write_file(tmp.path / "ck.tar", plain);
  const auto zstd = test::make_archive(tmp.path / "ck.tar.zst", test::podman_checkpoint_entries());
  auto image = write_checkpoint_image(zstd, tmp.path / "z.oci", "z", ArchiveLimits{});
  REQUIRE(image.ok());
  const auto manifest = json::parse(test::read_file(tmp.path / "z.oci" / "blobs" / "sha256" / image->manifest_digest.substr(7)));
  CHECK(manifest["layers"][0]["mediaType"] == "application/vnd.oci.image.layer.v1.tar+zstd");
  const auto config = json::parse(
      test::read_file(tmp.path / "z.oci" / "blobs" / "sha256" / manifest["config"]["digest"].get<std::string>().substr(7)));
  CHECK(config["rootfs"]["diff_ids"][0] == "sha256:" + sha256(plain));
}

TEST_CASE("an unusable archive leaves no image behind", "[unit]") {
  test::TempDir tmp;
  auto entries = test::podman_checkpoint_entries();
  entries.push_back(test::TestEntry("../escape", "x"));
  const auto bad = test::make_archive(tmp.path / "bad.tar.zst", entries);
  CHECK_FALSE(write_checkpoint_image(bad, tmp.path / "bad.oci", "bad", ArchiveLimits{}).ok());
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(tmp.path)) names.push_back(e.path().filename().string());
  CHECK(names == std::vector<std::string>{"bad.tar.zst"});
}

// The real podman: the agent's load of a checkpoint image into podman's store (runtime.kind podman), a layout podman
// cannot read, and a podman that hangs (a script standing in for it: only the time bound is under test there).
TEST_CASE("podman loads a checkpoint image under the gpuckpt name; a broken layout or a hang is a clear error", "[e2e]") {
  if (::geteuid() != 0 || std::system("podman --version >/dev/null 2>&1") != 0) SKIP("needs root and podman");
  test::TempDir tmp;
  const fs::path archive = test::make_archive(tmp.path / "ck.tar", test::podman_checkpoint_entries());
  const std::string tag = "gpuckpt-test-load-" + std::to_string(::getpid());
  // Whatever fails below, podman keeps no image of this test.
  struct RemoveImage {
    std::string name;
    ~RemoveImage() { std::system(("podman rmi -f " + name + " >/dev/null 2>&1").c_str()); }
  } remove_image{"localhost/gpuckpt-checkpoint:" + tag};
  auto image = write_checkpoint_image(archive, tmp.path / "ck.oci", tag, ArchiveLimits{});
  REQUIRE(image.ok());
  PodmanOptions options;
  options.timeout = std::chrono::seconds(60);
  auto podman = make_podman_runtime(options);
  auto loaded = podman->load_image(image->layout, tag, kNoDeadline);
  INFO((loaded.ok() ? std::string() : loaded.error().message));
  REQUIRE(loaded.ok());
  CHECK(loaded.value() == "localhost/gpuckpt-checkpoint:" + tag);
  CHECK(std::system(("podman image exists " + loaded.value()).c_str()) == 0);
  CHECK(std::system(("podman image exists localhost" + image->layout.string()).c_str()) != 0);   // path name dropped
  std::system(("podman rmi -f " + loaded.value() + " >/dev/null 2>&1").c_str());   // the broken layout's turn next

  auto broken = write_checkpoint_image(archive, tmp.path / "broken.oci", tag, ArchiveLimits{});
  REQUIRE(broken.ok());
  const std::string layer = json::parse(test::read_file(broken->layout / "blobs" / "sha256" /
                                             broken->manifest_digest.substr(7)))["layers"][0]["digest"];
  fs::remove(broken->layout / "blobs" / "sha256" / layer.substr(7));
  auto refused = podman->load_image(broken->layout, tag, kNoDeadline);
  REQUIRE_FALSE(refused.ok());
  CHECK(refused.error().message.find("podman pull of the checkpoint image " + broken->layout.string() + " failed") == 0);
  CHECK(std::system(("podman image exists localhost/gpuckpt-checkpoint:" + tag).c_str()) != 0);

  const fs::path hanging = tmp.path / "podman-hangs";
  test::write_file(hanging, "#!/bin/sh\nexec sleep 30\n");
  fs::permissions(hanging, fs::perms::owner_all);
  PodmanOptions slow;
  slow.podman = hanging.string();
  slow.timeout = std::chrono::seconds(1);
  const auto t0 = std::chrono::steady_clock::now();
  auto hung = make_podman_runtime(slow)->load_image(image->layout, tag, kNoDeadline);
  REQUIRE_FALSE(hung.ok());
  CHECK(hung.error().message.find("timed out after 1 s") != std::string::npos);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(20));
}
