// runtime/node_report: the node checks behind `gpuckpt doctor` and GET /v1/node, over host trees built per case
// (HostRoot seam) and a fake CRIU. The real CRIU path runs in test/cli/doctor_e2e_test.sh.
#include <archive.h>
#include <archive_entry.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "runtime/node_report.h"

namespace fs = std::filesystem;
using namespace gpuckpt;

namespace {

class FakeCriu final : public CriuProbe {
 public:
  std::string version_text = "4.1.1";
  std::string load_error;   // non-empty: loads_plugin fails with it
  mutable std::vector<fs::path> probed;
  Result<std::string> version() const override {
    if (version_text.empty()) return make_error("criu: not found in PATH");
    return version_text;
  }
  Result<void> loads_plugin(const fs::path& plugin) const override {
    probed.push_back(plugin);
    if (!load_error.empty()) return make_error(load_error);
    return {};
  }
};

class Tree {
 public:
  Tree() {
    static std::atomic<int> counter{0};
    root_ = fs::temp_directory_path() / ("gpuckpt-node-report-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
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
  void write_gzip(const std::string& relative, const std::string& text) const {
    fs::create_directories((root_ / relative).parent_path());
    archive* a = archive_write_new();
    archive_write_add_filter_gzip(a);
    archive_write_set_format_raw(a);
    REQUIRE(archive_write_open_filename(a, (root_ / relative).c_str()) == ARCHIVE_OK);
    archive_entry* e = archive_entry_new();
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_size(e, static_cast<la_int64_t>(text.size()));
    archive_write_header(a, e);
    archive_write_data(a, text.data(), text.size());
    archive_entry_free(e);
    archive_write_close(a);
    archive_write_free(a);
  }
  const fs::path& root() const { return root_; }

 private:
  fs::path root_;
};

// A node where everything is in order.
void healthy_node(const Tree& t) {
  t.write("usr/lib/criu/gpuckpt_plugin.so", "plugin");
  t.write("opt/gpuckpt/bin/gpuckpt-oci-hook", "hook");
  t.write("usr/share/containers/oci/hooks.d/gpuckpt-hook.json",
          R"({"version":"1.0.0","hook":{"path":"/opt/gpuckpt/bin/gpuckpt-oci-hook"},"when":{"always":true},"stages":["createRuntime"]})");
  t.write("etc/crio/crio.conf", "[crio.runtime]\nhooks_dir = [\"/etc/containers/oci/hooks.d\"]\n");
  t.write("etc/crio/crio.conf.d/10-hooks.conf",
          "[crio.runtime]\nhooks_dir = [\n  \"/usr/share/containers/oci/hooks.d\",\n  \"/etc/containers/oci/hooks.d\",\n]\n");
  t.write("proc/driver/nvidia/version",
          "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release Build  (dvs-builder@U22)\n"
          "GCC version:  gcc version 12.3.0\n");
  t.write_gzip("proc/config.gz", "#\n# Linux/x86 6.18.0 Kernel Configuration\nCONFIG_CHECKPOINT_RESTORE=y\n"
                                 "CONFIG_USERFAULTFD=y\nCONFIG_MEM_SOFT_DIRTY=y\n");
  t.write("sys/kernel/mm/transparent_hugepage/enabled", "[always] madvise never\n");
  fs::create_directories(t.root() / "var/lib/gpuckpt/checkpoints");
}

NodeReportOptions options_for(const Tree& t, const CriuProbe* criu) {
  NodeReportOptions o;
  o.system = HostRoot(t.root());
  o.files = HostRoot(t.root());
  o.criu = criu;
  return o;
}

std::map<std::string, NodeCheck> by_name(const std::vector<NodeCheck>& checks) {
  std::map<std::string, NodeCheck> out;
  for (const auto& c : checks) out.emplace(c.name, c);
  return out;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("a node where GPU checkpoints work passes every check", "[unit]") {
  Tree t;
  healthy_node(t);
  FakeCriu criu;
  const auto checks = check_node(options_for(t, &criu));
  for (const auto& c : checks) {
    INFO(c.name << ": " << c.detail << " / " << c.fix);
    CHECK(c.status == CheckStatus::Pass);
    CHECK(c.fix.empty());
  }
  const auto c = by_name(checks);
  for (const char* name : {"criu", "criu-plugin", "other-gpu-plugins", "oci-hook", "runtime-hooks-dir", "hooks-d-entries", "gpu-driver",
                           "kernel-checkpoint-restore", "kernel-userfaultfd", "kernel-soft-dirty", "thp", "selinux",
                           "archive-space"})
    CHECK(c.count(name) == 1);
  CHECK(has(c.at("criu").detail, "4.1.1"));
  REQUIRE(criu.probed.size() == 1);
  CHECK(criu.probed[0] == t.root() / "usr/lib/criu/gpuckpt_plugin.so");   // the installed file, through the seam
  CHECK(has(c.at("gpu-driver").detail, "580.159.04"));
  CHECK(has(c.at("kernel-checkpoint-restore").detail, "/proc/config.gz"));
  CHECK(has(c.at("runtime-hooks-dir").detail,
            "CRI-O's hooks_dir (/etc/crio/crio.conf.d/10-hooks.conf) includes /usr/share/containers/oci/hooks.d"));
  CHECK(has(c.at("hooks-d-entries").detail, "1 hooks.d entry accepted by CRI-O (/etc/crio)"));
  const auto json = to_json(checks);
  CHECK(json["status"] == "pass");
  CHECK(json["checks"].size() == checks.size());
}

TEST_CASE("each problem fails or warns with its fix", "[unit]") {
  Tree t;
  healthy_node(t);
  t.write("usr/lib/criu/cuda_plugin.so", "upstream");   // CRIU's own CUDA plugin beside ours
  t.write("usr/lib/criu/inotify_plugin.so", "other");
  fs::remove(t.root() / "opt/gpuckpt/bin/gpuckpt-oci-hook");   // entry without its binary
  t.write("etc/crio/crio.conf.d/10-hooks.conf", "[crio.runtime]\nhooks_dir = [\"/etc/containers/oci/hooks.d\"]\n");
  t.write("proc/driver/nvidia/version", "NVRM version: NVIDIA UNIX x86_64 Kernel Module  535.104.05  Sat Aug 19\n");
  fs::remove(t.root() / "proc/config.gz");
  t.write("proc/sys/kernel/osrelease", "6.1.0-28-amd64\n");
  t.write("boot/config-6.1.0-28-amd64", "CONFIG_USERFAULTFD=y\n# CONFIG_CHECKPOINT_RESTORE is not set\n");
  t.write("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n");
  t.write("sys/fs/selinux/enforce", "1");
  fs::remove_all(t.root() / "var/lib/gpuckpt");
  FakeCriu criu;
  criu.version_text = "3.17.1";
  const auto c = by_name(check_node(options_for(t, &criu)));
  CHECK(c.at("criu").status == CheckStatus::Fail);
  CHECK(has(c.at("criu").detail, "3.17.1 is older than 4.0"));
  CHECK(criu.probed.empty());   // an old CRIU is not asked to load the plugin
  CHECK(c.at("other-gpu-plugins").status == CheckStatus::Fail);
  CHECK(has(c.at("other-gpu-plugins").detail, "cuda_plugin.so"));
  CHECK_FALSE(has(c.at("other-gpu-plugins").detail, "inotify"));
  CHECK(has(c.at("other-gpu-plugins").fix, "installer.otherGpuPlugins=disable"));
  CHECK(c.at("oci-hook").status == CheckStatus::Fail);
  CHECK(has(c.at("oci-hook").detail, "/opt/gpuckpt/bin/gpuckpt-oci-hook, which is missing"));
  CHECK(c.at("runtime-hooks-dir").status == CheckStatus::Fail);   // the drop-in (read last) wins over crio.conf
  CHECK(has(c.at("runtime-hooks-dir").fix, "add /usr/share/containers/oci/hooks.d to hooks_dir"));
  CHECK(c.at("gpu-driver").status == CheckStatus::Fail);
  CHECK(has(c.at("gpu-driver").detail, "535.104.05"));
  CHECK(c.at("kernel-checkpoint-restore").status == CheckStatus::Fail);
  CHECK(has(c.at("kernel-checkpoint-restore").detail, "/boot/config-6.1.0-28-amd64"));
  CHECK(c.at("kernel-userfaultfd").status == CheckStatus::Pass);
  CHECK(c.at("kernel-soft-dirty").status == CheckStatus::Warn);
  CHECK(c.at("thp").status == CheckStatus::Warn);
  CHECK(has(c.at("thp").detail, "madvise"));
  CHECK(has(c.at("thp").detail, "3.2-3.5 s vs 4.3-4.6 s"));
  CHECK(has(c.at("thp").fix, "never changes host settings"));
  CHECK(c.at("selinux").status == CheckStatus::Warn);
  CHECK(has(c.at("selinux").fix, "securityMode"));
  CHECK(c.at("archive-space").status == CheckStatus::Warn);
  for (const auto& [name, check] : c)
    if (check.status != CheckStatus::Pass) {
      INFO(name);
      CHECK_FALSE(check.fix.empty());
    }
  CHECK(to_json(check_node(options_for(t, &criu)))["status"] == "fail");
}

TEST_CASE("a plugin the node's CRIU does not load fails with CRIU's reason", "[unit]") {
  Tree t;
  healthy_node(t);
  FakeCriu criu;
  criu.load_error = "CRIU did not load it: Error (criu/plugin.c:113): Unable to load ...: file too short";
  const auto c = by_name(check_node(options_for(t, &criu)));
  CHECK(c.at("criu").status == CheckStatus::Pass);
  CHECK(c.at("criu-plugin").status == CheckStatus::Fail);
  CHECK(has(c.at("criu-plugin").detail, "file too short"));
  CHECK(has(c.at("criu-plugin").fix, "every dump and restore on this node fails"));
}

TEST_CASE("from the agent's pod: no CRIU, no /etc; containerd and AMD nodes; GPU memory against free space", "[unit]") {
  Tree t;
  healthy_node(t);
  fs::remove_all(t.root() / "etc/crio");
  fs::remove_all(t.root() / "proc/driver");
  t.write("sys/class/kfd/kfd/topology/nodes/1/properties", "gpu_id 1234\n");
  t.write("etc/containerd/config.toml", "version = 2\n");
  auto o = options_for(t, nullptr);
  o.gpu_memory_bytes = 1ULL << 60;   // more than any disk
  const auto c = by_name(check_node(o));
  CHECK(c.at("criu").status == CheckStatus::Warn);
  CHECK(has(c.at("criu").fix, "gpuckpt doctor"));
  CHECK(c.at("criu-plugin").status == CheckStatus::Pass);
  CHECK(has(c.at("criu-plugin").detail, "not loaded from here"));
  CHECK(c.at("runtime-hooks-dir").status == CheckStatus::Warn);
  CHECK(has(c.at("runtime-hooks-dir").fix, "NRI"));
  CHECK(c.at("gpu-driver").status == CheckStatus::Pass);
  CHECK(has(c.at("gpu-driver").detail, "AMD KFD"));
  CHECK(c.at("archive-space").status == CheckStatus::Warn);
  CHECK(has(c.at("archive-space").detail, "less than the GPUs' memory"));
  fs::remove(t.root() / "usr/lib/criu/gpuckpt_plugin.so");
  const auto missing = by_name(check_node(o));
  CHECK(missing.at("criu-plugin").status == CheckStatus::Fail);
  CHECK(has(missing.at("criu-plugin").fix, "install-host-files"));
}

namespace {

// The chart's three entries as the installer of an older release wrote them on every node.
void write_chart_entries(const Tree& t, const std::string& dir) {
  const std::string hook = R"("hook":{"path":"/opt/gpuckpt/bin/gpuckpt-oci-hook","args":["gpuckpt-oci-hook","--state-dir","/var/lib/gpuckpt",)";
  t.write(dir + "/gpuckpt-hook.json",
          "{\"version\":\"1.0.0\"," + hook + R"("createRuntime"]},"when":{"always":true},"stages":["createRuntime"]})");
  t.write(dir + "/gpuckpt-hook-poststop.json",
          "{\"version\":\"1.0.0\"," + hook + R"("poststop"]},"when":{"always":true},"stages":["poststop"]})");
  t.write(dir + "/gpuckpt-hook-precreate.json",
          "{\"version\":\"1.0.0\"," + hook +
              R"("precreate"]},"when":{"annotations":{"^io\\.gpuckpt\\.checkpoint-id$":".+"}},"stages":["precreate"]})");
}

}  // namespace

TEST_CASE("hooks.d entries: the precreate entry fails on a CRI-O node with the fix, passes where only podman reads it",
          "[unit]") {
  Tree t;
  healthy_node(t);
  write_chart_entries(t, "usr/share/containers/oci/hooks.d");
  FakeCriu criu;
  auto c = by_name(check_node(options_for(t, &criu)));
  CHECK(c.at("hooks-d-entries").status == CheckStatus::Fail);
  CHECK(has(c.at("hooks-d-entries").detail,
            "/usr/share/containers/oci/hooks.d/gpuckpt-hook-precreate.json (CRI-O: unknown stage \"precreate\")"));
  CHECK(has(c.at("hooks-d-entries").detail, "CRI-O exits at start"));
  CHECK(has(c.at("hooks-d-entries").fix, "rm /usr/share/containers/oci/hooks.d/gpuckpt-hook-precreate.json"));
  CHECK_FALSE(has(c.at("hooks-d-entries").detail, "gpuckpt-hook.json"));   // the entries CRI-O accepts are not named

  SECTION("podman only: it declares precreate") {
    fs::remove_all(t.root() / "etc/crio");
    t.write("usr/bin/podman", "");
    c = by_name(check_node(options_for(t, &criu)));
    CHECK(c.at("hooks-d-entries").status == CheckStatus::Pass);
    CHECK(has(c.at("hooks-d-entries").detail, "3 hooks.d entries accepted by podman (/usr/bin/podman)"));
  }
  SECTION("CRI-O and podman on one node: CRI-O's rule decides for the directory they share") {
    t.write("usr/bin/podman", "");
    c = by_name(check_node(options_for(t, &criu)));
    CHECK(c.at("hooks-d-entries").status == CheckStatus::Fail);
  }
  SECTION("a directory CRI-O does not read (its hooks_dir names others) is not CRI-O's concern") {
    t.write("etc/crio/crio.conf.d/10-hooks.conf", "[crio.runtime]\nhooks_dir = [\"/etc/containers/oci/hooks.d\"]\n");
    c = by_name(check_node(options_for(t, &criu)));
    CHECK(c.at("hooks-d-entries").status == CheckStatus::Pass);
    write_chart_entries(t, "etc/containers/oci/hooks.d");
    c = by_name(check_node(options_for(t, &criu)));
    CHECK(c.at("hooks-d-entries").status == CheckStatus::Fail);
    CHECK(has(c.at("hooks-d-entries").detail, "/etc/containers/oci/hooks.d/gpuckpt-hook-precreate.json"));
  }
  SECTION("the precreate entry removed (what the installer does on a CRI-O node): pass") {
    fs::remove(t.root() / "usr/share/containers/oci/hooks.d/gpuckpt-hook-precreate.json");
    c = by_name(check_node(options_for(t, &criu)));
    CHECK(c.at("hooks-d-entries").status == CheckStatus::Pass);
    CHECK(has(c.at("hooks-d-entries").detail, "2 hooks.d entries accepted by CRI-O"));
  }
  SECTION("another product's entry whose binary is gone: the runtime only skips it, a warning") {
    fs::remove(t.root() / "usr/share/containers/oci/hooks.d/gpuckpt-hook-precreate.json");
    t.write("usr/share/containers/oci/hooks.d/other.json",
            R"({"version":"1.0.0","hook":{"path":"/usr/libexec/other-hook"},"when":{"always":true},"stages":["prestart"]})");
    t.write("usr/share/containers/oci/hooks.d/README", "not an entry: the runtime reads only *.json");
    c = by_name(check_node(options_for(t, &criu)));
    CHECK(c.at("hooks-d-entries").status == CheckStatus::Warn);
    CHECK(has(c.at("hooks-d-entries").detail, "other.json (CRI-O: hook.path /usr/libexec/other-hook does not exist)"));
  }
}

TEST_CASE("restore-cgroup: runc before 1.2 on cgroup v2 fails unless runc's CRIU config keeps restores in the "
          "container's cgroup", "[unit]") {
  struct Row {
    const char* name;
    bool cgroup_v2;
    const char* runc;        // "" : no runc
    const char* runc_conf;   // nullptr: no /etc/criu/runc.conf
    CheckStatus expected;    // Pass with no line at all when !cgroup_v2
    const char* detail_part;
    bool crio = false;
  };
  const Row rows[] = {
      {"Debian 12's runc on cgroup v2", true, "1.1.5", nullptr, CheckStatus::Fail, "runc 1.1.5 on cgroup v2 does not give CRIU"},
      {"the chart's libdir alone", true, "1.1.15", "libdir /usr/lib/criu\n", CheckStatus::Fail, "outside the new container's device filter"},
      {"manage-cgroups=ignore", true, "1.1.5", "libdir /usr/lib/criu\nmanage-cgroups=ignore\n", CheckStatus::Pass, "with manage-cgroups=ignore"},
      {"manage-cgroups ignore", true, "1.1.5", "  manage-cgroups ignore\n", CheckStatus::Pass, "with manage-cgroups=ignore"},
      {"another mode", true, "1.1.5", "manage-cgroups=soft\n", CheckStatus::Fail, "runc 1.1.5"},
      {"runc 1.2", true, "1.2.0", nullptr, CheckStatus::Pass, "runc 1.2.0 gives CRIU the restored container's cgroup"},
      {"runc 1.10", true, "1.10.1", nullptr, CheckStatus::Pass, "gives CRIU"},
      {"no runc (crun)", true, "", nullptr, CheckStatus::Pass, "no runc here"},
      {"cgroup v1 or hybrid", false, "1.1.5", nullptr, CheckStatus::Pass, nullptr},
      {"CRI-O without manage-cgroups=ignore", true, "1.1.5", "libdir /usr/lib/criu\n", CheckStatus::Fail,
       "outside the new container's device filter", true},
      {"CRI-O with manage-cgroups=ignore", true, "1.1.5", "manage-cgroups=ignore\n", CheckStatus::Pass,
       "with manage-cgroups=ignore", true},
      {"CRI-O with runc 1.2", true, "1.2.0", nullptr, CheckStatus::Pass, "gives CRIU", true},
  };
  for (const Row& row : rows) {
    INFO(row.name);
    Tree t;
    healthy_node(t);
    if (row.cgroup_v2) t.write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n");
    if (row.runc_conf) t.write("etc/criu/runc.conf", row.runc_conf);
    if (!row.crio) fs::remove_all(t.root() / "etc/crio");   // a containerd node (the healthy node has both)
    FakeCriu criu;
    auto o = options_for(t, &criu);
    const std::string runc = row.runc;
    o.runc_version = [runc]() -> Result<std::string> {
      if (runc.empty()) return make_error("runc: not found in PATH");
      return runc;
    };
    const auto c = by_name(check_node(o));
    if (!row.detail_part) {
      CHECK(c.count("restore-cgroup") == 0);
      continue;
    }
    REQUIRE(c.count("restore-cgroup") == 1);
    const NodeCheck& check = c.at("restore-cgroup");
    CHECK(check.status == row.expected);
    CHECK(has(check.detail, row.detail_part));
    if (row.expected == CheckStatus::Fail)
      CHECK(has(check.fix, "manage-cgroups=ignore to /etc/criu/runc.conf"));
  }
}

TEST_CASE("criu-config: a network-lock line in a runtime's CRIU config fails on CRIU < 4.2, which crashes on it in "
          "swrk mode", "[unit]") {
  struct Row {
    const char* name;
    const char* criu;        // "": CRIU not reachable (the agent's pod)
    const char* file;        // relative to the host root
    const char* text;
    CheckStatus expected;
    const char* detail_part; // nullptr: no criu-config line at all
  };
  const Row rows[] = {
      {"4.1.1 with network-lock skip in runc.conf", "4.1.1", "etc/criu/runc.conf", "timeout 60\nnetwork-lock skip\n",
       CheckStatus::Fail, "/etc/criu/runc.conf sets network-lock: CRIU 4.1.1 crashes"},
      {"4.0 with --network-lock=nftables in crun.conf", "4.0", "etc/criu/crun.conf", "--network-lock=nftables\n",
       CheckStatus::Fail, "/etc/criu/crun.conf sets network-lock: CRIU 4.0 crashes"},
      {"4.2.1 takes it", "4.2.1", "etc/criu/runc.conf", "network-lock skip\n", CheckStatus::Pass, "CRIU 4.2.1 reads it"},
      {"4.10 takes it", "4.10", "etc/criu/runc.conf", "network-lock skip\n", CheckStatus::Pass, "CRIU 4.10 reads it"},
      {"no CRIU here", "", "etc/criu/runc.conf", "network-lock skip\n", CheckStatus::Warn, "version is not known"},
      {"4.1.1 without the line", "4.1.1", "etc/criu/runc.conf", "timeout 60\ntcp-close\n", CheckStatus::Pass, nullptr},
      {"4.1.1, a comment naming it", "4.1.1", "etc/criu/runc.conf", "# network-lock skip is for CRIU 4.2\n",
       CheckStatus::Pass, nullptr},
  };
  for (const Row& row : rows) {
    INFO(row.name);
    Tree t;
    healthy_node(t);
    t.write(row.file, row.text);
    FakeCriu criu;
    criu.version_text = row.criu;
    auto o = options_for(t, std::string(row.criu).empty() ? nullptr : &criu);
    const auto c = by_name(check_node(o));
    if (!row.detail_part) {
      CHECK(c.count("criu-config") == 0);
      continue;
    }
    REQUIRE(c.count("criu-config") == 1);
    CHECK(c.at("criu-config").status == row.expected);
    CHECK(has(c.at("criu-config").detail, row.detail_part));
    if (row.expected == CheckStatus::Fail) CHECK(has(c.at("criu-config").fix, "upgrade CRIU to >= 4.2"));
  }
}
