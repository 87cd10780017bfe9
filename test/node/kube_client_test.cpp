// The API server's (and the kubelet's) answers as a hostile or broken server gives them, from an in-process server
// on 127.0.0.1: a body without end, one over the bound, one that trickles a byte at a time, an error text with
// control characters. KubeClient keeps at most its bound of an answer and ends every call at its deadline, and the
// errors name the server and the bound; callers escape what the server said.
#include <catch2/catch_test_macros.hpp>

#include <httplib.h>

#include <chrono>
#include <string>

#include "node/kube_client.h"
#include "test/support/archive_builder.h"
#include "test/support/hostile_server.h"

using gpuckpt::node::KubeClient;
using gpuckpt::node::KubeEndpoint;
using Clock = std::chrono::steady_clock;
using HostileApiServer = gpuckpt::test::HostileServer;

namespace {

struct Token {
  gpuckpt::test::TempDir dir{"gpuckpt-kube-client"};
  std::string file = (dir.path / "token").string();
  Token() { gpuckpt::test::write_file(file, "a-service-account-token\n"); }
};

KubeEndpoint endpoint(const HostileApiServer& server, const Token& token) {
  KubeEndpoint e;
  e.url = server.url();
  e.token_file = token.file;
  e.ca_file = "";
  return e;
}

}  // namespace

TEST_CASE("an API server's answer over its bound is refused, naming the server and the bound, and not read on",
          "[unit]") {
  Token token;
  HostileApiServer server;
  server.http.Get(R"(/.*)", server.streaming(std::string(64 << 10, ' '), std::chrono::milliseconds(0)));   // endless
  server.start();
  const KubeClient client(endpoint(server, token), std::chrono::seconds(5), std::chrono::seconds(30));
  auto got = client.get("/api/v1/namespaces/default/pods/counter");
  REQUIRE_FALSE(got);
  CHECK(got.error().errno_value == EFBIG);
  CHECK(got.error().message.find("the Kubernetes API server at " + server.url()) != std::string::npos);
  CHECK(got.error().message.find("more than " + std::to_string(gpuckpt::node::kMaxKubeObjectBytes) + " bytes") !=
        std::string::npos);
  // It stopped reading at the bound: the server produced little more than the bound (and what the socket buffers
  // held), where before it read until memory ran out.
  CHECK(server.offered < 4 * gpuckpt::node::kMaxKubeObjectBytes + (8U << 20));
}

TEST_CASE("a list answer may be larger than one object, up to its own bound", "[unit]") {
  Token token;
  HostileApiServer server;
  const std::uint64_t pieces = 48;   // 3 MiB: over an object's bound, under a list's
  server.http.Get(R"(/.*)", server.streaming(std::string(64 << 10, 'x'), std::chrono::milliseconds(0), pieces));
  server.start();
  const KubeClient client(endpoint(server, token), std::chrono::seconds(5), std::chrono::seconds(30));
  auto pods = client.get("/pods", gpuckpt::node::kMaxKubeListBytes);
  REQUIRE(pods);
  CHECK(pods->status == 200);
  CHECK(pods->body.size() == pieces * (64 << 10));
  auto one = client.get("/pods");
  REQUIRE_FALSE(one);
  CHECK(one.error().errno_value == EFBIG);
}

TEST_CASE("an API server that trickles its answer is stopped at the call's deadline, naming the server", "[unit]") {
  Token token;
  HostileApiServer server;
  // A byte every 0.1 s: httplib's per-read timeout never fires.
  server.http.Patch(R"(/.*)", server.streaming(" ", std::chrono::milliseconds(100)));
  server.start();
  const KubeClient client(endpoint(server, token), std::chrono::seconds(5), std::chrono::seconds(1));
  const auto start = Clock::now();
  auto got = client.patch("/api/v1/nodes/node-a", "{}", "application/merge-patch+json");
  const auto took = Clock::now() - start;
  REQUIRE_FALSE(got);
  CHECK(got.error().errno_value == ETIMEDOUT);
  CHECK(got.error().message.find("the Kubernetes API server at " + server.url() +
                                 " did not finish answering PATCH /api/v1/nodes/node-a in time (1 s for the whole "
                                 "answer)") != std::string::npos);
  CHECK(took < std::chrono::seconds(3));   // before: as long as the server kept trickling
}

TEST_CASE("no answer at all says why, naming the server", "[unit]") {
  Token token;
  KubeEndpoint e;
  e.url = "http://127.0.0.1:1";   // tcpmux: nothing listens there
  e.token_file = token.file;
  e.ca_file = "";
  e.name = "the kubelet";
  auto got = KubeClient(e, std::chrono::seconds(2), std::chrono::seconds(2)).get("/pods");
  REQUIRE_FALSE(got);
  CHECK(got.error().errno_value == EIO);
  CHECK(got.error().message.find("cannot reach the kubelet at " + e.url + " (GET /pods): could not connect") !=
        std::string::npos);
}
