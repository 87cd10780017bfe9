#include "nri-plugin/nri_plugin.h"

#include "common/checkpoint_images.h"
#include "common/log.h"
#include "common/restore_plan.h"
#include "common/gpu_detect.h"
#include "common/container_store.h"

namespace gpuckpt::nri {

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
    log::warn("NRI container id '" + container.id().substr(0, 80) + "' is not a safe file name: not recorded");
    return;
  }
  // Whatever happens here, the container is created as the runtime asked: gpuckpt-nri only observes.
  auto recorded = record_gpu_container(container.id(), "", static_cast<int>(container.pid()),
                                             container_spec(container), options_.state_dir, inventory, lookup_);
  if (!recorded)
    log::warn("container " + container.id() + ": " + recorded.error().message);
  else if (recorded->gpu_container)
    log::info(recorded->message);
  else
    log::debug(recorded->message);
}

Result<void> NriPlugin::adjust_for_restore(const api::Container& c, api::ContainerAdjustment& adjust) {
  const std::map<std::string, std::string> annotations(c.annotations().begin(), c.annotations().end());
  const std::string reference = container_image_reference(annotations);
  auto checkpoint = find_checkpoint_image(options_.state_dir, reference);
  const std::string what = "restore of checkpoint image " + reference + " as container " + c.id();
  if (!checkpoint) return make_error(what + " refused: " + checkpoint.error().message, EIO);
  if (!checkpoint.value() || checkpoint.value()->record.used_gpu_ids.empty()) return {};
  auto node = inventory_();
  if (!node) return make_error(what + " refused: the node inventory failed: " + node.error().message, EIO);
  // The GPUs the runtime gave this container (device plugin, CDI) are the only targets; none: any GPU here.
  GpuUse use = detect_gpu_use(container_spec(c));
  std::optional<std::vector<std::string>> allocated;
  if (use.uses_gpu()) allocated = resolve_gpus(use, node.value(), lookup_);
  auto plan = plan_for_allocation(*checkpoint.value(), node.value(), allocated, options_.match_policy);
  if (!plan)
    return make_error(what + " refused: " + (allocated ? "none of the GPUs it was given" : "no GPU of this node") +
                          " can take it: " + plan.error().message, EDOM);
  for (const auto& d : plan->devices) {
    auto numbers = lookup_(d.host_path);
    if (!numbers) return make_error(what + " refused: " + numbers.error().message, ENODEV);
    auto* device = adjust.mutable_linux()->add_devices();
    device->set_path(d.path_after_restore());
    device->set_type("c");
    device->set_major(numbers->first);
    device->set_minor(numbers->second);
    device->mutable_file_mode()->set_value(0666);
  }
  for (const auto& [key, value] : plan->env) {
    auto* kv = adjust.add_env();
    kv->set_key(key);
    kv->set_value(value);
  }
  auto written = write_restore_plan(options_.state_dir, plan.value());
  if (!written) return make_error(what + " refused: " + written.error().message, EIO);
  (*adjust.mutable_annotations())[kAnnotationRestorePlan] = plan->id;
  if (!options_.hook_path.empty()) {   // runtimes without hooks.d (containerd) get the hook that places the plan
    auto* hook = adjust.mutable_hooks()->add_create_runtime();
    hook->set_path(options_.hook_path);
    for (const std::string& arg : {options_.hook_path, std::string("--state-dir"), options_.state_dir.string(),
                                  std::string("--host-root"), options_.host_root.string(), std::string("createRuntime")})
      hook->add_args(arg);
  }
  std::string moved;
  for (const auto& a : plan->assignments) moved += (moved.empty() ? "" : ", ") + a.source_id + " -> " + a.target_id;
  log::info(what + ": plan " + plan->id + " (" + moved + "), " + std::to_string(plan->devices.size()) +
            " device node(s), " + std::to_string(plan->env.size()) + " env var(s)" +
            (allocated ? " within the " + std::to_string(allocated->size()) + " GPU(s) it was given" : ""));
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
    if (auto ok = parse(request); !ok) return ok.error();
    log::info("NRI: registered with " + request.runtime_name() + " " + request.runtime_version());
    api::ConfigureResponse response;
    response.set_events(subscribed_events());
    return response.SerializeAsString();
  }
  if (method == "Synchronize") {
    api::SynchronizeRequest request;
    if (auto ok = parse(request); !ok) return ok.error();
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
    if (auto ok = parse(request); !ok) return ok.error();
    record(request.container(), inventory_);
    api::CreateContainerResponse response;
    auto adjusted = adjust_for_restore(request.container(), *response.mutable_adjust());
    if (!adjusted) {
      log::error(adjusted.error().message);
      return adjusted.error();
    }
    return response.SerializeAsString();
  }
  if (method == "StateChange") {
    api::StateChangeEvent event;
    if (auto ok = parse(event); !ok) return ok.error();
    if (event.event() == api::REMOVE_CONTAINER && is_safe_id(event.container().id())) {
      auto removed = remove_container_state(options_.state_dir, event.container().id());
      if (!removed) log::warn("container " + event.container().id() + ": " + removed.error().message);
    }
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
