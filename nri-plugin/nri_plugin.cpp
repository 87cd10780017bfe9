#include "nri-plugin/nri_plugin.h"

#include <algorithm>
#include <ctime>
#include <set>

#include "archive/checkpoint_images.h"
#include "state/container_store.h"
#include "gpu/gpu_detect.h"
#include "base/log.h"
#include "restore/restore_plan.h"
#include "restore/restore_recognition.h"

namespace gpuckpt::nri {

namespace {

// The entry of the index the recognised restore is a restore of; std::nullopt when the agent made no such
// checkpoint available on this node (a restore gpuckpt has no part in: left as the runtime made it). A restore
// that names an entry but does not fit it (another checkpoint id, an archive changed since it was annotated) is an
// error: the record would describe processes other than the ones being restored.
Result<std::optional<CheckpointImageEntry>> registered_checkpoint(const std::filesystem::path& state_dir,
                                                                  const RecognisedRestore& restore) {
  using Found = std::optional<CheckpointImageEntry>;
  if (restore.runtime == RestoringRuntime::CriO) {
    GPUCKPT_TRY(auto entries, find_checkpoint_by_id(state_dir, restore.checkpoint_id));
    if (entries.empty()) return Found();
    return Found(std::move(entries.front()));
  }
  GPUCKPT_TRY(auto entry, find_checkpoint_source(state_dir, restore.source));
  if (!entry) return Found();
  if (!restore.checkpoint_id.empty() && restore.checkpoint_id != entry->record.checkpoint_id)
    return make_error("it carries checkpoint id " + restore.checkpoint_id + ", but the agent registered " +
                      restore.source + " for checkpoint " + entry->record.checkpoint_id);
  if (restore.source_is_archive) {
    if (entry->kind != CheckpointSourceKind::KubeletArchive)
      return make_error(restore.source + " is registered as an image, not an archive");
    GPUCKPT_TRY(const auto now, archive_file_identity(restore.source));
    if (!(now == entry->archive))
      return make_error("the archive " + restore.source + " changed after the agent annotated it (size, mtime or "
                        "inode differ); let the agent annotate it again (remove and re-copy it) or restore another");
  }
  return entry;
}

std::string describe(const ContainerIdentity& who) {
  return "pod " + log::escaped(who.pod_namespace, 128) + "/" + log::escaped(who.pod_name, 256) + " container " +
         log::escaped(who.container_name, 256);
}

// The restore a container being created is, from its annotations; std::nullopt for any other container. A
// containerd restore that names no checkpoint is left alone with a warning: nothing says which checkpoint it
// restores.
std::optional<RecognisedRestore> recognised_restore_of(const api::Container& c) {
  const std::map<std::string, std::string> annotations(c.annotations().begin(), c.annotations().end());
  auto restore = recognise_restore(annotations);
  if (!restore && is_containerd_restore_without_source(annotations))
    log::warn("containerd restore as container " + log::escaped(c.id(), 80) + " left as containerd made it: its "
              "CreateContainer request named no user_specified_image, so containerd recorded no checkpointImage and "
              "nothing says which checkpoint it restores (the kubelet always sends the pod's image there; other CRI "
              "clients must set it to the checkpoint image or archive path for gpuckpt to move its GPUs)");
  return restore;
}

// "CRI-O restore of SOURCE (checkpoint ID)": the restore as the messages about it name it.
std::string restore_name(const RecognisedRestore& restore) {
  return std::string(runtime_name(restore.runtime)) + " restore" +
         (restore.source.empty() ? "" : " of " + log::escaped(restore.source, 512)) +
         (restore.checkpoint_id.empty() ? "" : " (checkpoint " + log::escaped(restore.checkpoint_id, 128) + ")");
}

// The container paths the plan puts a target GPU's device node at.
std::set<std::string> placed_paths(const RestorePlan& plan) {
  std::set<std::string> placed;
  for (const auto& d : plan.devices) placed.insert(d.path_after_restore());
  return placed;
}

// Removes the device nodes the restored container must not keep: the checkpoint's (their GPUs move) and those of
// GPUs it was not given; a path the plan places a node at is left to that node. (NRI 0.8-0.12 drop device
// removals when they merge plugins' adjustments, result.go adjustDevices: best effort until NRI passes them on.)
void remove_replaced_devices(const api::Container& c, const CheckpointGpuRecord& record, const RestorePlan& plan,
                             const NodeInventory& node, const std::vector<std::string>& allocated,
                             const DeviceNumberLookup& lookup, api::ContainerAdjustment& adjust) {
  const std::set<std::string> placed = placed_paths(plan);
  std::set<std::string> source_paths;
  for (const auto& d : record.devices) source_paths.insert(d.container_path);
  GpuUse had = detect_gpu_use(container_spec(c));
  resolve_gpus(had, node, lookup);
  const std::set<std::string> given(allocated.begin(), allocated.end());
  for (const auto& d : c.linux().devices()) {
    if (placed.count(d.path())) continue;
    const auto held = std::find_if(had.devices.begin(), had.devices.end(),
                                   [&](const ContainerGpuDevice& g) { return g.container_path == d.path(); });
    const bool other_gpu = held != had.devices.end() && !held->gpu_id.empty() && !given.count(held->gpu_id);
    if (source_paths.count(d.path()) || other_gpu) adjust.mutable_linux()->add_devices()->set_path("-" + d.path());
  }
}

// A character device node at `path` in the container with the numbers `host_path` has on this node.
Result<std::pair<std::uint32_t, std::uint32_t>> add_char_device(const std::string& path, const std::string& host_path,
                                                               const DeviceNumberLookup& lookup, const std::string& as,
                                                               api::ContainerAdjustment& adjust) {
  auto numbers = lookup(host_path);
  if (!numbers) return make_error(as + " refused: " + numbers.error().message, ENODEV);
  auto* device = adjust.mutable_linux()->add_devices();
  device->set_path(path);
  device->set_type("c");
  device->set_major(numbers->first);
  device->set_minor(numbers->second);
  device->mutable_file_mode()->set_value(0666);
  return numbers;
}

// The target GPUs' device nodes where the plan puts them, and the nodes every GPU process of the vendor needs
// (/dev/nvidiactl, /dev/nvidia-uvm), which CRI-O's restore drops with the rest and which belong to no one GPU.
// The plan keeps the numbers: the CRIU plugin gives the restored /dev, which CRIU restores from the source's
// image, the same nodes as the spec (it sees this node's /dev, not --host-root).
Result<void> add_restored_devices(const CheckpointGpuRecord& record, RestorePlan& plan,
                                  const DeviceNumberLookup& lookup, const std::string& as,
                                  api::ContainerAdjustment& adjust) {
  const std::set<std::string> placed = placed_paths(plan);
  for (auto& d : plan.devices) {
    GPUCKPT_TRY(d.target_numbers, add_char_device(d.path_after_restore(), d.host_path, lookup, as, adjust));
  }
  for (const auto& d : record.devices)
    if (d.gpu_id.empty() && is_gpu_device_path(d.container_path) && !placed.count(d.container_path)) {
      GPUCKPT_TRY_VOID(add_char_device(d.container_path, d.container_path, lookup, as, adjust));
    }
  return {};
}

// The checkpoint's GPU environment, with the values the plan maps for the target GPUs.
void set_gpu_env(const CheckpointGpuRecord& record, const RestorePlan& plan, api::ContainerAdjustment& adjust) {
  for (const auto& [key, original] : record.gpu_env) {
    auto* kv = adjust.add_env();
    kv->set_key(key);
    const auto mapped = plan.env.find(key);
    kv->set_value(mapped == plan.env.end() ? original : mapped->second);
  }
}

// Runtimes without hooks.d (containerd) get the hook that places the plan. One that ran it from hooks.d (CRI-O)
// shows it among the container's createRuntime hooks already: a second run would find the plan used by the first
// and fail the restore.
void add_plan_hook(const api::Container& c, const NriPluginOptions& options, api::ContainerAdjustment& adjust) {
  const auto& runs = c.hooks().create_runtime();
  const bool runtime_runs_hook = std::any_of(runs.begin(), runs.end(), [&](const api::Hook& h) {
    return h.path() == options.hook_path;
  });
  if (options.hook_path.empty() || runtime_runs_hook) return;
  auto* hook = adjust.mutable_hooks()->add_create_runtime();
  hook->set_path(options.hook_path);
  for (const std::string& arg : {options.hook_path, std::string("--state-dir"), options.state_dir.string(),
                                std::string("--host-root"), options.host_root.string(), std::string("createRuntime")})
    hook->add_args(arg);
}

}  // namespace

std::int32_t subscribed_events() {
  const auto bit = [](api::Event e) { return static_cast<std::int32_t>(1) << (static_cast<int>(e) - 1); };
  return bit(api::CREATE_CONTAINER) | bit(api::REMOVE_CONTAINER);
}

nlohmann::json container_spec(const api::Container& c) {
  nlohmann::json spec = {{"process", {{"env", nlohmann::json::array()}}},
                         {"linux", {{"devices", nlohmann::json::array()}}},
                         {"mounts", nlohmann::json::array()},
                         {"annotations", nlohmann::json::object()}};
  for (const auto& e : c.env()) spec["process"]["env"].push_back(e);
  for (const auto& d : c.linux().devices())
    spec["linux"]["devices"].push_back({{"path", d.path()}, {"type", d.type()}, {"major", d.major()}, {"minor", d.minor()}});
  for (const auto& m : c.mounts())
    spec["mounts"].push_back({{"destination", m.destination()}, {"source", m.source()}, {"type", m.type()}});
  for (const auto& [key, value] : c.annotations()) spec["annotations"][key] = value;
  return spec;
}

NriPlugin::NriPlugin(NriPluginOptions options, InventoryReader inventory, DeviceNumberLookup lookup)
    : options_(std::move(options)), inventory_(std::move(inventory)), lookup_(std::move(lookup)) {}

void NriPlugin::record(const api::Container& container, const InventoryReader& inventory) {
  if (!is_safe_id(container.id())) {
    log::warn("NRI container id '" + log::escaped(container.id(), 80) + "' is not a safe file name: not recorded");
    return;
  }
  // Whatever happens here, the container is created as the runtime asked: recording only observes.
  auto recorded = record_gpu_container(container.id(), "", static_cast<int>(container.pid()),
                                       container_spec(container), options_.state_dir, inventory, lookup_);
  if (!recorded)
    log::warn("container " + container.id() + ": " + recorded.error().message);
  else if (recorded->gpu_container)
    log::info(recorded->message);
  else
    log::debug(recorded->message);
}

void NriPlugin::forget(const api::Container& container) {
  if (!is_safe_id(container.id())) return;
  auto removed = remove_container_state(options_.state_dir, container.id());
  if (!removed) log::warn("container " + container.id() + ": " + removed.error().message);
}

Result<std::vector<std::string>> NriPlugin::allocated_gpus_of(const api::CreateContainerRequest& request,
                                                              const std::string& container_name,
                                                              const NodeInventory& node, const std::string& what) {
  const ContainerIdentity who{request.pod().namespace_(), request.pod().name(), request.pod().uid(), container_name};
  if (options_.allocation) {
    auto allocation = options_.allocation(who);
    if (!allocation)
      return make_error(what + " refused: the kubelet's device allocation of " + describe(who) +
                            " cannot be read: " + allocation.error().message, EIO);
    if (allocation.value()) {
      const AllocatedGpus gpus = allocated_gpus(*allocation.value(), node, options_.cdi, lookup_);
      for (const auto& unknown : gpus.unknown)
        log::warn(what + ": the kubelet allocated device " + log::escaped(unknown, 256) + " to " + describe(who) +
                  ", which names no GPU of this node's inventory; it is not a target");
      if (gpus.gpu_ids.empty())
        return make_error(what + " refused: the kubelet allocated no GPU of this node to " + describe(who) +
                              (gpus.unknown.empty() ? std::string() : " (only devices it does not know)") +
                              "; request the GPUs the checkpoint used in the pod (nvidia.com/gpu, or a ResourceClaim of a GPU DRA "
                              "driver)", ENODEV);
      return gpus.gpu_ids;
    }
  }
  // The devices the runtime kept from the request (containerd keeps the device plugin's devices and env).
  GpuUse use = detect_gpu_use(container_spec(request.container()));
  if (use.uses_gpu()) {
    auto ids = resolve_gpus(use, node, lookup_);
    if (!ids.empty()) return ids;
    return make_error(what + " refused: the GPU devices the runtime gave " + describe(who) +
                          " name no GPU of this node's inventory", ENODEV);
  }
  return make_error(what + " refused: the GPUs " + describe(who) + " was given are unknown: " +
                        (options_.allocation ? "the kubelet's PodResources API does not list the container"
                                             : "gpuckpt-nri reads no PodResources API (--pod-resources-socket)") +
                        ", and the runtime passed no GPU devices, NVIDIA_VISIBLE_DEVICES or CDI names (CRI-O "
                        "drops them at restore); gpuckpt never restores onto GPUs a pod was not given", ENODEV);
}

Result<void> NriPlugin::adjust_for_restore(const api::CreateContainerRequest& request,
                                           api::ContainerAdjustment& adjust) {
  const api::Container& c = request.container();
  const auto restore = recognised_restore_of(c);
  if (!restore) return {};
  const std::string what = restore_name(*restore);
  if (!is_safe_id(c.id())) return make_error(what + " refused: its container id is not a safe file name", EINVAL);
  const std::string as = what + " as container " + c.id();
  auto checkpoint = registered_checkpoint(options_.state_dir, *restore);
  if (!checkpoint) return make_error(as + " refused: " + checkpoint.error().message, EIO);
  if (!checkpoint.value()) {
    log::info(as + ": not a checkpoint the gpuckpt agent made available on this node; left as the runtime made it");
    return {};
  }
  const CheckpointGpuRecord& record = checkpoint.value()->record;
  if (record.record.used_gpu_ids.empty()) return {};
  auto node = inventory_();
  if (!node) return make_error(as + " refused: the node inventory failed: " + node.error().message, EIO);
  const std::map<std::string, std::string> labels(c.labels().begin(), c.labels().end());
  GPUCKPT_TRY(const auto allocated,
              allocated_gpus_of(request, restored_container_name(*restore, c.name(), labels), node.value(), as));
  auto plan = plan_for_allocation(record, node.value(), allocated, options_.match_policy);
  if (!plan) return make_error(as + " refused: none of the GPUs it was given can take it: " + plan.error().message, EDOM);
  plan->container_id = c.id();
  plan->expires_at = static_cast<std::int64_t>(std::time(nullptr)) + options_.plan_lifetime.count();

  // Removals first, so a node a swap moves onto a path keeps it.
  remove_replaced_devices(c, record, *plan, node.value(), allocated, lookup_, adjust);
  GPUCKPT_TRY_VOID(add_restored_devices(record, *plan, lookup_, as, adjust));
  set_gpu_env(record, *plan, adjust);
  auto written = write_restore_plan(options_.state_dir, plan.value());
  if (!written) return make_error(as + " refused: " + written.error().message, EIO);
  (*adjust.mutable_annotations())[kAnnotationRestorePlan] = plan->id;
  add_plan_hook(c, options_, adjust);
  std::string moved;
  for (const auto& a : plan->assignments) moved += (moved.empty() ? "" : ", ") + a.source_id + " -> " + a.target_id;
  log::info(as + ": plan " + plan->id + " (" + moved + "), " + std::to_string(adjust.linux().devices_size()) +
            " device change(s), " + std::to_string(adjust.env_size()) + " env var(s), within the " +
            std::to_string(allocated.size()) + " GPU(s) it was given");
  return {};
}

Result<std::string> NriPlugin::handle(std::string_view method, std::string_view payload) {
  const auto parse = [&](google::protobuf::Message& message) -> Result<void> {
    if (!message.ParseFromArray(payload.data(), static_cast<int>(payload.size())))
      return make_error("NRI " + std::string(method) + ": the request is not a valid " + message.GetTypeName(), EPROTO);
    return {};
  };
  if (method == "Configure") {
    api::ConfigureRequest request;
    GPUCKPT_TRY_VOID(parse(request));
    log::info("NRI: registered with " + request.runtime_name() + " " + request.runtime_version());
    api::ConfigureResponse response;
    response.set_events(subscribed_events());
    return response.SerializeAsString();
  }
  if (method == "Synchronize") {
    api::SynchronizeRequest request;
    GPUCKPT_TRY_VOID(parse(request));
    // One inventory read for all of them: registration has a deadline (containerd: 5 s).
    std::optional<Result<NodeInventory>> node;
    const InventoryReader once = [&] {
      if (!node) node = inventory_();
      return *node;
    };
    for (const auto& c : request.containers()) record(c, once);
    return api::SynchronizeResponse().SerializeAsString();
  }
  if (method == "CreateContainer") {
    api::CreateContainerRequest request;
    GPUCKPT_TRY_VOID(parse(request));
    record(request.container(), inventory_);
    api::CreateContainerResponse response;
    auto adjusted = adjust_for_restore(request, *response.mutable_adjust());
    if (!adjusted) {
      log::error(adjusted.error().message);
      return adjusted.error();
    }
    return response.SerializeAsString();
  }
  if (method == "RemoveContainer") {
    // NRI >= 0.9's RemoveContainerRequest {pod = 1, container = 2} has CreateContainerRequest's fields and wire
    // form (the proto vendored here predates it); its response is empty, like Empty's.
    api::CreateContainerRequest request;
    GPUCKPT_TRY_VOID(parse(request));
    forget(request.container());
    return api::Empty().SerializeAsString();
  }
  if (method == "StateChange") {
    api::StateChangeEvent event;
    GPUCKPT_TRY_VOID(parse(event));
    if (event.event() == api::REMOVE_CONTAINER) forget(event.container());
    return api::Empty().SerializeAsString();
  }
  if (method == "UpdateContainer") return api::UpdateContainerResponse().SerializeAsString();
  if (method == "StopContainer") return api::StopContainerResponse().SerializeAsString();
  if (method == "Shutdown") {
    shutdown_ = true;
    return api::Empty().SerializeAsString();
  }
  return make_error("NRI method " + std::string(method) + " is not implemented by gpuckpt-nri", ENOSYS);
}

}  // namespace gpuckpt::nri
