#include "nri-plugin/nri_plugin.h"

#include "common/log.h"
#include "oci-hook/container_store.h"

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

NriPlugin::NriPlugin(NriPluginOptions options, hook::InventoryReader inventory, DeviceNumberLookup lookup)
    : options_(std::move(options)), inventory_(std::move(inventory)), lookup_(std::move(lookup)) {
  hook_options_.state_dir = options_.state_dir;
  hook_options_.host_root = options_.host_root;
}

void NriPlugin::record(const api::Container& container) {
  if (!is_safe_id(container.id())) {
    log::warn("NRI container id '" + container.id().substr(0, 80) + "' is not a safe file name: not recorded");
    return;
  }
  // Whatever happens here, the container is created as the runtime asked: gpuckpt-nri only observes.
  auto recorded = hook::record_gpu_container(container.id(), "", static_cast<int>(container.pid()),
                                             container_spec(container), hook_options_, inventory_, lookup_);
  if (!recorded)
    log::warn("container " + container.id() + ": " + recorded.error().message);
  else if (recorded->gpu_container)
    log::info(recorded->message);
  else
    log::debug(recorded->message);
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
    for (const auto& c : request.containers()) record(c);
    return api::SynchronizeResponse().SerializeAsString();
  }
  if (method == "CreateContainer") {
    api::CreateContainerRequest request;
    if (auto ok = parse(request); !ok) return ok.error();
    record(request.container());
    return api::CreateContainerResponse().SerializeAsString();
  }
  if (method == "StateChange") {
    api::StateChangeEvent event;
    if (auto ok = parse(event); !ok) return ok.error();
    if (event.event() == api::REMOVE_CONTAINER && is_safe_id(event.container().id())) {
      auto removed = hook::remove_container_state(options_.state_dir, event.container().id());
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
