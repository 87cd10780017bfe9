#include "gpu/properties_record.h"

#include <limits>
#include <set>

#include "base/json_reader.h"
#include "gpu_properties.pb.h"

namespace gpuckpt {

using nlohmann::json;

namespace {

json link_to_json(const GpuLink& link) {
  return json{{"type", link.type},
              {"peer_id", link.peer_id},
              {"peer_node", link.peer_node},
              {"weight", link.weight},
              {"min_bandwidth", link.min_bandwidth},
              {"max_bandwidth", link.max_bandwidth},
              {"bidirectional", link.bidirectional},
              {"count", link.count}};
}

json gpu_to_json(const GpuDevice& gpu) {
  json links = json::array();
  for (const auto& link : gpu.links) links.push_back(link_to_json(link));
  json properties = json::object();
  for (const auto& [name, value] : gpu.properties) properties[name] = value;
  return json{{"id", gpu.id},
              {"vendor", to_string(gpu.vendor)},
              {"name", gpu.name},
              {"uuid", gpu.uuid},
              {"pci_address", gpu.pci_address},
              {"vendor_id", gpu.vendor_id},
              {"device_id", gpu.device_id},
              {"numa_node", gpu.numa_node},
              {"memory_bytes", gpu.memory_bytes},
              {"compute_capability", gpu.compute_capability},
              {"driver_version", gpu.driver_version},
              {"firmware_version", gpu.firmware_version},
              {"render_minor", gpu.render_minor},
              {"device_minor", gpu.device_minor},
              {"kfd_node", gpu.kfd_node},
              {"gpu_id", gpu.gpu_id},
              {"hive_id", gpu.hive_id},
              {"mig_mode", gpu.mig_mode},
              {"properties", std::move(properties)},
              {"links", std::move(links)},
              {"device_paths", gpu.device_paths}};
}

json node_to_json(const NodeInventory& node) {
  json gpus = json::array();
  for (const auto& gpu : node.gpus) gpus.push_back(gpu_to_json(gpu));
  json system = json::object();
  for (const auto& [key, value] : node.system) system[key] = value;
  return json{{"hostname", node.hostname}, {"gpus", std::move(gpus)}, {"system", std::move(system)}};
}

// -1 (unknown) or a non-negative int.
void get_minor_or_unknown(JsonFields& r, const json& j, const std::string& path, const char* key, int& out) {
  std::int64_t value = out;
  r.get_integer(j, path, key, value, -1, std::numeric_limits<int>::max());
  out = static_cast<int>(value);
}

GpuLink link_from_json(const json& j, const std::string& path, JsonFields& r) {
  GpuLink link;
  if (!j.is_object()) {
    r.fail(path, "expected an object");
    return link;
  }
  r.get(j, path, "type", link.type, true);
  r.get(j, path, "peer_id", link.peer_id);
  r.get_integer(j, path, "peer_node", link.peer_node);
  r.get_integer(j, path, "weight", link.weight);
  r.get_integer(j, path, "min_bandwidth", link.min_bandwidth);
  r.get_integer(j, path, "max_bandwidth", link.max_bandwidth);
  r.get(j, path, "bidirectional", link.bidirectional);
  r.get_integer(j, path, "count", link.count);
  return link;
}

GpuDevice gpu_from_json(const json& j, const std::string& path, JsonFields& r) {
  GpuDevice gpu;
  if (!j.is_object()) {
    r.fail(path, "expected an object");
    return gpu;
  }
  r.get(j, path, "id", gpu.id, true);
  if (!r.failed() && gpu.id.empty()) r.fail(path + ".id", "must not be empty");
  std::string vendor;
  r.get(j, path, "vendor", vendor, true);
  if (!r.failed() && !vendor_from_string(vendor, gpu.vendor))
    r.fail(path + ".vendor", "unknown vendor '" + vendor + "' (expected nvidia, amd or other)");
  r.get(j, path, "name", gpu.name);
  r.get(j, path, "uuid", gpu.uuid);
  r.get(j, path, "pci_address", gpu.pci_address);
  r.get_integer(j, path, "vendor_id", gpu.vendor_id);
  r.get_integer(j, path, "device_id", gpu.device_id);
  get_minor_or_unknown(r, j, path, "numa_node", gpu.numa_node);
  r.get_integer(j, path, "memory_bytes", gpu.memory_bytes);
  r.get(j, path, "compute_capability", gpu.compute_capability);
  r.get(j, path, "driver_version", gpu.driver_version);
  r.get(j, path, "firmware_version", gpu.firmware_version);
  get_minor_or_unknown(r, j, path, "render_minor", gpu.render_minor);
  get_minor_or_unknown(r, j, path, "device_minor", gpu.device_minor);
  r.get_integer(j, path, "kfd_node", gpu.kfd_node);
  r.get_integer(j, path, "gpu_id", gpu.gpu_id);
  r.get_integer(j, path, "hive_id", gpu.hive_id);
  r.get(j, path, "mig_mode", gpu.mig_mode);
  if (const json* props = r.field(j, path, "properties", false)) {
    if (!props->is_object()) {
      r.fail(path + ".properties", "expected an object of name: non-negative integer");
    } else {
      for (const auto& [name, value] : props->items()) {
        std::uint64_t v = 0;
        r.get_integer(*props, path + ".properties", name.c_str(), v);
        gpu.properties[name] = v;
      }
    }
  }
  if (const json* links = r.field(j, path, "links", false)) {
    if (!links->is_array()) {
      r.fail(path + ".links", "expected an array");
    } else {
      for (std::size_t i = 0; i < links->size(); ++i)
        gpu.links.push_back(link_from_json((*links)[i], path + ".links[" + std::to_string(i) + "]", r));
    }
  }
  if (const json* paths = r.field(j, path, "device_paths", false)) {
    if (!paths->is_array()) {
      r.fail(path + ".device_paths", "expected an array of strings");
    } else {
      for (std::size_t i = 0; i < paths->size(); ++i) {
        if (!(*paths)[i].is_string()) {
          r.fail(path + ".device_paths[" + std::to_string(i) + "]", "expected a string");
          break;
        }
        gpu.device_paths.push_back((*paths)[i].get<std::string>());
      }
    }
  }
  return gpu;
}

// Checks that hold for both encodings: ids unique, every reference resolves.
Result<void> validate(const GpuPropertiesRecord& record) {
  std::set<std::string> ids;
  for (const auto& gpu : record.node.gpus)
    if (!ids.insert(gpu.id).second) return make_error("GPU id '" + gpu.id + "' appears twice in node.gpus");
  for (const auto& gpu : record.node.gpus)
    for (const auto& link : gpu.links)
      if (!link.peer_id.empty() && !ids.count(link.peer_id))
        return make_error("GPU '" + gpu.id + "' has a link to '" + link.peer_id + "', which is not in node.gpus");
  std::set<std::string> used;
  for (const auto& id : record.used_gpu_ids) {
    if (!ids.count(id)) return make_error("used_gpu_ids names '" + id + "', which is not in node.gpus");
    if (!used.insert(id).second) return make_error("used_gpu_ids names '" + id + "' twice");
  }
  return {};
}

Result<void> check_version(std::int64_t version) {
  if (version < 1)
    return make_error("version " + std::to_string(version) + " is not a valid record version (the first is 1)");
  if (version > GpuPropertiesRecord::kVersion)
    return make_error("record version " + std::to_string(version) + " is newer than this gpuckpt understands (" +
                      std::to_string(GpuPropertiesRecord::kVersion) + "); restore with a gpuckpt at least as new as the one that checkpointed");
  return {};
}

Error named(std::string_view source, const std::string& problem) {
  return make_error(std::string(source) + ": " + problem);
}

}  // namespace

nlohmann::json to_json(const GpuPropertiesRecord& record) {
  return json{{"version", record.version},
              {"node", node_to_json(record.node)},
              {"used_gpu_ids", record.used_gpu_ids}};
}

nlohmann::json to_json(const NodeInventory& inventory) {
  GpuPropertiesRecord record;
  record.node = inventory;
  for (const auto& gpu : inventory.gpus) record.used_gpu_ids.push_back(gpu.id);
  return to_json(record);
}

Result<GpuPropertiesRecord> record_from_json(const nlohmann::json& j) {
  if (!j.is_object()) return make_error("expected a JSON object with 'version', 'node' and 'used_gpu_ids'");
  auto version_it = j.find("version");
  if (version_it == j.end()) return make_error("missing 'version' (not a gpuckpt GPU properties record?)");
  const auto version = json_integer(*version_it, std::numeric_limits<std::int64_t>::min(),
                                    std::numeric_limits<std::int64_t>::max());
  if (!version) return make_error("'version' must be an integer, found " + json_type(*version_it));
  GPUCKPT_TRY_VOID(check_version(*version));

  GpuPropertiesRecord record;
  JsonFields r("");
  const json* node = r.field(j, "record", "node", true);
  if (node && !node->is_object()) r.fail("node", "expected an object");
  if (!r.failed() && node) {
    r.get(*node, "node", "hostname", record.node.hostname);
    if (const json* gpus = r.field(*node, "node", "gpus", true)) {
      if (!gpus->is_array()) {
        r.fail("node.gpus", "expected an array");
      } else {
        for (std::size_t i = 0; i < gpus->size() && !r.failed(); ++i)
          record.node.gpus.push_back(gpu_from_json((*gpus)[i], "node.gpus[" + std::to_string(i) + "]", r));
      }
    }
    if (const json* system = r.field(*node, "node", "system", false)) {
      if (!system->is_object()) {
        r.fail("node.system", "expected an object of strings");
      } else {
        for (const auto& [key, value] : system->items()) {
          if (!value.is_string()) {
            r.fail("node.system." + key, "expected a string");
            break;
          }
          record.node.system[key] = value.get<std::string>();
        }
      }
    }
  }
  if (const json* used = r.field(j, "record", "used_gpu_ids", true)) {
    if (!used->is_array()) {
      r.fail("used_gpu_ids", "expected an array of GPU ids");
    } else {
      for (std::size_t i = 0; i < used->size(); ++i) {
        if (!(*used)[i].is_string()) {
          r.fail("used_gpu_ids[" + std::to_string(i) + "]", "expected a string");
          break;
        }
        record.used_gpu_ids.push_back((*used)[i].get<std::string>());
      }
    }
  }
  if (r.failed()) return r.error();
  GPUCKPT_TRY_VOID(validate(record));
  return record;
}

Result<GpuPropertiesRecord> parse_record(std::string_view text, std::string_view source) {
  GPUCKPT_TRY(const nlohmann::json j, parse_json(text, source));
  auto record = record_from_json(j);
  if (!record) return named(source, record.error().message);
  return record;
}

Result<GpuPropertiesRecord> read_record(std::string_view bytes, std::string_view source) {
  const auto first = bytes.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && (bytes[first] == '{' || bytes[first] == '['))
    return parse_record(bytes, source);
  auto record = record_from_protobuf(bytes, source);
  if (!record && bytes.empty()) return named(source, "empty file (expected a GPU properties record, JSON or protobuf)");
  return record;
}

std::string to_protobuf(const GpuPropertiesRecord& record) {
  pb::GpuPropertiesRecord out;
  out.set_version(static_cast<std::uint32_t>(record.version));
  pb::NodeInventory* node = out.mutable_node();
  node->set_hostname(record.node.hostname);
  for (const auto& [key, value] : record.node.system) (*node->mutable_system())[key] = value;
  for (const auto& gpu : record.node.gpus) {
    pb::GpuDevice* g = node->add_gpus();
    g->set_id(gpu.id);
    g->set_vendor(to_string(gpu.vendor));
    g->set_name(gpu.name);
    g->set_uuid(gpu.uuid);
    g->set_pci_address(gpu.pci_address);
    g->set_vendor_id(gpu.vendor_id);
    g->set_device_id(gpu.device_id);
    g->set_numa_node(gpu.numa_node);
    g->set_memory_bytes(gpu.memory_bytes);
    g->set_compute_capability(gpu.compute_capability);
    g->set_driver_version(gpu.driver_version);
    g->set_firmware_version(gpu.firmware_version);
    g->set_render_minor(gpu.render_minor);
    g->set_device_minor(gpu.device_minor);
    g->set_kfd_node(gpu.kfd_node);
    g->set_gpu_id(gpu.gpu_id);
    g->set_hive_id(gpu.hive_id);
    g->set_mig_mode(gpu.mig_mode);
    for (const auto& [name, value] : gpu.properties) (*g->mutable_properties())[name] = value;
    for (const auto& link : gpu.links) {
      pb::GpuLink* l = g->add_links();
      l->set_type(link.type);
      l->set_peer_id(link.peer_id);
      l->set_peer_node(link.peer_node);
      l->set_weight(link.weight);
      l->set_min_bandwidth(link.min_bandwidth);
      l->set_max_bandwidth(link.max_bandwidth);
      l->set_bidirectional(link.bidirectional);
      l->set_count(link.count);
    }
    for (const auto& path : gpu.device_paths) g->add_device_paths(path);
  }
  for (const auto& id : record.used_gpu_ids) out.add_used_gpu_ids(id);
  std::string bytes;
  out.SerializeToString(&bytes);
  return bytes;
}

Result<GpuPropertiesRecord> record_from_protobuf(std::string_view bytes, std::string_view source) {
  pb::GpuPropertiesRecord in;
  if (bytes.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()) ||
      !in.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return named(source, "neither JSON nor a valid GPU properties protobuf record (truncated or corrupt image?)");
  if (auto ok = check_version(in.version()); !ok) return named(source, ok.error().message);
  GpuPropertiesRecord record;
  record.version = static_cast<int>(in.version());
  record.node.hostname = in.node().hostname();
  for (const auto& [key, value] : in.node().system()) record.node.system[key] = value;
  for (const auto& g : in.node().gpus()) {
    GpuDevice gpu;
    gpu.id = g.id();
    if (gpu.id.empty()) return named(source, "a GPU without an id");
    if (!vendor_from_string(g.vendor(), gpu.vendor))
      return named(source, "GPU '" + gpu.id + "' has unknown vendor '" + g.vendor() + "'");
    gpu.name = g.name();
    gpu.uuid = g.uuid();
    gpu.pci_address = g.pci_address();
    gpu.vendor_id = g.vendor_id();
    gpu.device_id = g.device_id();
    gpu.numa_node = g.numa_node();
    gpu.memory_bytes = g.memory_bytes();
    gpu.compute_capability = g.compute_capability();
    gpu.driver_version = g.driver_version();
    gpu.firmware_version = g.firmware_version();
    gpu.render_minor = g.render_minor();
    gpu.device_minor = g.device_minor();
    gpu.kfd_node = g.kfd_node();
    gpu.gpu_id = g.gpu_id();
    gpu.hive_id = g.hive_id();
    gpu.mig_mode = g.mig_mode();
    for (const auto& [name, value] : g.properties()) gpu.properties[name] = value;
    for (const auto& l : g.links()) {
      GpuLink link;
      link.type = l.type();
      link.peer_id = l.peer_id();
      link.peer_node = l.peer_node();
      link.weight = l.weight();
      link.min_bandwidth = l.min_bandwidth();
      link.max_bandwidth = l.max_bandwidth();
      link.bidirectional = l.bidirectional();
      link.count = l.count();
      gpu.links.push_back(std::move(link));
    }
    for (const auto& path : g.device_paths()) gpu.device_paths.push_back(path);
    record.node.gpus.push_back(std::move(gpu));
  }
  for (const auto& id : in.used_gpu_ids()) record.used_gpu_ids.push_back(id);
  if (auto ok = validate(record); !ok) return named(source, ok.error().message);
  return record;
}

namespace {
json gpu_brief(const GpuDevice& gpu) {
  return json{{"id", gpu.id},           {"uuid", gpu.uuid},
              {"name", gpu.name},       {"pci_address", gpu.pci_address},
              {"gpu_id", gpu.gpu_id},   {"render_minor", gpu.render_minor},
              {"device_minor", gpu.device_minor}, {"device_paths", gpu.device_paths}};
}
}  // namespace

nlohmann::json to_json(const MatchPlan& plan, const GpuPropertiesRecord& source, const NodeInventory& target) {
  json mappings = json::array();
  for (const auto& a : plan.assignments) {
    const GpuDevice* from = find_gpu(source.node, a.source_id);
    const GpuDevice* to = find_gpu(target, a.target_id);
    mappings.push_back({{"source", from ? gpu_brief(*from) : json{{"id", a.source_id}}},
                        {"target", to ? gpu_brief(*to) : json{{"id", a.target_id}}}});
  }
  return json{{"version", GpuPropertiesRecord::kVersion},
              {"matched", true},
              {"mappings", std::move(mappings)},
              {"relaxations", plan.relaxations}};
}

nlohmann::json to_json(const MatchFailure& failure) {
  json rejections = json::array();
  for (const auto& r : failure.rejections)
    rejections.push_back({{"source_id", r.source_id},
                          {"candidate_id", r.candidate_id},
                          {"property", r.property},
                          {"detail", r.detail}});
  return json{{"version", GpuPropertiesRecord::kVersion},
              {"matched", false},
              {"summary", failure.summary},
              {"rejections", std::move(rejections)}};
}

}  // namespace gpuckpt
