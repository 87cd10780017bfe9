// Pushing checkpoint images to a real registry (Debian's docker-registry, distribution 2.8): what lands there is the
// layout's manifest and blobs byte for byte; a second push finds the blobs there; HTTP Basic credentials are sent
// only when asked and a refusal names the setting; podman pulls the pushed image (a real client reading it).
#include <catch2/catch_test_macros.hpp>

#include <httplib.h>

#include <nlohmann/json.hpp>

#include "node/registry_push.h"
#include "archive/checkpoint_image.h"
#include "test/support/archive_builder.h"
#include "test/support/registry_server.h"

namespace fs = std::filesystem;
using namespace gpuckpt;
using nlohmann::json;

namespace {

// A checkpoint image of a test archive in `dir`, and push options for `repository` on `registry` (plain http).
struct Pushable {
  CheckpointImage image;
  node::RegistryOptions options;
};
Pushable pushable(const fs::path& dir, const test::RegistryServer& registry, const std::string& repository,
                  const std::string& tag) {
  auto image = write_checkpoint_image(test::make_archive(dir / "ck.tar", test::podman_checkpoint_entries()),
                                      dir / "ck.oci", tag, ArchiveLimits{});
  REQUIRE(image.ok());
  Pushable p{image.value(), {}};
  p.options.repository = registry.host() + "/" + repository;
  p.options.plain_http = true;
  return p;
}

}  // namespace

TEST_CASE("a checkpoint image pushed to a registry is stored byte for byte under its tag", "[e2e]") {
  test::RegistryServer registry;
  if (!registry.ready()) SKIP("docker-registry is not installed or did not start (scripts/setup.sh installs it)");
  test::TempDir tmp;
  auto [image, options] = pushable(tmp.path, registry, "gpuckpt/checkpoints", "ck-1");
  const fs::path archive = tmp.path / "ck.tar";
  auto pushed = node::push_checkpoint_image(options, image.layout, "ck-1");
  INFO((pushed.ok() ? std::string() : pushed.error().message));
  REQUIRE(pushed.ok());
  CHECK(pushed.value() == options.repository + ":ck-1@" + image.manifest_digest);

  httplib::Client client("127.0.0.1", registry.port());
  auto manifest = client.Get("/v2/gpuckpt/checkpoints/manifests/ck-1",
                             {{"Accept", "application/vnd.oci.image.manifest.v1+json"}});
  REQUIRE(manifest);
  CHECK(manifest->status == 200);
  CHECK(manifest->get_header_value("Docker-Content-Digest") == image.manifest_digest);
  CHECK(manifest->body == test::read_file(image.layout / "blobs" / "sha256" / image.manifest_digest.substr(7)));
  const std::string layer = json::parse(manifest->body)["layers"][0]["digest"];
  auto blob = client.Get(("/v2/gpuckpt/checkpoints/blobs/" + layer).c_str());
  REQUIRE(blob);
  CHECK(blob->status == 200);
  CHECK(blob->body == test::read_file(archive));   // the layer is the archive, unchanged

  // Again, under another tag: every blob is there already, only the manifest is stored.
  auto again = node::push_checkpoint_image(options, image.layout, "ck-1-again");
  REQUIRE(again.ok());
  CHECK(again.value().find(":ck-1-again@" + image.manifest_digest) != std::string::npos);

  if (::geteuid() == 0 && std::system("podman --version >/dev/null 2>&1") == 0) {
    const std::string ref = options.repository + ":ck-1";
    CHECK(std::system(("podman pull -q --tls-verify=false " + ref + " >/dev/null 2>&1").c_str()) == 0);
    CHECK(std::system(("podman image inspect --format '{{index .Annotations \"io.podman.annotations.checkpoint.name\"}}' " +
                       ref + " | grep -qx counter").c_str()) == 0);
    std::system(("podman rmi -f " + ref + " >/dev/null 2>&1").c_str());
  }
}

TEST_CASE("registry credentials: sent when asked, a refusal names the setting; bad settings are refused", "[e2e]") {
  test::RegistryServer registry("gpuckpt", "s3cret-pass");
  if (!registry.ready()) SKIP("docker-registry is not installed or did not start (scripts/setup.sh installs it)");
  test::TempDir tmp;
  auto [image, options] = pushable(tmp.path, registry, "ml/ck", "ck-2");
  auto anonymous = node::push_checkpoint_image(options, image.layout, "ck-2");
  REQUIRE_FALSE(anonymous.ok());
  CHECK(anonymous.error().message.find("asks for credentials: set image_registry.credentials_file") != std::string::npos);
  test::write_file(tmp.path / "wrong", "gpuckpt:not-it\n");
  options.credentials_file = (tmp.path / "wrong").string();
  auto wrong = node::push_checkpoint_image(options, image.layout, "ck-2");
  REQUIRE_FALSE(wrong.ok());
  CHECK(wrong.error().message.find("refused ml/ck: HTTP 401") != std::string::npos);
  test::write_file(tmp.path / "right", "gpuckpt:s3cret-pass\n");
  options.credentials_file = (tmp.path / "right").string();
  auto right = node::push_checkpoint_image(options, image.layout, "ck-2");
  INFO((right.ok() ? std::string() : right.error().message));
  CHECK(right.ok());

  options.repository = "127.0.0.1:" + std::to_string(test::RegistryServer::free_port()) + "/ml/ck";
  options.credentials_file.clear();
  auto nobody = node::push_checkpoint_image(options, image.layout, "ck-2");
  REQUIRE_FALSE(nobody.ok());
  CHECK(nobody.error().message.find("cannot reach the registry") != std::string::npos);
  for (const char* bad : {"no-path", "/ml/ck", "host/ML/ck", "host/ml//ck", "host/ml/ck/", "ho st/ml"})
    CHECK_FALSE(node::check_repository(bad).ok());
  CHECK(node::check_repository("registry.example:5000/ml/check-points_1").ok());
}

TEST_CASE("token authentication: a push token from the realm the registry names, with the credentials", "[e2e]") {
  test::RegistryServer registry("gpuckpt", "t0ken-pass", test::RegistryServer::Auth::token);
  if (!registry.ready()) SKIP("docker-registry, python3 or openssl is missing, or the registry did not start");
  test::TempDir tmp;
  auto [image, options] = pushable(tmp.path, registry, "ml/tokened", "ck-3");
  auto anonymous = node::push_checkpoint_image(options, image.layout, "ck-3");
  REQUIRE_FALSE(anonymous.ok());
  CHECK(anonymous.error().message.find("refused a push token for ml/tokened: HTTP 401 UNAUTHORIZED") != std::string::npos);
  CHECK(anonymous.error().message.find("no image_registry.credentials_file") != std::string::npos);
  test::write_file(tmp.path / "right", "gpuckpt:t0ken-pass\n");
  options.credentials_file = (tmp.path / "right").string();
  auto pushed = node::push_checkpoint_image(options, image.layout, "ck-3");
  INFO((pushed.ok() ? std::string() : pushed.error().message));
  REQUIRE(pushed.ok());
  CHECK(pushed.value() == options.repository + ":ck-3@" + image.manifest_digest);
  // Without a token the registry keeps it to itself: the push really went through token authentication.
  httplib::Client client("127.0.0.1", registry.port());
  auto unauthenticated = client.Get("/v2/ml/tokened/manifests/ck-3");
  REQUIRE(unauthenticated);
  CHECK(unauthenticated->status == 401);
  CHECK(unauthenticated->get_header_value("WWW-Authenticate").rfind("Bearer realm=", 0) == 0);
}
