#include "podresources/cdi_devices.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <optional>
#include <regex>
#include <system_error>

#include <yaml-cpp/yaml.h>

#include "base/errno_text.h"
#include "base/json_reader.h"

namespace gpuckpt {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kMaxYamlDepth = 32;   // CDI specs need 6

bool is_spec_file_name(const fs::path& name) {
  const auto ext = name.extension();
  return ext == ".json" || ext == ".yaml" || ext == ".yml";
}

// A file of `dir` read without following a link, at most kCdiMaxSpecBytes; std::nullopt when it is not a regular
// file (skipped, as CDI's registry skips what it cannot load as a spec).
Result<std::optional<std::string>> read_spec_text(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ELOOP) return make_error("CDI spec " + file.string() + " is a symbolic link, which gpuckpt does not "
                                          "follow: put the spec file itself in the CDI directory", ELOOP);
    return make_error("cannot open CDI spec " + file.string() + ": " + errno_text(errno), errno);
  }
  struct stat st {};
  std::optional<std::string> text;
  Result<std::optional<std::string>> out = text;
  if (::fstat(fd, &st) != 0) {
    out = make_error("cannot examine CDI spec " + file.string() + ": " + errno_text(errno), errno);
  } else if (S_ISREG(st.st_mode)) {
    if (static_cast<std::uint64_t>(st.st_size) > kCdiMaxSpecBytes) {
      out = make_error("CDI spec " + file.string() + " is " + std::to_string(st.st_size) + " bytes; gpuckpt reads at most " +
                           std::to_string(kCdiMaxSpecBytes >> 20) + " MiB per spec", EFBIG);
    } else {
      std::string data(static_cast<std::size_t>(st.st_size), '\0');
      std::size_t got = 0;
      while (got < data.size()) {
        const ssize_t n = ::read(fd, data.data() + got, data.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += static_cast<std::size_t>(n);
      }
      data.resize(got);
      out = std::optional<std::string>(std::move(data));
    }
  }
  ::close(fd);
  return out;
}

// YAML -> JSON, so that one reader checks both forms. Scalars that are whole integers or booleans become those,
// others strings (CDI specs hold strings, integers and a few booleans).
Result<json> yaml_to_json(const YAML::Node& node, int depth, const std::string& source) {
  if (depth > kMaxYamlDepth) return make_error(source + ": nested deeper than " + std::to_string(kMaxYamlDepth) + " levels");
  switch (node.Type()) {
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& entry : node) {
        if (!entry.first.IsScalar()) return make_error(source + ": a mapping key is not a scalar");
        GPUCKPT_TRY(out[entry.first.Scalar()], yaml_to_json(entry.second, depth + 1, source));
      }
      return out;
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) {
        GPUCKPT_TRY(auto value, yaml_to_json(item, depth + 1, source));
        out.push_back(std::move(value));
      }
      return out;
    }
    case YAML::NodeType::Scalar: {
      const std::string& s = node.Scalar();
      std::int64_t number = 0;
      const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), number);
      if (!s.empty() && ec == std::errc() && end == s.data() + s.size() && node.Tag() != "!") return json(number);
      if ((s == "true" || s == "false") && node.Tag() != "!") return json(s == "true");
      return json(s);
    }
    default:
      return json(nullptr);
  }
}

Result<json> parse_spec(const fs::path& file, const std::string& text) {
  if (file.extension() == ".json") return parse_json(text, "CDI spec " + file.string());
  try {
    return yaml_to_json(YAML::Load(text), 0, "CDI spec " + file.string());
  } catch (const YAML::Exception& e) {
    return make_error("CDI spec " + file.string() + " is not valid YAML: " + e.what(), EBADMSG);
  }
}

struct Found {
  fs::path file;
  std::vector<ContainerGpuDevice> nodes;
};

// The device `device_name` of a spec of kind `kind`, if `spec` defines it.
Result<std::optional<std::vector<ContainerGpuDevice>>> device_in_spec(const json& spec, const fs::path& file,
                                                                      std::string_view kind, std::string_view device_name,
                                                                      const DeviceNumberLookup& lookup) {
  JsonFields fields("CDI spec " + file.string());
  std::string spec_kind;
  fields.get(spec, "", "kind", spec_kind, true);
  const json* devices = fields.array(spec, "", "devices");
  if (fields.failed()) return fields.error();
  if (spec_kind != kind || !devices) return std::optional<std::vector<ContainerGpuDevice>>();
  for (std::size_t i = 0; i < devices->size(); ++i) {
    const json& device = (*devices)[i];
    const std::string at = "devices[" + std::to_string(i) + "]";
    std::string name;
    fields.get(device, at, "name", name, true);
    if (fields.failed()) return fields.error();
    if (name != device_name) continue;
    std::vector<ContainerGpuDevice> nodes;
    const json* edits = fields.object(device, at, "containerEdits");
    const json* device_nodes = edits ? fields.array(*edits, at + ".containerEdits", "deviceNodes") : nullptr;
    if (fields.failed()) return fields.error();
    if (device_nodes && device_nodes->size() > kCdiMaxDeviceNodes)
      return make_error("CDI spec " + file.string() + ": device " + name + " lists " +
                            std::to_string(device_nodes->size()) + " device nodes; gpuckpt reads at most " +
                            std::to_string(kCdiMaxDeviceNodes), EMSGSIZE);
    for (std::size_t j = 0; device_nodes && j < device_nodes->size(); ++j) {
      const json& node = (*device_nodes)[j];
      const std::string node_at = at + ".containerEdits.deviceNodes[" + std::to_string(j) + "]";
      std::string path, host_path;
      std::int64_t major = -1, minor = -1;
      fields.get(node, node_at, "path", path, true);
      fields.get(node, node_at, "hostPath", host_path);
      fields.get_integer(node, node_at, "major", major, 0, 0xfff);
      fields.get_integer(node, node_at, "minor", minor, 0, 0xfffff);
      if (fields.failed()) return fields.error();
      if (!path.starts_with("/dev/") || fs::path(path).lexically_normal() != fs::path(path))
        return make_error("CDI spec " + file.string() + ": " + node_at + ".path \"" + path.substr(0, 256) +
                              "\" is not a canonical path under /dev", EINVAL);
      ContainerGpuDevice out{path, 0, 0, ""};
      if (major >= 0 && minor >= 0) {
        out.major = static_cast<std::uint32_t>(major);
        out.minor = static_cast<std::uint32_t>(minor);
      } else if (lookup) {
        // The runtime stats the host's node where the spec gives no numbers; so does gpuckpt, through its host root.
        if (auto numbers = lookup(host_path.empty() ? path : host_path)) std::tie(out.major, out.minor) = *numbers;
      }
      nodes.push_back(std::move(out));
    }
    return std::optional<std::vector<ContainerGpuDevice>>(std::move(nodes));
  }
  return std::optional<std::vector<ContainerGpuDevice>>();
}

// The definition of the device in one directory, if any; a second definition there is a conflict.
Result<std::optional<Found>> find_in_dir(const fs::path& dir, std::string_view kind, std::string_view device_name,
                                         const std::string& qualified, const DeviceNumberLookup& lookup) {
  std::error_code ec;
  fs::directory_iterator it(dir, ec);
  if (ec == std::errc::no_such_file_or_directory) return std::optional<Found>();
  if (ec) return make_error("cannot list CDI directory " + dir.string() + ": " + ec.message(), ec.value());
  std::vector<fs::path> files;
  for (; it != fs::directory_iterator(); it.increment(ec)) {
    if (ec) return make_error("cannot list CDI directory " + dir.string() + ": " + ec.message(), ec.value());
    if (!is_spec_file_name(it->path().filename())) continue;
    if (files.size() >= static_cast<std::size_t>(kCdiMaxSpecFiles))
      return make_error("CDI directory " + dir.string() + " holds more than " + std::to_string(kCdiMaxSpecFiles) +
                            " spec files; gpuckpt reads at most that many", EMSGSIZE);
    files.push_back(it->path());
  }
  std::sort(files.begin(), files.end());
  std::optional<Found> found;
  for (const auto& file : files) {
    GPUCKPT_TRY(auto text, read_spec_text(file));
    if (!text) continue;
    GPUCKPT_TRY(auto spec, parse_spec(file, *text));
    GPUCKPT_TRY(auto nodes, device_in_spec(spec, file, kind, device_name, lookup));
    if (!nodes) continue;
    if (found)
      return make_error("CDI device " + qualified + " is defined twice in " + dir.string() + " (" +
                            found->file.filename().string() + " and " + file.filename().string() +
                            "); the runtime refuses such a device too: remove one of the specs", EEXIST);
    found = Found{file, std::move(*nodes)};
  }
  return found;
}

}  // namespace

bool is_qualified_cdi_name(std::string_view name) {
  static const std::regex pattern(R"([A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_-]*=[A-Za-z0-9][A-Za-z0-9_.:-]*)");
  return name.size() <= 512 && std::regex_match(name.begin(), name.end(), pattern);
}

Result<std::vector<ContainerGpuDevice>> cdi_device_nodes(const CdiSpecDirs& dirs, std::string_view qualified_name,
                                                         const DeviceNumberLookup& lookup) {
  const std::string qualified(qualified_name.substr(0, 512));
  if (!is_qualified_cdi_name(qualified_name))
    return make_error("\"" + qualified + "\" is not a fully qualified CDI device name (vendor/class=name)", EINVAL);
  const auto eq = qualified_name.find('=');
  const std::string_view kind = qualified_name.substr(0, eq);
  const std::string_view device_name = qualified_name.substr(eq + 1);
  std::optional<Found> found;
  // Later directories win, as in CDI's registry.
  for (const auto& dir : dirs.dirs) {
    GPUCKPT_TRY(auto in_dir, find_in_dir(dir, kind, device_name, qualified, lookup));
    if (in_dir) found = std::move(in_dir);
  }
  if (!found) {
    std::string where;
    for (const auto& dir : dirs.dirs) where += (where.empty() ? "" : ", ") + dir.string();
    return make_error("no CDI spec in " + (where.empty() ? std::string("(no CDI directory)") : where) +
                          " defines device " + qualified + ": the DRA driver writes it when it prepares the claim; "
                          "is the CDI directory the runtime reads mounted there (gpuckpt-nri --cdi-spec-dir)?",
                      ENOENT);
  }
  return std::move(found->nodes);
}

}  // namespace gpuckpt
