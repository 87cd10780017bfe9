// A registry that answers as an attacker would (an in-process server playing the OCI distribution API): answers
// too large to hold, answers that trickle forever, a manifest stored without a digest or under another one, a token
// realm on a host the admin did not name. Each push fails with a reason; none holds the agent's memory or time.
#include <catch2/catch_test_macros.hpp>

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "gpumem/chunk_store.h"
#include "node/registry_chunks.h"
#include "node/registry_push.h"
#include "archive/checkpoint_image.h"
#include "test/support/archive_builder.h"

namespace fs = std::filesystem;
using namespace gpuckpt;

namespace {

// Answers the steps of a push a test asks for (httplib serves HEAD through the GET handler).
struct HostileRegistry {
  httplib::Server http;
  std::thread thread;
  int port = 0;
  std::string manifest_digest;   // what the manifest PUT answers in Docker-Content-Digest ("" = no header)
  std::atomic<bool> stop_trickling{false};

  HostileRegistry() {
    http.Get("/v2/", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  }
  void start() {
    port = http.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { http.listen_after_bind(); });
    while (!http.is_running()) std::this_thread::yield();
  }
  void well_behaved() {
    http.Post(R"(/v2/.*/blobs/uploads/)", [](const httplib::Request&, httplib::Response& res) {
      res.status = 202;
      res.set_header("Location", "/v2/upload/1");
    });
    http.Put(R"(/v2/upload/1)", [](const httplib::Request&, httplib::Response& res) { res.status = 201; });
    http.Put(R"(/v2/.*/manifests/.*)", [this](const httplib::Request&, httplib::Response& res) {
      res.status = 201;
      if (!manifest_digest.empty()) res.set_header("Docker-Content-Digest", manifest_digest);
    });
  }
  ~HostileRegistry() {
    stop_trickling = true;
    http.stop();
    if (thread.joinable()) thread.join();
  }
};

struct Pushable {
  CheckpointImage image;
  node::RegistryOptions options;
};

Pushable pushable(const fs::path& dir, int port) {
  auto image = write_checkpoint_image(test::make_archive(dir / "ck.tar", test::podman_checkpoint_entries()),
                                      dir / "ck.oci", "ck-1", ArchiveLimits{});
  REQUIRE(image.ok());
  Pushable p{image.value(), {}};
  p.options.repository = "127.0.0.1:" + std::to_string(port) + "/gpuckpt/ck";
  p.options.plain_http = true;
  p.options.timeout = std::chrono::seconds(2);
  return p;
}

}  // namespace

TEST_CASE("a registry's manifest answer must name the manifest's own digest, or the push fails", "[unit]") {
  test::TempDir tmp;
  HostileRegistry registry;
  registry.http.Get(R"(/v2/.*/blobs/.*)", [](const httplib::Request&, httplib::Response& res) { res.status = 404; });
  registry.well_behaved();
  registry.start();
  auto p = pushable(tmp.path, registry.port);
  registry.manifest_digest = "";   // before: reported as pushed
  auto silent = node::push_checkpoint_image(p.options, p.image.layout, "ck-1");
  REQUIRE_FALSE(silent.ok());
  CHECK(silent.error().message.find("no Docker-Content-Digest") != std::string::npos);
  registry.manifest_digest = "sha256:" + std::string(64, 'a');
  auto other = node::push_checkpoint_image(p.options, p.image.layout, "ck-1");
  REQUIRE_FALSE(other.ok());
  CHECK(other.error().message.find("stored the manifest as sha256:aaaa") != std::string::npos);
  registry.manifest_digest = p.image.manifest_digest;
  auto right = node::push_checkpoint_image(p.options, p.image.layout, "ck-1");
  INFO((right.ok() ? std::string() : right.error().message));
  CHECK(right.ok());
}

TEST_CASE("a registry answer larger than 1 MiB is refused as it streams in", "[unit]") {
  test::TempDir tmp;
  HostileRegistry registry;
  std::atomic<std::uint64_t> offered{0};
  registry.http.Get(R"(/v2/.*/blobs/.*)", [](const httplib::Request&, httplib::Response& res) { res.status = 404; });
  registry.http.Post(R"(/v2/.*/blobs/uploads/)", [&](const httplib::Request&, httplib::Response& res) {
    res.status = 202;
    res.set_header("Location", "/v2/upload/1");
    // 1 GiB, made as it is sent: only what the client reads is ever produced.
    res.set_content_provider(1ULL << 30, "text/plain", [&](std::size_t offset, std::size_t length, httplib::DataSink& sink) {
      static const std::string chunk(1 << 16, 'z');
      offered = offset;
      return sink.write(chunk.data(), std::min(length, chunk.size()));
    });
  });
  registry.start();
  auto p = pushable(tmp.path, registry.port);
  auto pushed = node::push_checkpoint_image(p.options, p.image.layout, "ck-1");
  REQUIRE_FALSE(pushed.ok());
  CHECK(pushed.error().errno_value == EFBIG);
  CHECK(pushed.error().message.find("more than 1048576 bytes") != std::string::npos);
  CHECK(offered < (64u << 20));   // the agent stopped reading long before the end (before: it read the whole GiB)
}

TEST_CASE("an answer that trickles is stopped at the request's deadline", "[unit]") {
  test::TempDir tmp;
  HostileRegistry registry;
  registry.http.Get(R"(/v2/.*/blobs/.*)", [&](const httplib::Request&, httplib::Response& res) { res.status = 404; });
  registry.http.Post(R"(/v2/.*/blobs/uploads/)", [&](const httplib::Request&, httplib::Response& res) {
    res.status = 202;
    res.set_header("Location", "/v2/upload/1");
    // One byte a second for 120 s: each read is quick, the answer never ends in time.
    res.set_content_provider(120, "text/plain", [&](std::size_t, std::size_t, httplib::DataSink& sink) {
      for (int i = 0; i < 10 && !registry.stop_trickling; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      return !registry.stop_trickling && sink.write("z", 1);
    });
  });
  registry.start();
  auto p = pushable(tmp.path, registry.port);
  p.options.timeout = std::chrono::seconds(2);
  auto pushed = node::push_checkpoint_image(p.options, p.image.layout, "ck-1");
  REQUIRE_FALSE(pushed.ok());
  CHECK(pushed.error().errno_value == ETIMEDOUT);
  CHECK(pushed.error().message.find("in time (image_registry.timeout_seconds") != std::string::npos);
  // The whole push has a deadline of its own, whatever each request's is.
  p.options.timeout = std::chrono::seconds(60);
  p.options.push_timeout = std::chrono::seconds(1);
  auto whole = node::push_checkpoint_image(p.options, p.image.layout, "ck-1");
  REQUIRE_FALSE(whole.ok());
  CHECK(whole.error().errno_value == ETIMEDOUT);
}

TEST_CASE("token_realm_host pins where credentials may go", "[unit]") {
  test::TempDir tmp;
  HostileRegistry registry;
  std::atomic<int> token_asks{0};
  registry.http.Get(R"(/v2/.*/blobs/.*)", [&](const httplib::Request&, httplib::Response& res) {
    res.status = 401;
    res.set_header("WWW-Authenticate",
                   "Bearer realm=\"http://127.0.0.1:" + std::to_string(registry.port) + "/token\",service=\"r\"");
  });
  registry.http.Get("/token", [&](const httplib::Request&, httplib::Response& res) {
    ++token_asks;
    res.set_content(R"({"token":"t"})", "application/json");
  });
  registry.start();
  auto p = pushable(tmp.path, registry.port);
  p.options.token_realm_host = "auth.example:443";
  auto pinned = node::push_checkpoint_image(p.options, p.image.layout, "ck-1");
  REQUIRE_FALSE(pinned.ok());
  CHECK(pinned.error().message.find("image_registry.token_realm_host (auth.example:443)") != std::string::npos);
  CHECK(token_asks == 0);
  p.options.token_realm_host = "127.0.0.1:" + std::to_string(registry.port);
  auto allowed = node::push_checkpoint_image(p.options, p.image.layout, "ck-1");
  CHECK_FALSE(allowed.ok());   // the registry keeps refusing; what matters is that the realm was asked
  CHECK(token_asks == 1);
}

TEST_CASE("registry answer parsers refuse what is not a token or a challenge", "[unit]") {
  CHECK(node::token_from_answer(R"({"token":"abc"})", "ts").value() == "abc");
  CHECK(node::token_from_answer(R"({"access_token":"abc"})", "ts").value() == "abc");
  CHECK_FALSE(node::token_from_answer(R"({"token":"a\nb"})", "ts").ok());
  CHECK_FALSE(node::token_from_answer(R"({"token":7})", "ts").ok());
  CHECK_FALSE(node::token_from_answer(std::string(50, '['), "ts").ok());
  const auto params = node::challenge_params(R"(realm="https://a/t",service=reg,scope="x\"y")");
  CHECK(params.at("realm") == "https://a/t");
  CHECK(params.at("service") == "reg");
  CHECK(params.at("scope") == "x\"y");
  const std::string text = node::registry_error_text(400, R"({"errors":[{"code":"X","message":"a\nforged"}]})", "");
  CHECK(text == "HTTP 400 X: a\\x0aforged");
}

TEST_CASE("a chunks' manifest page served without Docker-Content-Digest is refused, nothing pulled", "[unit]") {
  test::TempDir tmp;
  HostileRegistry registry;
  const std::string chunk(64, 'c');
  const auto digest = chunk_store::sha256(std::as_bytes(std::span(chunk.data(), chunk.size())));
  const std::string page = node::chunks_manifest({{digest, "sha256:" + std::string(64, 'b'), 96}},
                                                 "sha256:" + std::string(64, 'a'), 500, 1);
  std::atomic<int> blob_gets{0};
  registry.http.Get(R"(/v2/gpuckpt/ck/manifests/.*)", [&](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_content(page, "text/html");   // a web server's page, as a proxy in front of a registry might answer
  });
  registry.http.Get(R"(/v2/.*/blobs/.*)", [&](const httplib::Request&, httplib::Response& res) {
    ++blob_gets;
    res.status = 404;
  });
  registry.start();
  node::RegistryOptions options;
  options.repository = "127.0.0.1:" + std::to_string(registry.port) + "/gpuckpt/ck";
  options.plain_http = true;
  options.timeout = std::chrono::seconds(5);
  auto opened = chunk_store::Store::open(tmp.path / "store", true);
  REQUIRE(opened);
  auto pulled = node::pull_chunks(options, options.repository + ":ck-1", **opened);
  REQUIRE_FALSE(pulled.ok());
  CHECK(pulled.error().errno_value == EBADMSG);
  CHECK(pulled.error().message.find("without a Docker-Content-Digest") != std::string::npos);
  CHECK(blob_gets == 0);
}
