#include <catch2/catch_test_macros.hpp>

#include "node/config.h"

using gpuckpt::node::load_config;
using gpuckpt::node::parse_config;

TEST_CASE("the shipped example configuration parses and equals the defaults", "[unit]") {
  auto example = load_config(std::string(GPUCKPT_SOURCE_DIR) + "/agent/config.example.yaml");
  REQUIRE(example.ok());
  auto defaults = parse_config("", "empty");
  REQUIRE(defaults.ok());
  CHECK(example->listen_address == defaults->listen_address);
  CHECK(example->listen_port == defaults->listen_port);
  CHECK(example->state_dir == defaults->state_dir);
  CHECK(example->checkpoint_dir == defaults->checkpoint_dir);
  CHECK(example->kubelet_checkpoint_dir == defaults->kubelet_checkpoint_dir);
  CHECK(example->runtime_kind == defaults->runtime_kind);
  CHECK(example->archive_limits.max_archive_bytes == defaults->archive_limits.max_archive_bytes);
  CHECK(example->max_request_bytes == defaults->max_request_bytes);
  CHECK(example->job_timeout == defaults->job_timeout);
  CHECK(example->shutdown_grace == defaults->shutdown_grace);
  CHECK(example->unreferenced_chunk_quota.bytes == defaults->unreferenced_chunk_quota.bytes);
  CHECK(example->unreferenced_chunk_quota.chunks == defaults->unreferenced_chunk_quota.chunks);
  CHECK(example->node_labels.enabled == false);
  CHECK(example->events.enabled == defaults->events.enabled);
  CHECK(example->events.queue_length == defaults->events.queue_length);
  CHECK(example->events.timeout_seconds == defaults->events.timeout_seconds);
  CHECK(example->kubernetes_api.endpoint.url == defaults->kubernetes_api.endpoint.url);
  CHECK(example->kubernetes_api.endpoint.token_file == defaults->kubernetes_api.endpoint.token_file);
  CHECK(example->kubernetes_api.endpoint.ca_file == defaults->kubernetes_api.endpoint.ca_file);
  CHECK(example->cri.endpoint == defaults->cri.endpoint);
  CHECK(example->cri.call_timeout_seconds == defaults->cri.call_timeout_seconds);
  CHECK(example->containerd.address == defaults->containerd.address);
  CHECK(example->containerd.namespace_name == defaults->containerd.namespace_name);
  CHECK(example->transfer.chunk_streams == defaults->transfer.chunk_streams);
  CHECK(example->gpu_memory.store == defaults->gpu_memory.store);
}

TEST_CASE("runtime sections: cri and containerd are read; crictl is gone with a fix-it message", "[unit]") {
  auto c = parse_config(R"(
runtime: {kind: containerd, cri: {endpoint: unix:///run/crio/crio.sock, call_timeout_seconds: 7},
          containerd: {address: /run/k3s/containerd/containerd.sock, namespace: custom}}
)", "test.yaml");
  REQUIRE(c.ok());
  CHECK(c->runtime_kind == "containerd");
  CHECK(c->cri.endpoint == "unix:///run/crio/crio.sock");
  CHECK(c->cri.call_timeout_seconds == 7);
  CHECK(c->containerd.address == "/run/k3s/containerd/containerd.sock");
  CHECK(c->containerd.namespace_name == "custom");
  auto old = parse_config("runtime: {kind: crictl}", "old.yaml");
  REQUIRE_FALSE(old.ok());
  CHECK(old.error().message.find("runtime.kind: cri") != std::string::npos);
  CHECK_FALSE(parse_config("runtime: {crictl_path: /usr/bin/crictl}", "old.yaml").ok());
  CHECK_FALSE(parse_config("runtime: {cri: {call_timeout_seconds: 0}}", "bad.yaml").ok());
}

TEST_CASE("configuration values are read, nulls keep defaults", "[unit]") {
  auto c = parse_config(R"(
listen: {address: 0.0.0.0, port: 9000}
state_dir: /srv/state
checkpoints: {dir: /srv/ck, max_archive_bytes: 1024, watch_interval_seconds: null}
match_policy: {check_firmware: false}
limits: {max_request_bytes: 100, job_timeout_seconds: 900, shutdown_grace_seconds: 0}
)", "test.yaml");
  REQUIRE(c.ok());
  CHECK(c->listen_address == "0.0.0.0");
  CHECK(c->listen_port == 9000);
  CHECK(c->state_dir == "/srv/state");
  CHECK(c->checkpoint_dir == "/srv/ck");
  CHECK(c->archive_limits.max_archive_bytes == 1024);
  CHECK(c->watch_interval_seconds == 5);
  CHECK_FALSE(c->match_policy.check_firmware);
  CHECK(c->match_policy.check_model);
  CHECK(c->max_request_bytes == 100);
  CHECK(c->job_timeout == std::chrono::seconds(900));
  CHECK(c->shutdown_grace == std::chrono::seconds(0));
  CHECK(parse_config("", "a")->shutdown_grace == std::chrono::seconds(30));
}

TEST_CASE("configuration mistakes are errors naming the key", "[unit]") {
  auto typo = parse_config("listen: {adress: 1.2.3.4}", "agent.yaml");
  REQUIRE_FALSE(typo.ok());
  CHECK(typo.error().message.find("listen.adress") != std::string::npos);
  CHECK(typo.error().message.find("agent.yaml") != std::string::npos);
  auto type = parse_config("listen: {port: eighty}", "agent.yaml");
  REQUIRE_FALSE(type.ok());
  CHECK(type.error().message.find("listen.port") != std::string::npos);
  auto docker = parse_config("runtime: {kind: docker}", "a");
  REQUIRE_FALSE(docker.ok());
  CHECK(docker.error().message.find("runtime.kind 'docker' is not one of podman, containerd, cri, kubelet") != std::string::npos);
  for (const auto& kind : gpuckpt::node::kRuntimeKinds)
    CHECK(parse_config("runtime: {kind: " + std::string(kind.name) + "}", "a").ok());
  CHECK_FALSE(parse_config("state_dir: relative/dir", "a").ok());
  CHECK_FALSE(parse_config("log_level: loud", "a").ok());
  CHECK_FALSE(parse_config("version: 2", "a").ok());
  CHECK_FALSE(parse_config("[1, 2]", "a").ok());
  CHECK_FALSE(parse_config("listen: [1]", "a").ok());
  auto quota = parse_config("limits: {unreferenced_chunk_bytes: 1000000000, unreferenced_chunks: 500}", "a");
  REQUIRE(quota);
  CHECK(quota->unreferenced_chunk_quota.bytes == 1000000000);
  CHECK(quota->unreferenced_chunk_quota.chunks == 500);
  auto tiny_quota = parse_config("limits: {unreferenced_chunk_bytes: 1000}", "a");
  REQUIRE(!tiny_quota);
  CHECK(tiny_quota.error().message.find("limits.unreferenced_chunk_bytes") != std::string::npos);
  auto no_budget = parse_config("limits: {job_timeout_seconds: 0}", "a");
  REQUIRE_FALSE(no_budget.ok());
  CHECK(no_budget.error().message.find("limits.job_timeout_seconds") != std::string::npos);
  auto negative_grace = parse_config("limits: {shutdown_grace_seconds: -1}", "a");
  REQUIRE_FALSE(negative_grace.ok());
  CHECK(negative_grace.error().message.find("limits.shutdown_grace_seconds must be >= 0") != std::string::npos);
  CHECK_FALSE(load_config("/nonexistent/agent.yaml").ok());
}

TEST_CASE("transfer.chunk_streams: 4 by default, 1 to 8, else an error naming it", "[unit]") {
  auto defaults = parse_config("", "a");
  REQUIRE(defaults.ok());
  CHECK(defaults->transfer.chunk_streams == 4);
  auto set = parse_config("transfer: {chunk_streams: 8}", "a");
  REQUIRE(set.ok());
  CHECK(set->transfer.chunk_streams == 8);
  for (const char* bad : {"0", "9", "-1"}) {
    auto refused = parse_config(std::string("transfer: {chunk_streams: ") + bad + "}", "agent.yaml");
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message.find("transfer.chunk_streams") != std::string::npos);
    CHECK(refused.error().message.find("1 to 8") != std::string::npos);
  }
}

TEST_CASE("retention: limits unset by default; parsed; bad values name the section", "[unit]") {
  auto none = parse_config("version: 1", "test.yaml");
  REQUIRE(none.ok());
  CHECK_FALSE(none->retention.keep_count);
  CHECK_FALSE(none->retention.max_age_hours);
  CHECK_FALSE(none->retention.max_bytes);
  CHECK(none->retention.gc_grace_seconds == 3600);
  auto c = parse_config("retention: {keep_count: 2, max_age_hours: 48, max_bytes: 107374182400, include_newest: true, "
                        "interval_seconds: 600, gc_grace_seconds: 7200}", "test.yaml");
  REQUIRE(c.ok());
  CHECK(*c->retention.keep_count == 2);
  CHECK(*c->retention.max_age_hours == 48);
  CHECK(*c->retention.max_bytes == 107374182400ULL);
  CHECK(c->retention.include_newest);
  CHECK(c->retention.interval_seconds == 600);
  CHECK(c->retention.gc_grace_seconds == 7200);
  for (const char* bad : {"retention: {keep_count: -1}", "retention: {gc_grace_seconds: 5}", "retention: {max_age_hours: 0}"}) {
    auto refused = parse_config(bad, "test.yaml");
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message.find("test.yaml: retention:") == 0);
  }
  auto unknown = parse_config("retention: {keep: 2}", "test.yaml");
  REQUIRE_FALSE(unknown.ok());
}

TEST_CASE("gpu_memory settings become the plugin's environment; bad values name the key", "[unit]") {
  using Env = std::vector<std::pair<std::string, std::string>>;
  // Unset keys leave the plugin's defaults, but for the store: the node's chunk store unless set, passed on always
  // (the plugin's own default, for a node without an agent, is inline).
  for (const char* unset : {"", "gpu_memory: {threads: null}", "gpu_memory: {store: null}"}) {
    auto none = parse_config(unset, "test.yaml");
    REQUIRE(none.ok());
    CHECK(none->gpu_memory.store == "node");
    CHECK(gpuckpt::node::plugin_environment(none->gpu_memory) == Env{{"GPUCKPT_GPU_STORE", "node"}});
  }
  auto self_contained = parse_config("gpu_memory: {store: inline}", "test.yaml");
  REQUIRE(self_contained.ok());
  CHECK(gpuckpt::node::plugin_environment(self_contained->gpu_memory) == Env{{"GPUCKPT_GPU_STORE", "inline"}});
  auto c = parse_config("gpu_memory: {image: false, threads: 8, compression: 'zstd:3', sparse: false, store: node, "
                        "huge_pages: false, map_chunks: false, recognise_unchanged: false, cpu_pages: false}",
                        "test.yaml");
  REQUIRE(c.ok());
  CHECK(c->gpu_memory.huge_pages == false);
  CHECK(c->gpu_memory.map_chunks == false);
  CHECK(c->gpu_memory.recognise_unchanged == false);
  CHECK(gpuckpt::node::plugin_environment(c->gpu_memory) ==
        Env{{"GPUCKPT_CUDA_MEMORY_IMAGE", "0"}, {"GPUCKPT_IMAGE_THREADS", "8"},
            {"GPUCKPT_IMAGE_COMPRESSION", "zstd:3"}, {"GPUCKPT_IMAGE_SPARSE", "0"}, {"GPUCKPT_GPU_STORE", "node"},
            {"GPUCKPT_STAGING_HUGE_PAGES", "0"}, {"GPUCKPT_STAGING_MAP_CHUNKS", "0"},
            {"GPUCKPT_STORE_RECOGNISE_UNCHANGED", "0"}, {"GPUCKPT_CPU_PAGES_STORE", "0"}});
  // Each switch alone: only the key that is set reaches the plugin (with the store), true as 1.
  auto huge = parse_config("gpu_memory: {huge_pages: true}", "test.yaml");
  REQUIRE(huge.ok());
  CHECK(gpuckpt::node::plugin_environment(huge->gpu_memory) == Env{{"GPUCKPT_GPU_STORE", "node"}, {"GPUCKPT_STAGING_HUGE_PAGES", "1"}});
  auto map = parse_config("gpu_memory: {map_chunks: true}", "test.yaml");
  REQUIRE(map.ok());
  CHECK(gpuckpt::node::plugin_environment(map->gpu_memory) == Env{{"GPUCKPT_GPU_STORE", "node"}, {"GPUCKPT_STAGING_MAP_CHUNKS", "1"}});
  auto recognise = parse_config("gpu_memory: {recognise_unchanged: true}", "test.yaml");
  REQUIRE(recognise.ok());
  CHECK(gpuckpt::node::plugin_environment(recognise->gpu_memory) ==
        Env{{"GPUCKPT_GPU_STORE", "node"}, {"GPUCKPT_STORE_RECOGNISE_UNCHANGED", "1"}});
  for (const char* key : {"huge_pages", "map_chunks", "recognise_unchanged", "cpu_pages"}) {
    auto not_bool = parse_config(std::string("gpu_memory: {") + key + ": sometimes}", "test.yaml");
    REQUIRE_FALSE(not_bool.ok());
    CHECK(not_bool.error().message == std::string("test.yaml: 'gpu_memory.") + key + "' has the wrong type");
  }
  // The plugin's 0/1 spelling is not a boolean in the agent's config: refused, not read as true or false.
  auto numeric = parse_config("gpu_memory: {recognise_unchanged: 0}", "test.yaml");
  REQUIRE_FALSE(numeric.ok());
  CHECK(numeric.error().message == "test.yaml: 'gpu_memory.recognise_unchanged' has the wrong type");
  auto store = parse_config("gpu_memory: {store: 'nfs/chunks'}", "test.yaml");
  REQUIRE_FALSE(store.ok());
  CHECK(store.error().message.find("test.yaml: gpu_memory.store='nfs/chunks'") == 0);
  auto bad = parse_config("gpu_memory: {compression: gzip}", "test.yaml");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.error().message.find("test.yaml: gpu_memory.compression='gzip'") == 0);
  auto threads = parse_config("gpu_memory: {threads: 1000}", "test.yaml");
  REQUIRE_FALSE(threads.ok());
  CHECK(threads.error().message.find("gpu_memory.threads 1000") != std::string::npos);
  auto example = load_config(std::string(GPUCKPT_SOURCE_DIR) + "/agent/config.example.yaml");
  REQUIRE(example.ok());
  CHECK(gpuckpt::node::plugin_environment(example->gpu_memory).size() == 9);
}

TEST_CASE("image_registry: read when set, a malformed repository or timeout names the key", "[unit]") {
  auto none = parse_config("", "test.yaml");
  REQUIRE(none.ok());
  CHECK(none->image_registry.repository.empty());   // no push by default
  auto c = parse_config("image_registry: {repository: 'registry.example:5000/ml/ck', credentials_file: /etc/r, "
                        "plain_http: true, timeout_seconds: 90}", "test.yaml");
  REQUIRE(c.ok());
  CHECK(c->image_registry.repository == "registry.example:5000/ml/ck");
  CHECK(c->image_registry.credentials_file == "/etc/r");
  CHECK(c->image_registry.plain_http);
  CHECK(c->image_registry.timeout.count() == 90);
  auto upper = parse_config("image_registry: {repository: registry.example/ML}", "test.yaml");
  REQUIRE_FALSE(upper.ok());
  CHECK(upper.error().message.find("test.yaml: image_registry.repository: path component 'ML'") == 0);
  auto no_path = parse_config("image_registry: {repository: registry.example}", "test.yaml");
  REQUIRE_FALSE(no_path.ok());
  CHECK(no_path.error().message.find("is not HOST[:PORT]/PATH") != std::string::npos);
  auto timeout = parse_config("image_registry: {repository: r.example/x, timeout_seconds: 0}", "test.yaml");
  REQUIRE_FALSE(timeout.ok());
  CHECK(timeout.error().message.find("image_registry.timeout_seconds must be positive") != std::string::npos);
  CHECK(none->image_registry.chunk_streams == 4);
  auto streams = parse_config("image_registry: {repository: r.example/x, chunk_streams: 12}", "test.yaml");
  REQUIRE(streams.ok());
  CHECK(streams->image_registry.chunk_streams == 12);
  for (const char* bad : {"0", "33"}) {
    auto refused = parse_config(std::string("image_registry: {chunk_streams: ") + bad + "}", "test.yaml");
    REQUIRE_FALSE(refused.ok());
    CHECK(refused.error().message.find("image_registry.chunk_streams must be 1 to 32") != std::string::npos);
  }
  auto example = load_config(std::string(GPUCKPT_SOURCE_DIR) + "/agent/config.example.yaml");
  REQUIRE(example.ok());
  CHECK(example->image_registry.repository.empty());
}

TEST_CASE("events and kubernetes_api: read when set; bounds and the keys that moved are named", "[unit]") {
  auto c = parse_config(R"(
events: {enabled: true, queue_length: 32, timeout_seconds: 2}
kubernetes_api: {server: "https://10.0.0.1:6443", token_file: /t, ca_file: /c, node_name: gpu-7}
)", "test.yaml");
  REQUIRE(c.ok());
  CHECK(c->events.enabled);
  CHECK(c->events.queue_length == 32);
  CHECK(c->events.timeout_seconds == 2);
  CHECK(c->kubernetes_api.endpoint.url == "https://10.0.0.1:6443");
  CHECK(c->kubernetes_api.endpoint.token_file == "/t");
  CHECK(c->kubernetes_api.endpoint.ca_file == "/c");
  CHECK(gpuckpt::node::node_name(c.value()) == "gpu-7");
  auto unbounded = parse_config("events: {queue_length: 0}", "test.yaml");
  REQUIRE_FALSE(unbounded.ok());
  CHECK(unbounded.error().message.find("events.queue_length") != std::string::npos);
  auto moved = parse_config("node_labels: {api_server: https://x}", "test.yaml");
  REQUIRE_FALSE(moved.ok());
  CHECK(moved.error().message.find("node_labels.api_server") != std::string::npos);
}
