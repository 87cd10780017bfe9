// Kubernetes Events on pods (agent/pod_events.h): the Event objects as the API server takes them, the requests the
// recorder makes against a stand-in API server, and what it does when the API server is not there.
#include <catch2/catch_test_macros.hpp>

#include <future>
#include <mutex>
#include <regex>

#include "agent/pod_events.h"
#include "test/support/archive_builder.h"
#include "test/support/fake_kube_api.h"

using namespace gpuckpt;
using nlohmann::json;

namespace {

const auto kNow = std::chrono::system_clock::from_time_t(1795000000) + std::chrono::microseconds(123456);

node::JobStatus checkpoint_job(node::JobState state) {
  node::JobStatus job;
  job.id = "ck-20261118T110640Z-0badcafe";
  job.kind = node::JobKind::checkpoint;
  job.state = state;
  job.request = {{"namespace", "ml"}, {"pod", "trainer-0"}, {"container", "main"}};
  return job;
}

node::KubeEndpoint endpoint(const std::string& url, const test::TempDir& tmp) {
  test::write_file(tmp.path / "token", "sa-token\n");
  node::KubeEndpoint api;
  api.url = url;
  api.token_file = (tmp.path / "token").string();
  api.ca_file = "";
  return api;
}

double metric(const node::Metrics& metrics, const std::string& series) {
  const std::string text = metrics.render();
  const auto at = text.find("\n" + series + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + series.size() + 2));
}

}  // namespace

TEST_CASE("an event is a core/v1 Event on the pod, with the fields kubectl shows", "[unit]") {
  agent::PodEvent event{{"ml", "trainer-0", "5f0c3f9e-3b0e-4c59-9a57-2d8f3b1c0a11"}, false, "CheckpointSucceeded",
                        "Checkpoint", "container main checkpointed"};
  const json e = agent::core_v1_event(event, "gpu-node-1", kNow, 7);
  CHECK(e["apiVersion"] == "v1");
  CHECK(e["kind"] == "Event");
  CHECK(e["metadata"]["namespace"] == "ml");
  CHECK(std::regex_match(e["metadata"]["name"].get<std::string>(), std::regex(R"(trainer-0\.[0-9a-f]+)")));
  CHECK(e["involvedObject"] == json{{"apiVersion", "v1"}, {"kind", "Pod"}, {"namespace", "ml"}, {"name", "trainer-0"},
                                    {"uid", "5f0c3f9e-3b0e-4c59-9a57-2d8f3b1c0a11"}});
  CHECK(e["reason"] == "CheckpointSucceeded");
  CHECK(e["type"] == "Normal");
  CHECK(e["message"] == "container main checkpointed");
  CHECK(e["source"] == json{{"component", "gpuckpt-agent"}, {"host", "gpu-node-1"}});
  CHECK(e["count"] == 1);
  CHECK(e["firstTimestamp"] == "2026-11-18T11:06:40Z");
  CHECK(e["lastTimestamp"] == "2026-11-18T11:06:40Z");
  CHECK(e["eventTime"] == "2026-11-18T11:06:40.123456Z");
  // With eventTime set, the API server requires these (k8s core validation of events).
  CHECK(e["action"] == "Checkpoint");
  CHECK(e["reportingComponent"] == "gpuckpt.io/agent");
  CHECK(e["reportingInstance"] == "gpuckpt-agent-gpu-node-1");
  // Two events of one pod in the same instant still get two names.
  CHECK(agent::core_v1_event(event, "gpu-node-1", kNow, 8)["metadata"]["name"] != e["metadata"]["name"]);

  event.warning = true;
  event.pod.uid.clear();
  const json warning = agent::core_v1_event(event, "gpu-node-1", kNow, 9);
  CHECK(warning["type"] == "Warning");
  CHECK_FALSE(warning["involvedObject"].contains("uid"));
}

TEST_CASE("an event's message is printable and at most 1024 bytes; its name stays a valid object name", "[unit]") {
  agent::PodEvent event{{"ml", std::string(253, 'a'), ""}, true, "CheckpointFailed", "Checkpoint",
                        "failed: \x1b[31mred\xff" + std::string(5000, 'x')};
  const json e = agent::core_v1_event(event, "n", kNow, 1);
  const std::string message = e["message"];
  CHECK(message.size() == agent::kMaxEventMessageBytes);
  CHECK(message.rfind("failed: \\x1b[31mred\\xff", 0) == 0);
  CHECK(message.substr(message.size() - 3) == "...");
  const std::string name = e["metadata"]["name"];
  CHECK(name.size() <= 253);
  CHECK(std::regex_match(name, std::regex(R"([a-z0-9]([-a-z0-9.]*[a-z0-9])?)")));
  CHECK_NOTHROW(e.dump());   // valid UTF-8 whatever the message carried
}

TEST_CASE("a job's events: Started, Succeeded, Failed with the job's error, per kind", "[unit]") {
  auto started = agent::job_pod_event(node::JobStage::started, checkpoint_job(node::JobState::running), {"ml", "trainer-0", ""}, "n1");
  CHECK(started.reason == "CheckpointStarted");
  CHECK_FALSE(started.warning);
  CHECK(started.message == "checkpointing container main on node n1 (gpuckpt job ck-20261118T110640Z-0badcafe)");

  auto done = checkpoint_job(node::JobState::succeeded);
  done.result = {{"archive", "/var/lib/gpuckpt/checkpoints/ck-20261118T110640Z-0badcafe.tar.zst"},
                 {"archive_bytes", 4096}, {"used_gpu_ids", {"GPU-0", "GPU-1"}}};
  done.phase_seconds["total"] = 12.34;
  auto succeeded = agent::job_pod_event(node::JobStage::succeeded, done, {"ml", "trainer-0", ""}, "n1");
  CHECK(succeeded.reason == "CheckpointSucceeded");
  CHECK(succeeded.message == "container main checkpointed on node n1 to ck-20261118T110640Z-0badcafe.tar.zst (4096 "
                             "bytes, 2 GPU(s), 12.3 s; gpuckpt job ck-20261118T110640Z-0badcafe)");

  auto broken = checkpoint_job(node::JobState::failed);
  broken.error = "runc checkpoint: criu dump failed: cuda-checkpoint timed out";
  auto failed = agent::job_pod_event(node::JobStage::failed, broken, {"ml", "trainer-0", ""}, "n1");
  CHECK(failed.reason == "CheckpointFailed");
  CHECK(failed.warning);
  CHECK(failed.message.find(": runc checkpoint: criu dump failed: cuda-checkpoint timed out") != std::string::npos);

  node::JobStatus move;
  move.id = "tr-1";
  move.kind = node::JobKind::transfer;
  move.request = {{"archive", "/var/lib/gpuckpt/checkpoints/ck-1.tar.zst"}, {"to", "http://10.0.0.7:7469"}};
  move.error = "connection reset";
  auto migrate = agent::job_pod_event(node::JobStage::failed, move, {"ml", "trainer-0", ""}, "n1");
  CHECK(migrate.reason == "MigrateFailed");
  CHECK(migrate.action == "Migrate");
  CHECK(migrate.message == "moving checkpoint ck-1.tar.zst from node n1 to the agent at http://10.0.0.7:7469 failed "
                           "(gpuckpt job tr-1): connection reset");

  node::JobStatus restore;
  restore.id = "rs-1";
  restore.kind = node::JobKind::restore;
  restore.request = {{"archive", "ck-1.tar.zst"}};
  CHECK(agent::job_pod_event(node::JobStage::started, restore, {"ml", "trainer-0", ""}, "n2").reason ==
        "RestoreStarted");
  restore.kind = node::JobKind::image;
  CHECK(agent::job_pod_event(node::JobStage::succeeded, restore, {"ml", "trainer-0", ""}, "n2").reason ==
        "CheckpointImageSucceeded");
}

TEST_CASE("the pod of a checkpoint comes from its spec's CRI-O or containerd annotations, if they are names", "[unit]") {
  const json crio = {{"annotations",
                      {{"io.kubernetes.pod.namespace", "ml"}, {"io.kubernetes.pod.name", "trainer-0"},
                       {"io.kubernetes.pod.uid", "5f0c3f9e-3b0e-4c59-9a57-2d8f3b1c0a11"}}}};
  const auto from_crio = node::pod_of_checkpoint_spec(crio);
  CHECK(from_crio.namespace_name == "ml");
  CHECK(from_crio.name == "trainer-0");
  CHECK(from_crio.uid == "5f0c3f9e-3b0e-4c59-9a57-2d8f3b1c0a11");
  const json containerd = {{"annotations",
                            {{"io.kubernetes.cri.sandbox-namespace", "default"},
                             {"io.kubernetes.cri.sandbox-name", "gpuckpt-plain"},
                             {"io.kubernetes.cri.sandbox-uid", "not a uid"}}}};
  const auto from_containerd = node::pod_of_checkpoint_spec(containerd);
  CHECK(from_containerd.name == "gpuckpt-plain");
  CHECK(from_containerd.uid.empty());   // looked up instead
  CHECK(node::pod_of_checkpoint_spec({{"annotations", {{"io.container.manager", "libpod"}}}}).empty());
  CHECK(node::pod_of_checkpoint_spec(json::array()).empty());
  // A name that is no Kubernetes name never reaches an API path.
  CHECK(node::pod_of_checkpoint_spec({{"annotations", {{"io.kubernetes.pod.namespace", "ml/../kube-system"},
                                                       {"io.kubernetes.pod.name", "x"}}}}).empty());
  CHECK(node::pod_of_checkpoint_spec({{"annotations", {{"io.kubernetes.pod.namespace", "ml"},
                                                       {"io.kubernetes.pod.name", "x?watch=1"}}}}).empty());
}

TEST_CASE("the recorder posts each event to the pod's namespace with the token, in order, and counts it", "[unit]") {
  test::TempDir tmp;
  test::FakeKubeApi api;
  node::Metrics metrics;
  {
    agent::PodEventRecorder recorder(endpoint(api.url(), tmp), "gpu-node-1", node::EventsConfig{true, 16, 5}, metrics);
    recorder.record({{"ml", "trainer-0", "5f0c3f9e-3b0e-4c59-9a57-2d8f3b1c0a11"}, false, "CheckpointStarted",
                     "Checkpoint", "checkpointing"});
    recorder.record({{"batch", "gone-0", ""}, true, "CheckpointFailed", "Checkpoint", "failed"});
    recorder.record({{"ml", "Not_A_Pod", ""}, false, "CheckpointStarted", "Checkpoint", "never sent"});
  }   // the destructor posts what is queued first
  const auto requests = api.wait_for(2);
  REQUIRE(requests.size() == 2);
  for (const auto& r : requests) {
    CHECK(r.method == "POST");
    CHECK(r.content_type == "application/json");
    CHECK(r.authorization == "Bearer sa-token");
  }
  CHECK(requests[0].path == "/api/v1/namespaces/ml/events");
  CHECK(requests[1].path == "/api/v1/namespaces/batch/events");
  const auto first = json::parse(requests[0].body);
  CHECK(first["involvedObject"]["uid"] == "5f0c3f9e-3b0e-4c59-9a57-2d8f3b1c0a11");
  CHECK(first["reason"] == "CheckpointStarted");
  CHECK(first["source"]["host"] == "gpu-node-1");
  const auto second = json::parse(requests[1].body);
  CHECK_FALSE(second["involvedObject"].contains("uid"));
  CHECK(second["type"] == "Warning");
  CHECK(metric(metrics, "gpuckpt_pod_events_posted_total") == 2);
  CHECK(metric(metrics, "gpuckpt_pod_events_dropped_total{reason=\"api_error\"}") == 0);
}

TEST_CASE("an API server that refuses or is not there: events are dropped and counted, nothing waits", "[unit]") {
  test::TempDir tmp;
  node::Metrics metrics;
  SECTION("refused (RBAC)") {
    test::FakeKubeApi api;
    api.event_status = 403;
    {
      agent::PodEventRecorder recorder(endpoint(api.url(), tmp), "n", node::EventsConfig{true, 16, 5}, metrics);
      recorder.record({{"ml", "trainer-0", "5f0c3f9e-3b0e-4c59-9a57-2d8f3b1c0a11"}, false, "RestoreStarted",
                       "Restore", "restoring"});
    }   // the destructor posts what is queued first
    CHECK(api.wait_for(1).size() == 1);
    CHECK(metric(metrics, "gpuckpt_pod_events_dropped_total{reason=\"api_error\"}") == 1);
  }
  SECTION("nothing listens") {
    std::string url;
    {
      test::FakeKubeApi gone;
      url = gone.url();
    }
    {
      agent::PodEventRecorder recorder(endpoint(url, tmp), "n", node::EventsConfig{true, 16, 5}, metrics);
      for (int i = 0; i < 3; ++i) recorder.record({{"ml", "trainer-0", ""}, false, "RestoreStarted", "Restore", "x"});
    }
    CHECK(metric(metrics, "gpuckpt_pod_events_dropped_total{reason=\"api_error\"}") == 3);
    CHECK(metric(metrics, "gpuckpt_pod_events_posted_total") == 0);
  }
}

TEST_CASE("beyond events.queue_length, events are dropped at once and counted", "[unit]") {
  test::TempDir tmp;
  node::Metrics metrics;
  // A server that takes the connection and never answers holds the sender in its first post.
  httplib::Server silent;
  std::mutex hold;
  std::unique_lock held(hold);
  std::promise<void> reached;
  std::once_flag first;
  silent.Post(".*", [&](const httplib::Request&, httplib::Response& res) {
    std::call_once(first, [&] { reached.set_value(); });
    std::lock_guard wait(hold);
    res.status = 201;
  });
  const int port = silent.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { silent.listen_after_bind(); });
  {
    agent::PodEventRecorder recorder(endpoint("http://127.0.0.1:" + std::to_string(port), tmp), "n",
                                     node::EventsConfig{true, 2, 1}, metrics);
    const agent::PodEvent event{{"ml", "trainer-0", "5f0c3f9e"}, false, "RestoreStarted", "Restore", "x"};
    recorder.record(event);
    reached.get_future().wait();   // the first one is being posted; two fit in the queue, the fourth does not
    for (int i = 0; i < 3; ++i) recorder.record(event);
    CHECK(metric(metrics, "gpuckpt_pod_events_dropped_total{reason=\"queue_full\"}") == 1);
    held.unlock();
  }
  silent.stop();
  serving.join();
  // The held post timed out (1 s); the rest were posted or ran into the end of the drain: none is lost unaccounted.
  const double posted = metric(metrics, "gpuckpt_pod_events_posted_total");
  const double dropped = metric(metrics, "gpuckpt_pod_events_dropped_total{reason=\"api_error\"}") +
                         metric(metrics, "gpuckpt_pod_events_dropped_total{reason=\"shutdown\"}") +
                         metric(metrics, "gpuckpt_pod_events_dropped_total{reason=\"queue_full\"}");
  CHECK(posted + dropped == 4);
}
