// The pod `kubectl gpuckpt migrate` creates from a checkpoint image (cli/target_pod.h): what is kept, what the
// server owns and is dropped, and inputs that are refused. The plugin test checks the same through the CLI.
#include <catch2/catch_test_macros.hpp>

#include <string>

#include <nlohmann/json.hpp>

#include "cli/target_pod.h"

using nlohmann::json;
using gpuckpt::cli::TargetPodOptions;
using gpuckpt::cli::target_pod;

namespace {

json source_pod() {
  return json::parse(R"({
    "apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "trainer-0", "namespace": "ml", "uid": "u", "resourceVersion": "7", "finalizers": ["x"],
                 "labels": {"app": "t", "controller-revision-hash": "h", "statefulset.kubernetes.io/pod-name": "trainer-0"}},
    "spec": {"nodeName": "a", "priorityClassName": "high", "priority": 1000, "preemptionPolicy": "PreemptLowerPriority",
             "ephemeralContainers": [{"name": "debug", "image": "busybox"}],
             "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {}},
                          "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}},
             "containers": [{"name": "main", "image": "m", "resources": {"limits": {"amd.com/gpu": "2"}}}]},
    "status": {"phase": "Running"}})");
}

TargetPodOptions options() { return {"b", "main", "localhost/gpuckpt-checkpoint:ck-1", ""}; }

}  // namespace

TEST_CASE("the target pod keeps the workload and drops what the server and controllers own", "[unit]") {
  auto pod = target_pod(source_pod(), options());
  REQUIRE(pod.ok());
  const json& p = pod.value();
  CHECK(p["metadata"]["name"] == "trainer-0-migrated");
  CHECK(p["metadata"]["labels"] == json{{"app", "t"}});   // the StatefulSet's claim labels are not copied
  CHECK_FALSE(p["metadata"].contains("finalizers"));
  CHECK_FALSE(p.contains("status"));
  CHECK(p["spec"]["nodeName"] == "b");
  CHECK(p["spec"]["priorityClassName"] == "high");   // admission recomputes priority from the class
  CHECK_FALSE(p["spec"].contains("priority"));
  CHECK_FALSE(p["spec"].contains("preemptionPolicy"));
  CHECK_FALSE(p["spec"].contains("ephemeralContainers"));   // cannot be set at creation
  CHECK(p["spec"]["affinity"] == json::parse(R"({"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": []}})"));
  CHECK(p["spec"]["containers"][0]["resources"]["limits"]["amd.com/gpu"] == "2");
  CHECK(p["spec"]["containers"][0]["image"] == "localhost/gpuckpt-checkpoint:ck-1");
}

TEST_CASE("the target pod's name: given, or derived and kept within 253 bytes", "[unit]") {
  auto named = options();
  named.name = "trainer-b";
  CHECK(target_pod(source_pod(), named)->at("metadata")["name"] == "trainer-b");
  auto long_source = source_pod();
  long_source["metadata"]["name"] = std::string(243, 'a') + "-" + std::string(9, 'b');
  const std::string derived = target_pod(long_source, options())->at("metadata")["name"];
  CHECK(derived.size() <= 253);
  CHECK(derived == std::string(243, 'a') + "-migrated");   // cut, no '-' left before the suffix's own
  CHECK(gpuckpt::cli::is_object_name(derived));
}

TEST_CASE("inputs that cannot make a pod are refused with the reason", "[unit]") {
  struct Case {
    json source;
    TargetPodOptions options;
    const char* says;
  };
  auto bad_name = options();
  bad_name.name = "Trainer_B";
  auto other_container = options();
  other_container.container = "sidecar";
  auto no_spec = source_pod();
  no_spec.erase("spec");
  auto odd_types = source_pod();
  odd_types["metadata"]["name"] = 7;
  for (const auto& c : {Case{json::array(), options(), "not a pod"},
                        Case{json{{"kind", "Deployment"}}, options(), "not a pod"},
                        Case{no_spec, options(), "spec.containers"},
                        Case{odd_types, options(), "metadata.name"},
                        Case{source_pod(), bad_name, "not a valid pod name"},
                        Case{source_pod(), other_container, "no container 'sidecar'"}}) {
    auto pod = target_pod(c.source, c.options);
    REQUIRE_FALSE(pod.ok());
    CHECK(pod.error().message.find(c.says) != std::string::npos);
  }
}

TEST_CASE("the labels the source's owner selects by are not copied where they would match: it would adopt the copy",
          "[unit]") {
  auto source = source_pod();
  source["metadata"]["labels"] = json{{"app", "t"}, {"tier", "gpu"}, {"team", "ml"}, {"pod-template-hash", "h"}};
  struct Case {
    const char* selector;
    json labels;
  };
  for (const auto& c : {
           // a bare ReplicaSet, a StatefulSet, a DaemonSet: a LabelSelector that matches the copy
           Case{R"({"matchLabels": {"app": "t"}})", json{{"tier", "gpu"}, {"team", "ml"}}},
           Case{R"({"matchLabels": {"app": "t"}, "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gpu"]}]})",
                json{{"team", "ml"}}},
           Case{R"({"matchExpressions": [{"key": "team", "operator": "Exists"}]})", json{{"app", "t"}, {"tier", "gpu"}}},
           // NotIn holds for a pod without the label: that label stays, the others the selector needs go
           Case{R"({"matchLabels": {"app": "t"}, "matchExpressions": [{"key": "team", "operator": "NotIn", "values": ["x"]}]})",
                json{{"tier", "gpu"}, {"team", "ml"}}},
           // a Deployment's ReplicaSet selects by pod-template-hash, which the copy never carries: all else stays
           Case{R"({"matchLabels": {"app": "t", "pod-template-hash": "h"}})", json{{"app", "t"}, {"tier", "gpu"}, {"team", "ml"}}},
           // a selector that does not match the copy anyway
           Case{R"({"matchLabels": {"app": "other"}})", json{{"app", "t"}, {"tier", "gpu"}, {"team", "ml"}}},
           Case{R"({"matchExpressions": [{"key": "team", "operator": "DoesNotExist"}]})", json{{"app", "t"}, {"tier", "gpu"}, {"team", "ml"}}},
           // a ReplicationController: a plain map
           Case{R"({"app": "t", "tier": "gpu"})", json{{"team", "ml"}}}}) {
    auto o = options();
    o.owner_selector = json::parse(c.selector);
    auto pod = target_pod(source, o);
    REQUIRE(pod.ok());
    CHECK(pod->at("metadata")["labels"] == c.labels);
  }
  auto none = options();
  none.no_labels = true;
  CHECK_FALSE(target_pod(source, none)->at("metadata").contains("labels"));
}

TEST_CASE("an owner's selector that matches the copy whatever it lacks, or is no selector, is refused", "[unit]") {
  for (const char* selector : {R"({})", R"({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]})", R"("app=t")",
                               R"({"matchLabels": ["app"]})", R"({"matchExpressions": [{"key": "app", "operator": "Near"}]})"}) {
    auto o = options();
    o.owner_selector = json::parse(selector);
    auto pod = target_pod(source_pod(), o);
    REQUIRE_FALSE(pod.ok());
    CHECK(pod.error().message.find("selector") != std::string::npos);
  }
}
