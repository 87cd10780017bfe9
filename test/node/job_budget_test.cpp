// An accepted job's time budget (limits.job_timeout_seconds) against the podman runtime the agent really runs,
// with a script standing in for podman: it answers `container inspect` and hangs in checkpoint, restore and pull
// with a child of its own, as a podman stuck in CRIU would. The runtime's own limit (runtime_timeout, 600 s) is
// far away: only the job's budget can end these jobs, and what it must leave behind is checked.
#include <catch2/catch_test_macros.hpp>

#include <signal.h>
#include <sys/stat.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include <httplib.h>

#include "node/service.h"
#include "test/support/archive_builder.h"

namespace fs = std::filesystem;
using namespace gpuckpt;
using nlohmann::json;

namespace {

// A process that is gone (or a zombie nobody reaped yet): nothing of it runs.
bool is_gone_now(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(status, line))
    if (line.rfind("State:", 0) == 0) return line.find('Z') != std::string::npos;
  return true;
}

// SIGKILL is delivered when the process next runs: on a loaded machine a killed grandchild can still show as
// running for a moment after the job ended, so "killed" means gone within a few seconds, not at once.
bool is_gone(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!is_gone_now(pid)) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return true;
}

pid_t read_pid(const fs::path& file) {
  std::ifstream in(file);
  pid_t pid = 0;
  in >> pid;
  return pid;
}

struct HangingPodman {
  test::TempDir tmp;
  fs::path script = tmp.path / "podman";
  std::unique_ptr<node::JobService> service;

  // `tweak` changes the configuration before the service starts.
  explicit HangingPodman(const std::function<void(node::AgentConfig&)>& tweak = {}) {
    // Each hanging call records its own pid and its child's, then waits on the child.
    test::write_file(script, "#!/bin/sh\n"
                             "case \"$1 $2\" in\n"
                             "  'container inspect')\n"
                             "    echo '[{\"Id\":\"abc123\",\"Name\":\"counter\",\"State\":{\"Status\":\"running\","
                             "\"Pid\":1}}]' ;;\n"
                             "  'container checkpoint'|'container restore'|'pull -q')\n"
                             "    sleep 300 &\n"
                             "    echo $! > " + (tmp.path / "child.pid").string() + "\n"
                             "    echo $$ > " + (tmp.path / "podman.pid").string() + "\n"
                             "    wait ;;\n"
                             "  *) exit 1 ;;\n"
                             "esac\n");
    fs::permissions(script, fs::perms::owner_all);
    node::AgentConfig config;
    config.state_dir = tmp.path / "state";
    config.checkpoint_dir = tmp.path / "checkpoints";
    config.kubelet_checkpoint_dir.clear();
    config.runtime_timeout = std::chrono::seconds(600);
    config.job_timeout = std::chrono::seconds(2);
    fs::create_directories(config.checkpoint_dir);
    if (tweak) tweak(config);
    PodmanOptions podman;
    podman.podman = script.string();
    podman.timeout = config.runtime_timeout;
    node::JobServiceDeps deps;
    deps.runtime = make_podman_runtime(podman);
    deps.inventory = [] { return Result<NodeInventory>(NodeInventory{}); };
    deps.device_numbers = [](const std::string& p) -> Result<std::pair<std::uint32_t, std::uint32_t>> {
      return make_error("no " + p);
    };
    service = std::make_unique<node::JobService>(config, deps);
  }

  // Waits for the job; checks that podman and its child were killed and that the job names the budget and phase.
  json finished(const std::string& id, const std::string& phase) {
    const auto accepted = std::chrono::steady_clock::now();
    service->wait_idle();
    // Far below the runtime's own 600 s and the child's 300 s: the job's 2 s ended it.
    CHECK(std::chrono::steady_clock::now() - accepted < std::chrono::seconds(120));
    auto job = service->job(id);
    REQUIRE(job);
    INFO(job->error);
    CHECK(job->state == node::JobState::failed);
    CHECK(job->error.find("the job ran out of time: limits.job_timeout_seconds (2 s) passed while " + phase) == 0);
    CHECK(job->error.find("timed out") != std::string::npos);
    const pid_t podman = read_pid(tmp.path / "podman.pid"), child = read_pid(tmp.path / "child.pid");
    REQUIRE(podman > 0);
    REQUIRE(child > 0);
    CHECK(is_gone(podman));
    CHECK(is_gone(child));
    return to_json(*job);
  }

  std::vector<std::string> checkpoint_files() const {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(tmp.path / "checkpoints")) names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

}  // namespace

TEST_CASE("a checkpoint job that outlives its budget is stopped: podman killed, no pipe, no partial archive",
          "[unit]") {
  HangingPodman p;
  // An archive of an earlier job in the same directory stays as it was.
  const fs::path earlier = test::make_archive(p.tmp.path / "checkpoints" / "earlier.tar.zst",
                                              test::podman_checkpoint_entries());
  const std::string before = test::read_file(earlier);
  auto id = p.service->start_checkpoint({"", "", "counter"});
  REQUIRE(id.ok());
  p.finished(id.value(), "checkpointing");
  CHECK(p.checkpoint_files() == std::vector<std::string>{"earlier.tar.zst"});
  CHECK(test::read_file(earlier) == before);
}

TEST_CASE("a restore job that outlives its budget is stopped; its archive is untouched", "[unit]") {
  HangingPodman p;
  const fs::path archive = test::make_archive(p.tmp.path / "checkpoints" / "ck.tar.zst",
                                              test::podman_checkpoint_entries());
  const std::string before = test::read_file(archive);
  auto id = p.service->start_restore({"ck.tar.zst", "restored", std::nullopt});
  INFO((id.ok() ? std::string() : id.error().message));
  REQUIRE(id.ok());
  p.finished(id.value(), "restoring");
  CHECK(p.checkpoint_files() == std::vector<std::string>{"ck.tar.zst"});   // the pipe is gone
  CHECK(test::read_file(archive) == before);
}

TEST_CASE("an image job that outlives its budget is stopped while podman pulls; no private link dir is left",
          "[unit]") {
  HangingPodman p;
  test::make_archive(p.tmp.path / "checkpoints" / "ck.tar.zst", test::podman_checkpoint_entries());
  auto id = p.service->start_image({"ck.tar.zst", "budget"});
  REQUIRE(id.ok());
  const json job = p.finished(id.value(), "loading-image");
  // No registry: the complete layout stays for the operator, as after any failed load, and the error says so.
  CHECK(job["error"].get<std::string>().find("is kept") != std::string::npos);
  // podman pulled through /tmp/gpuckpt-load-<random>/layout, a link to the layout: removed with podman killed.
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/tmp", ec))
    if (e.path().filename().string().rfind("gpuckpt-load-", 0) == 0)
      CHECK(fs::read_symlink(e.path() / "layout", ec).string().rfind(p.tmp.path.string(), 0) != 0);
}

TEST_CASE("chunk pulls from a trickling registry never hold the slots a checkpoint needs", "[unit]") {
  // A registry that answers one byte every 100 ms, for ever: each pull holds its slot until the registry's timeout.
  httplib::Server registry;
  std::atomic<bool> stopping{false};
  registry.Get(R"(/v2/.*)", [&](const httplib::Request&, httplib::Response& res) {
    res.status = 200;
    res.set_chunked_content_provider("application/json", [&](std::size_t, httplib::DataSink& sink) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      return !stopping && sink.write(" ", 1);
    });
  });
  const int port = registry.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { registry.listen_after_bind(); });
  while (!registry.is_running()) std::this_thread::yield();
  {
    HangingPodman p([&](node::AgentConfig& config) {
      config.max_concurrent_jobs = 2;
      config.gpu_memory.store = (config.state_dir / "chunks").string();
      config.image_registry.repository = "127.0.0.1:" + std::to_string(port) + "/gpuckpt/ck";
      config.image_registry.plain_http = true;
      config.image_registry.timeout = std::chrono::seconds(4);
      config.image_registry.push_timeout = std::chrono::seconds(4);
    });
    std::vector<std::string> pulls;
    for (int i = 0; i < 3; ++i) {
      auto pull = p.service->start_chunk_pull({"127.0.0.1:" + std::to_string(port) + "/gpuckpt/ck:ck-1"});
      REQUIRE(pull.ok());
      pulls.push_back(pull.value());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(300));   // the pulls hold what slots they get
    auto id = p.service->start_checkpoint({"", "", "counter"});
    REQUIRE(id.ok());
    // It runs at once (before: queued behind the pulls until its 2 s budget ran out, "passed while queued").
    p.finished(id.value(), "checkpointing");
    auto job = p.service->job(id.value());
    REQUIRE(job);
    CHECK(job->phase_seconds.at("queued") < 1.0);
    for (const auto& pull : pulls) {
      auto finished = p.service->job(pull);
      REQUIRE(finished);
      CHECK(finished->state == node::JobState::failed);
    }
  }
  stopping = true;
  registry.stop();
  serving.join();
}
