// runtime/oci_hooks_rules: hooks.d entries judged as containers' hooks library judges them (the rules CRI-O v1.36.3
// vendors: go.podman.io/common/pkg/hooks), and which runtimes on a node (fixture host roots) read which directories.
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include "runtime/oci_hooks_rules.h"

namespace fs = std::filesystem;
using namespace gpuckpt;

namespace {

const std::vector<std::string> kCrio = {};                          // CRI-O declares no extension stage
const std::vector<std::string> kPodman = {"precreate", "poststop"};  // libpod's

bool any_binary(const std::string&) { return true; }

std::optional<HooksEntryRejection> judge(const std::string& text, const std::vector<std::string>& extensions = kCrio) {
  return judge_hooks_entry(text, extensions, any_binary);
}

std::string entry(const std::string& stages, const std::string& when = R"({"always":true})") {
  return R"({"version":"1.0.0","hook":{"path":"/opt/gpuckpt/bin/gpuckpt-oci-hook","args":["gpuckpt-oci-hook"],"timeout":10},"when":)" +
         when + R"(,"stages":)" + stages + "}";
}

class Tree {
 public:
  Tree() {
    static std::atomic<int> counter{0};
    root_ = fs::temp_directory_path() / ("gpuckpt-hooks-rules-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  ~Tree() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  void write(const std::string& relative, const std::string& text) const {
    fs::create_directories((root_ / relative).parent_path());
    std::ofstream(root_ / relative, std::ios::binary) << text;
  }
  HostRoot host() const { return HostRoot(root_); }

 private:
  fs::path root_;
};

}  // namespace

TEST_CASE("the stages every runtime accepts are the OCI runtime-spec hooks, as the hooks library lists them", "[unit]") {
  CHECK(oci_hook_stages() == std::vector<std::string>{"prestart", "createRuntime", "createContainer", "startContainer",
                                                      "poststart", "poststop"});
  for (const auto& stage : oci_hook_stages()) {
    INFO(stage);
    CHECK_FALSE(judge(entry("[\"" + stage + "\"]")));
  }
}

TEST_CASE("precreate: CRI-O rejects it with the library's words, podman (which declares it) accepts it", "[unit]") {
  const auto precreate = entry(R"(["precreate"])", R"({"annotations":{"^io\\.gpuckpt\\.checkpoint-id$":".+"}})");
  const auto crio = judge(precreate, kCrio);
  REQUIRE(crio);
  CHECK(crio->reason == "unknown stage \"precreate\"");
  CHECK_FALSE(crio->missing_binary);
  CHECK_FALSE(judge(precreate, kPodman));
  // one unknown stage among known ones is enough; an empty list is valid
  CHECK(judge(entry(R"(["createRuntime","precreate"])"))->reason == "unknown stage \"precreate\"");
  CHECK(judge(entry(R"(["Poststop"])"))->reason == "unknown stage \"Poststop\"");   // stage names are exact
  CHECK_FALSE(judge(entry("[]")));
}

TEST_CASE("version, hook.path and stages are required; the binary must exist", "[unit]") {
  CHECK(judge(R"({"version":"2.0.0","hook":{"path":"/x"},"stages":["poststop"]})")->reason ==
        "unrecognized hook version: \"2.0.0\"");
  CHECK(judge(R"({"version":"1.0.0","hook":{},"stages":["poststop"]})")->reason == "missing required property: hook.path");
  CHECK(judge(R"({"version":"1.0.0","hook":{"path":"/x"}})")->reason == "missing required property: stages");
  CHECK(judge(R"({"version":"1.0.0","hook":{"path":"/x"},"stages":null})")->reason == "missing required property: stages");
  CHECK(judge("{not json")->reason.starts_with("version check"));
  CHECK(judge(R"(["poststop"])")->reason.starts_with("version check"));
  CHECK(judge(R"({"version":1})")->reason.starts_with("version check"));
  const auto missing = judge_hooks_entry(entry(R"(["poststop"])"), kCrio, [](const std::string& p) {
    return p != "/opt/gpuckpt/bin/gpuckpt-oci-hook";
  });
  REQUIRE(missing);
  CHECK(missing->missing_binary);
  CHECK(missing->reason == "hook.path /opt/gpuckpt/bin/gpuckpt-oci-hook does not exist");
}

TEST_CASE("fields that do not decode into the library's types reject the entry", "[unit]") {
  CHECK(judge(entry(R"("poststop")")).has_value());                                      // stages: a string
  CHECK(judge(entry(R"(["poststop"])", R"({"always":"yes"})")).has_value());             // always: not a bool
  CHECK(judge(entry(R"(["poststop"])", R"({"annotations":{"a":1}})")).has_value());      // annotation value: a number
  CHECK(judge(R"({"version":"1.0.0","hook":{"path":"/x","timeout":1.5},"stages":["poststop"]})").has_value());
  // Go matches field names case-insensitively: "Stages" is the stages
  CHECK(judge(R"({"version":"1.0.0","hook":{"path":"/x"},"Stages":["precreate"]})")->reason == "unknown stage \"precreate\"");
}

TEST_CASE("when's patterns must compile; RE2's inline flags are accepted", "[unit]") {
  CHECK(judge(entry(R"(["poststop"])", R"({"annotations":{"(":".+"}})"))->reason == "invalid annotation key \"(\"");
  CHECK(judge(entry(R"(["poststop"])", R"({"annotations":{"a":"[z-a]"}})"))->reason == "invalid annotation value \"[z-a]\"");
  CHECK(judge(entry(R"(["poststop"])", R"({"commands":["*x"]})"))->reason == "invalid command \"*x\"");
  CHECK_FALSE(judge(entry(R"(["poststop"])", R"({"annotations":{"(?i)^io\\.gpuckpt\\.":".*"},"commands":[".*/sh$"]})")));
}

TEST_CASE("the old 0.1.0 format (and no version): hook is the path, stage or stages but not both", "[unit]") {
  CHECK_FALSE(judge(R"({"hook":"/x","stage":["prestart"]})"));
  CHECK_FALSE(judge(R"({"version":"0.1.0","hook":"/x","stages":["poststop"],"cmds":["sh"]})"));
  CHECK(judge(R"({"hook":"/x","stage":["precreate"]})")->reason == "unknown stage \"precreate\"");
  CHECK_FALSE(judge(R"({"hook":"/x","stage":["precreate"]})", kPodman));
  CHECK(judge(R"({"hook":"/x","stage":["prestart"],"stages":["prestart"]})")->reason ==
        "0.1.0: cannot set both 'stage' and 'stages'");
  CHECK(judge(R"({"stage":["prestart"]})")->reason == "0.1.0: missing required property: hook");
  CHECK(judge(R"({"hook":"/x"})")->reason == "0.1.0: missing required property: stages");
  CHECK(judge(R"({"hook":"/x","stage":["prestart"],"cmd":["a"],"cmds":["b"]})")->reason ==
        "0.1.0: cannot set both 'cmd' and 'cmds'");
}

TEST_CASE("the node's hooks.d readers: CRI-O from its config, socket or binary, with its hooks_dir; podman", "[unit]") {
  SECTION("no runtime that reads hooks.d") {
    Tree t;
    t.write("etc/containerd/config.toml", "version = 2\n");
    CHECK(node_hooks_runtimes(t.host()).empty());
  }
  SECTION("CRI-O with no hooks_dir set: its default, /usr/share/containers/oci/hooks.d only") {
    Tree t;
    t.write("usr/local/bin/crio", "");
    const auto r = node_hooks_runtimes(t.host());
    REQUIRE(r.size() == 1);
    CHECK(r[0].name == "CRI-O");
    CHECK(r[0].evidence == "/usr/local/bin/crio");
    CHECK(r[0].dirs == std::vector<std::string>{"/usr/share/containers/oci/hooks.d"});
    CHECK(r[0].extension_stages.empty());
  }
  SECTION("CRI-O's socket alone is enough") {
    Tree t;
    t.write("run/crio/crio.sock", "");
    REQUIRE(node_hooks_runtimes(t.host()).size() == 1);
  }
  SECTION("hooks_dir from crio.conf, overridden by the last drop-in that sets it; podman beside it") {
    Tree t;
    t.write("etc/crio/crio.conf", "[crio.runtime]\nhooks_dir = [\"/etc/containers/oci/hooks.d\"]\n");
    t.write("etc/crio/crio.conf.d/10-hooks.conf", "[crio.runtime]\nhooks_dir = [\n  \"/a/hooks.d\",\n  '/b/hooks.d',\n]\n");
    t.write("etc/crio/crio.conf.d/20-other.conf", "[crio.runtime]\n# hooks_dir = [\"/commented/out\"]\nconmon = \"/usr/bin/conmon\"\n");
    t.write("usr/bin/podman", "");
    const auto r = node_hooks_runtimes(t.host());
    REQUIRE(r.size() == 2);
    CHECK(r[0].evidence == "/etc/crio");
    CHECK(r[0].dirs == std::vector<std::string>{"/a/hooks.d", "/b/hooks.d"});
    CHECK(r[0].dirs_source == "CRI-O's hooks_dir (/etc/crio/crio.conf.d/10-hooks.conf)");
    CHECK(r[1].name == "podman");
    CHECK(r[1].extension_stages == kPodman);
    CHECK(r[1].dirs == std::vector<std::string>{"/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d"});
  }
}
