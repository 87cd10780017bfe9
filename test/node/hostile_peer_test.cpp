// A transfer target that answers as an attacker would (an in-process server playing another agent's /v1/chunks
// and /v1/incoming): values of the wrong type ("present": "no", "message": 1), answers too large to hold, an error
// message of 60 KiB, an answer that trickles. The sending side's uploads run on several threads: each answer fails
// the transfer with an error naming what was wrong, and none ends the process (an exception leaving a thread would
// be std::terminate: this test binary would abort), holds more than a bounded answer, or outlives the job's deadline.
#include <catch2/catch_test_macros.hpp>

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <set>
#include <string>
#include <thread>

#include "gpumem/chunk_store.h"
#include "node/archive_transfer.h"
#include "node/chunk_transfer.h"
#include "node/service.h"
#include "test/support/hostile_server.h"
#include "test/support/store_checkpoint.h"
#include "test/support/temp_dir.h"

namespace cs = gpuckpt::chunk_store;
namespace fs = std::filesystem;
using gpuckpt::ArchiveLimits;
using gpuckpt::test::TempDir;
using Clock = std::chrono::steady_clock;

namespace {

// Another agent's /v1 routes, as an attacker answers them.
struct HostilePeer : gpuckpt::test::HostileServer {
  // Every route answers `status` with `body`.
  void answer_all(int status, const std::string& body) {
    const auto handler = [status, body](const httplib::Request&, httplib::Response& res) {
      res.status = status;
      res.set_content(body, "application/json");
    };
    http.Put(R"(/v1/.*)", handler);
    http.Post(R"(/v1/.*)", handler);
    http.Get(R"(/v1/.*)", handler);
  }
  // Every route answers 200 with an endless body: `piece` every `pause`.
  void endless(const std::string& piece, std::chrono::milliseconds pause) {
    const auto handler = streaming(piece, pause);
    http.Put(R"(/v1/.*)", handler);
    http.Post(R"(/v1/.*)", handler);
    http.Get(R"(/v1/.*)", handler);
  }
};

// A store holding a checkpoint's 4 distinct chunks, what upload_chunks sends.
struct Sender {
  TempDir dir{"gpuckpt-hostile-peer"};
  std::shared_ptr<cs::Store> store = gpuckpt::test::open_store(dir.path / "store");
  gpuckpt::test::StoreCheckpoint c = gpuckpt::test::store_checkpoint(store, dir.path);
  std::set<cs::Digest> digests;
  Sender() {
    auto named = gpuckpt::node::manifest_chunks(c.archive, ArchiveLimits{});
    REQUIRE(named);
    REQUIRE(named->size() == 4);
    digests = *named;
  }
  gpuckpt::Result<gpuckpt::node::ChunkUploadReport> upload(const std::string& url, Clock::duration budget,
                                                           const gpuckpt::node::RequestStop* stop = nullptr) {
    return gpuckpt::node::upload_chunks(url, "token", *store, digests, 4, Clock::now() + budget, {}, stop);
  }
};

}  // namespace

TEST_CASE("a transfer target answering values of the wrong type fails the transfer, naming it; the process stays",
          "[unit]") {
  Sender sender;
  struct Case {
    int status;
    std::string body;
    std::string says;
  };
  const std::vector<Case> cases = {
      {201, R"({"present": "no"})", "\"present\" of type string, not a boolean"},
      {201, R"({"present": 1})", "\"present\" of type"},
      {201, R"([true])", "no \"present\""},
      {201, "not json", "no \"present\""},
      {400, R"({"error": {"message": 1}})", "answered 400"},
      {400, R"({"error": "no"})", "answered 400"},
      {503, R"({"error": {"message": ["x"]}})", "answered 503"},
  };
  for (const auto& test : cases) {
    INFO(test.status << " " << test.body);
    HostilePeer peer;
    peer.answer_all(test.status, test.body);
    peer.start();
    auto sent = sender.upload(peer.url(), std::chrono::seconds(30));
    REQUIRE_FALSE(sent);
    CHECK(sent.error().message.find(peer.url()) != std::string::npos);
    CHECK(sent.error().message.find(test.says) != std::string::npos);
    CHECK(sent.error().message.find("internal error") == std::string::npos);
  }
  // The same hostile answers to the questions before and after the uploads.
  HostilePeer peer;
  peer.answer_all(200, R"({"missing": "all", "received_bytes": 0, "present": "yes", "archive": 7})");
  peer.start();
  auto missing = gpuckpt::node::ask_missing_chunks(peer.url(), "token", sender.digests, Clock::now() + std::chrono::seconds(30));
  REQUIRE_FALSE(missing);
  CHECK(missing.error().message.find("without \"missing\"") != std::string::npos);
  gpuckpt::node::PushOptions options;
  options.url = peer.url();
  auto pushed = gpuckpt::node::push_archive(sender.c.archive, options, [](std::uint64_t) {});
  REQUIRE_FALSE(pushed);
  CHECK(pushed.error().message.find("\"received_bytes\"") != std::string::npos);
}

TEST_CASE("a transfer target's error message reaches the job's error cut to a bound, escaped", "[unit]") {
  Sender sender;
  HostilePeer peer;
  // 60 KiB of message, with a line break and a quote an operator's log must not take as its own.
  peer.answer_all(400, nlohmann::json{{"error", {{"message", "refused\nlevel=error msg=\"forged\" " +
                                                                  std::string(60 << 10, 'x')}}}}.dump());
  peer.start();
  auto sent = sender.upload(peer.url(), std::chrono::seconds(30));
  REQUIRE_FALSE(sent);
  const std::string& why = sent.error().message;
  CHECK(why.size() < gpuckpt::node::kMaxPeerMessageChars + 512);
  CHECK(why.find('\n') == std::string::npos);
  CHECK(why.find("refused\\x0alevel=error") != std::string::npos);
}

TEST_CASE("a transfer target's endless or trickling answer is cut at its bound or at the job's deadline", "[unit]") {
  Sender sender;
  SECTION("endless: refused past kMaxPeerAnswerBytes") {
    HostilePeer peer;
    peer.endless(std::string(16 << 10, ' '), std::chrono::milliseconds(0));
    peer.start();
    auto sent = sender.upload(peer.url(), std::chrono::seconds(30));
    REQUIRE_FALSE(sent);
    CHECK(sent.error().errno_value == EFBIG);
    CHECK(sent.error().message.find("more than " + std::to_string(gpuckpt::node::kMaxPeerAnswerBytes)) !=
          std::string::npos);
    CHECK(peer.offered < (16u << 20));   // it stopped reading (before: it read until memory ran out)
  }
  SECTION("trickling: ended at the job's deadline") {
    HostilePeer peer;
    peer.endless(" ", std::chrono::milliseconds(200));
    peer.start();
    const auto start = Clock::now();
    auto sent = sender.upload(peer.url(), std::chrono::seconds(2));
    const auto took = Clock::now() - start;
    REQUIRE_FALSE(sent);
    CHECK(sent.error().errno_value == ETIMEDOUT);
    CHECK(sent.error().message.find("limits.job_timeout_seconds") != std::string::npos);
    CHECK(took < std::chrono::seconds(5));   // before: until the peer stopped (httplib's timeouts are per read)
  }
  SECTION("trickling: a push ended at the job's deadline") {
    HostilePeer peer;
    peer.endless(" ", std::chrono::milliseconds(200));
    peer.start();
    gpuckpt::node::PushOptions options;
    options.url = peer.url();
    options.deadline = Clock::now() + std::chrono::seconds(2);
    const auto push_start = Clock::now();
    auto pushed = gpuckpt::node::push_archive(sender.c.archive, options, [](std::uint64_t) {});
    REQUIRE_FALSE(pushed);
    CHECK(pushed.error().errno_value == ETIMEDOUT);
    CHECK(Clock::now() - push_start < std::chrono::seconds(5));
  }
}

TEST_CASE("a job's error is cut at 4 KiB, at a character's start, saying how much was cut", "[unit]") {
  CHECK(gpuckpt::node::capped_job_error("short") == "short");
  // 4095 ASCII bytes, then a 3-byte character straddling the bound: cut before it, never inside.
  const std::string text = std::string(4095, 'x') + "\xe2\x82\xac" + std::string(1 << 20, 'y');
  const std::string capped = gpuckpt::node::capped_job_error(text);
  CHECK(capped.size() < gpuckpt::node::kMaxJobErrorBytes + 64);
  CHECK(capped.starts_with(std::string(4095, 'x') + "... ("));
  CHECK(capped.ends_with(" more bytes cut)"));
  CHECK(capped.find(std::to_string(text.size() - 4095)) != std::string::npos);
  CHECK(nlohmann::json(capped).dump().size() > 4095);   // valid UTF-8: a job record can hold it
}

TEST_CASE("the agent's stop ends a transfer stalled on a trickling target at once, long before its deadline",
          "[unit]") {
  Sender sender;
  HostilePeer peer;
  peer.endless(" ", std::chrono::milliseconds(200));
  peer.start();
  gpuckpt::node::RequestStop stop;
  SECTION("chunk uploads, on their 4 streams") {
    std::thread stopper([&] {
      while (peer.offered == 0) std::this_thread::yield();   // the uploads are stalled in their answers
      stop.stop();
    });
    const auto start = Clock::now();
    auto sent = sender.upload(peer.url(), std::chrono::seconds(300), &stop);
    const auto took = Clock::now() - start;
    stopper.join();
    REQUIRE_FALSE(sent);
    CHECK(sent.error().errno_value == ETIMEDOUT);
    CHECK(sent.error().message.find("when the agent stopped its jobs (limits.shutdown_grace_seconds had passed)") !=
          std::string::npos);
    CHECK(took < std::chrono::seconds(5));   // the peer trickles for 300 s
  }
  SECTION("an archive push; one asked after the stop is not sent at all") {
    gpuckpt::node::PushOptions options;
    options.url = peer.url();
    options.deadline = Clock::now() + std::chrono::seconds(300);
    options.stop = &stop;
    std::thread stopper([&] {
      while (peer.offered == 0) std::this_thread::yield();
      stop.stop();
    });
    const auto start = Clock::now();
    auto pushed = gpuckpt::node::push_archive(sender.c.archive, options, [](std::uint64_t) {});
    stopper.join();
    REQUIRE_FALSE(pushed);
    CHECK(pushed.error().errno_value == ETIMEDOUT);
    CHECK(Clock::now() - start < std::chrono::seconds(5));
    const int asked = peer.asked;
    auto again = gpuckpt::node::push_archive(sender.c.archive, options, [](std::uint64_t) {});
    REQUIRE_FALSE(again);
    CHECK(again.error().message.find("when the agent stopped its jobs") != std::string::npos);
    CHECK(peer.asked == asked);   // no new request reached the peer
  }
}
