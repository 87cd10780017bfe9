#include <catch2/catch_test_macros.hpp>

#include <algorithm>

#include "agent/kubelet_watch.h"
#include "archive/checkpoint_images.h"
#include "state/container_store.h"
#include "test/support/archive_builder.h"

namespace fs = std::filesystem;
using namespace gpuckpt;

TEST_CASE("archives kubelet wrote are annotated once they are complete, and only once", "[unit]") {
  test::TempDir tmp;
  const auto dir = tmp.path / "kubelet";
  const auto state_dir = tmp.path / "state";
  // The hook saw container abc123 (the id in the archive's config.dump) use GPU-0.
  ContainerGpuState state;
  state.container_id = "abc123";
  GpuDevice gpu;
  gpu.id = "GPU-0";
  gpu.vendor = GpuVendor::Nvidia;
  state.gpus.record.node.gpus = {gpu};
  state.gpus.record.used_gpu_ids = {"GPU-0"};
  state.gpus.devices = {{"/dev/nvidia0", 195, 0, "GPU-0"}};
  REQUIRE(write_container_state(state_dir, state).ok());

  const auto archive = dir / "checkpoint-trainer-0_ml-main-2026-11-22T00:00:00Z.tar";
  test::make_archive(archive, test::podman_checkpoint_entries(), test::Compression::None);
  test::make_archive(dir / "unrelated.tar", test::podman_checkpoint_entries(), test::Compression::None);
  int inventory_reads = 0;
  node::Metrics metrics;
  agent::KubeletArchiveWatcher watcher(dir, state_dir, ArchiveLimits{},
                                       [&] { ++inventory_reads; return Result<NodeInventory>(NodeInventory{}); }, metrics);

  CHECK(watcher.scan() == 0);   // first sight: kubelet may still be writing it
  CHECK_FALSE(inspect_checkpoint_archive(archive, ArchiveLimits{})->gpus.has_value());
  CHECK(watcher.scan() == 1);   // unchanged since the last pass: annotated
  auto info = inspect_checkpoint_archive(archive, ArchiveLimits{});
  REQUIRE(info.ok());
  REQUIRE(info->gpus.has_value());
  CHECK(info->gpus->record.used_gpu_ids == std::vector<std::string>{"GPU-0"});
  CHECK(info->gpus->checkpoint_id.rfind("kubelet-checkpoint-trainer-0_ml-main-", 0) == 0);
  CHECK(inventory_reads == 0);   // the hook's record was enough
  // Registered for gpuckpt-nri under its path, bound to the annotated file.
  auto entry = find_checkpoint_source(state_dir, archive.string());
  REQUIRE(entry.ok());
  REQUIRE(entry.value());
  CHECK(entry.value()->kind == CheckpointSourceKind::KubeletArchive);
  CHECK(entry.value()->record.checkpoint_id == info->gpus->checkpoint_id);
  CHECK(entry.value()->archive == archive_file_identity(archive).value());
  CHECK_FALSE(find_checkpoint_source(state_dir, (dir / "unrelated.tar").string()).value());
  CHECK(watcher.scan() == 0);    // never twice
  CHECK(watcher.scan() == 0);
  CHECK(metrics.render().find("gpuckpt_kubelet_archives_annotated_total 1") != std::string::npos);
  CHECK_FALSE(inspect_checkpoint_archive(dir / "unrelated.tar", ArchiveLimits{})->gpus.has_value());

  // A broken archive is logged and skipped, and the watcher keeps going.
  test::write_file(dir / "checkpoint-broken.tar", "garbage");
  CHECK(watcher.scan() == 0);
  CHECK(watcher.scan() == 0);
  CHECK(fs::file_size(dir / "checkpoint-broken.tar") == 7);
}

namespace {
// podman_checkpoint_entries() with spec.dump's annotations replaced by `annotations`.
std::vector<test::TestEntry> entries_annotated(const nlohmann::json& annotations) {
  auto entries = test::podman_checkpoint_entries();
  for (auto& e : entries)
    if (e.name == "spec.dump") {
      auto spec = nlohmann::json::parse(e.data);
      spec["annotations"] = annotations;
      e.data = spec.dump();
    }
  return entries;
}

// A kubelet-dir CRI-O archive whose spec.dump carries CARRIED as io.kubernetes.cri-o.Annotations, annotated by the
// watcher: returns spec.dump's annotations afterwards
nlohmann::json annotate_crio_archive(const std::string& carried) {
  test::TempDir tmp;
  const auto dir = tmp.path / "kubelet";
  const auto entries = entries_annotated(
      {{"io.kubernetes.cri-o.ContainerID", "abc123"}, {"io.kubernetes.cri-o.Annotations", carried}});
  const auto archive = dir / "checkpoint-trainer-0_ml-main-2026-11-26T06:00:00Z.tar";
  test::make_archive(archive, entries, test::Compression::None);
  node::Metrics metrics;
  agent::KubeletArchiveWatcher watcher(dir, tmp.path / "state", ArchiveLimits{},
                                       [] { return Result<NodeInventory>(NodeInventory{}); }, metrics);
  CHECK(watcher.scan() == 0);
  CHECK(watcher.scan() == 1);
  auto spec_text = read_archive_entry(archive, "spec.dump", ArchiveLimits{});
  REQUIRE(spec_text.ok());
  REQUIRE(spec_text.value());
  return nlohmann::json::parse(*spec_text.value())["annotations"];
}
}  // namespace

TEST_CASE("a CRI-O archive's carried annotations get the checkpoint id, so CRI-O's restore carries it", "[unit]") {
  const auto annotations = annotate_crio_archive(R"({"io.kubernetes.container.hash":"a1b2"})");
  const auto carried = nlohmann::json::parse(annotations["io.kubernetes.cri-o.Annotations"].get<std::string>());
  CHECK(carried["io.kubernetes.container.hash"] == "a1b2");   // CRI-O's own stay
  CHECK(carried["io.gpuckpt.checkpoint-id"] == annotations["io.gpuckpt.checkpoint-id"]);
  CHECK(carried["io.gpuckpt.checkpoint-id"].get<std::string>().rfind("kubelet-checkpoint-trainer-0_ml-main-", 0) == 0);
}

TEST_CASE("a CRI-O archive of a container created without annotations (carried \"null\") gets the checkpoint id", "[unit]") {
  // what CRI-O 1.36.3 wrote for a CreateContainer with no annotations (GPU machine, test/gpu/crio_gpu_test.sh)
  const auto annotations = annotate_crio_archive("null");
  const auto carried = nlohmann::json::parse(annotations["io.kubernetes.cri-o.Annotations"].get<std::string>());
  REQUIRE(carried.is_object());
  CHECK(carried.size() == 1);
  CHECK(carried["io.gpuckpt.checkpoint-id"] == annotations["io.gpuckpt.checkpoint-id"]);
}

TEST_CASE("kubelet archives of a pod make events on it: annotated, or quarantined with the reason", "[unit]") {
  test::TempDir tmp;
  const auto dir = tmp.path / "kubelet";
  auto entries = entries_annotated({{"io.kubernetes.pod.namespace", "ml"}, {"io.kubernetes.pod.name", "trainer-0"},
                                     {"io.kubernetes.pod.uid", "5f0c3f9e-3b0e-4c59-9a57-2d8f3b1c0a11"}});
  test::make_archive(dir / "checkpoint-trainer-0_ml-main-2026-11-26T06:00:00Z.tar", entries, test::Compression::None);
  std::erase_if(entries, [](const test::TestEntry& e) { return e.name == "checkpoint/inventory.img"; });
  test::make_archive(dir / "checkpoint-trainer-0_ml-main-2026-11-26T07:00:00Z.tar", entries, test::Compression::None);
  test::make_archive(dir / "checkpoint-podman.tar", test::podman_checkpoint_entries(), test::Compression::None);
  node::Metrics metrics;
  agent::KubeletArchiveWatcher watcher(dir, tmp.path / "state", ArchiveLimits{},
                                       [] { return Result<NodeInventory>(NodeInventory{}); }, metrics);
  std::vector<agent::PodEvent> events;
  watcher.report_events_to([&](agent::PodEvent event) { events.push_back(std::move(event)); });
  CHECK(watcher.scan() == 0);
  CHECK(watcher.scan() == 2);   // the pod's good archive and the podman one (no pod: no event)
  REQUIRE(events.size() == 2);
  std::sort(events.begin(), events.end(), [](const auto& a, const auto& b) { return a.reason < b.reason; });
  CHECK(events[0].reason == "CheckpointAnnotated");
  CHECK_FALSE(events[0].warning);
  CHECK(events[0].message.find("checkpoint-trainer-0_ml-main-2026-11-26T06:00:00Z.tar") != std::string::npos);
  CHECK(events[1].reason == "CheckpointQuarantined");
  CHECK(events[1].warning);
  CHECK(events[1].message.find("holds no CRIU images") != std::string::npos);
  for (const auto& event : events) {
    CHECK(event.pod.namespace_name == "ml");
    CHECK(event.pod.name == "trainer-0");
    CHECK(event.pod.uid == "5f0c3f9e-3b0e-4c59-9a57-2d8f3b1c0a11");
  }
}

TEST_CASE("a kubelet archive whose GPU record cannot be made is quarantined, saying which step failed", "[unit]") {
  test::TempDir tmp;
  const auto dir = tmp.path / "kubelet";
  test::make_archive(dir / "checkpoint-trainer-0_ml-main-2026-11-26T06:00:00Z.tar",
                     entries_annotated({{"io.kubernetes.pod.namespace", "ml"}, {"io.kubernetes.pod.name", "trainer-0"}}),
                     test::Compression::None);
  node::Metrics metrics;
  // No hook record for the container: the watcher reads the node's GPUs, and that fails.
  agent::KubeletArchiveWatcher watcher(dir, tmp.path / "state", ArchiveLimits{}, [] {
    return Result<NodeInventory>(make_error("/host/sys/class/kfd/kfd/topology/nodes/1/properties: line 4: value "
                                            "out of range", EIO));
  }, metrics);
  std::vector<agent::PodEvent> events;
  watcher.report_events_to([&](agent::PodEvent event) { events.push_back(std::move(event)); });
  CHECK(watcher.scan() == 0);
  CHECK(watcher.scan() == 0);
  REQUIRE(events.size() == 1);
  CHECK(events[0].reason == "CheckpointQuarantined");
  CHECK(events[0].message.find("reading this node's GPUs: /host/sys/class/kfd/kfd/topology/nodes/1/properties: "
                               "line 4") != std::string::npos);
}
