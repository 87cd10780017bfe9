#include "runtime/oci_hooks_rules.h"

#include <algorithm>
#include <cctype>
#include <regex>

#include <nlohmann/json.hpp>

namespace gpuckpt {

namespace {

using nlohmann::json;

HooksEntryRejection reject(std::string reason) { return {std::move(reason), false}; }

// Go's encoding/json matches a field name exactly first, then case-insensitively.
const json* field(const json& object, std::string_view name) {
  if (!object.is_object()) return nullptr;
  if (auto it = object.find(std::string(name)); it != object.end()) return &*it;
  for (auto it = object.begin(); it != object.end(); ++it) {
    const std::string& key = it.key();
    if (key.size() == name.size() &&
        std::equal(key.begin(), key.end(), name.begin(), [](char a, char b) { return std::tolower(a) == std::tolower(b); }))
      return &*it;
  }
  return nullptr;
}

// What decoding into the library's Go types refuses (a JSON null decodes into anything as "absent").
bool is_string_list(const json& v) {
  return v.is_null() || (v.is_array() && std::all_of(v.begin(), v.end(), [](const json& s) { return s.is_string() || s.is_null(); }));
}
bool is_absent(const json* v) { return !v || v->is_null(); }

std::optional<std::string> type_error(const json& object, std::initializer_list<std::pair<const char*, char>> fields) {
  for (const auto& [name, kind] : fields) {
    const json* v = field(object, name);
    if (is_absent(v)) continue;
    const bool ok = kind == 's'   ? v->is_string()
                    : kind == 'l' ? is_string_list(*v)
                    : kind == 'b' ? v->is_boolean()
                    : kind == 'i' ? v->is_number_integer()
                    : kind == 'm' ? v->is_object() && std::all_of(v->begin(), v->end(), [](const json& s) { return s.is_string(); })
                                  : v->is_object();
    if (!ok) return "cannot decode field \"" + std::string(name) + "\" (" + v->type_name() + ")";
  }
  return std::nullopt;
}

std::vector<std::string> strings_of(const json* v) {
  std::vector<std::string> out;
  if (v && v->is_array())
    for (const auto& s : *v) out.push_back(s.is_string() ? s.get<std::string>() : std::string());
  return out;
}

// Go's regexp is RE2; std::regex's ECMAScript grammar is the nearest here. RE2's leading inline flags ("(?i)")
// are not ECMAScript: they are set aside before the check so that a pattern Go accepts is not reported.
bool compiles(const std::string& pattern) {
  static const std::regex kInlineFlags(R"(^\(\?[imsU]+\))");
  try {
    std::regex(std::regex_replace(pattern, kInlineFlags, ""), std::regex::ECMAScript);
    return true;
  } catch (const std::regex_error&) {
    return false;
  }
}

}  // namespace

const std::vector<std::string>& oci_hook_stages() {
  static const std::vector<std::string> kStages = {"prestart",       "createRuntime", "createContainer",
                                                   "startContainer", "poststart",     "poststop"};
  return kStages;
}

std::optional<HooksEntryRejection> judge_hooks_entry(std::string_view content,
                                                     const std::vector<std::string>& extension_stages,
                                                     const std::function<bool(const std::string&)>& binary_exists) {
  const json doc = json::parse(content, nullptr, false);
  if (doc.is_discarded()) return reject("version check: not JSON");
  if (!doc.is_object() && !doc.is_null()) return reject(std::string("version check: a JSON ") + doc.type_name() + ", not an object");
  const json* version_field = field(doc, "version");
  if (!is_absent(version_field) && !version_field->is_string()) return reject("version check: \"version\" is not a string");
  const std::string version = is_absent(version_field) ? "" : version_field->get<std::string>();

  std::string path;
  std::vector<std::string> stages, patterns;
  if (version == "1.0.0") {
    if (auto e = type_error(doc, {{"hook", 'o'}, {"when", 'o'}, {"stages", 'l'}})) return reject("1.0.0: " + *e);
    const json* hook = field(doc, "hook");
    const json* when = field(doc, "when");
    if (hook)
      if (auto e = type_error(*hook, {{"path", 's'}, {"args", 'l'}, {"env", 'l'}, {"timeout", 'i'}})) return reject("1.0.0: " + *e);
    if (when)
      if (auto e = type_error(*when, {{"always", 'b'}, {"annotations", 'm'}, {"commands", 'l'}, {"hasBindMounts", 'b'}}))
        return reject("1.0.0: " + *e);
    const json* p = hook ? field(*hook, "path") : nullptr;
    path = is_absent(p) ? "" : p->get<std::string>();
    if (path.empty()) return reject("missing required property: hook.path");
    if (!binary_exists(path)) return HooksEntryRejection{"hook.path " + path + " does not exist", true};
    if (when) {
      if (const json* a = field(*when, "annotations"); !is_absent(a))
        for (auto it = a->begin(); it != a->end(); ++it) {
          if (!compiles(it.key())) return reject("invalid annotation key \"" + it.key() + "\"");
          if (!compiles(it.value().get<std::string>())) return reject("invalid annotation value \"" + it.value().get<std::string>() + "\"");
        }
      for (const auto& c : strings_of(field(*when, "commands")))
        if (!compiles(c)) return reject("invalid command \"" + c + "\"");
    }
    const json* s = field(doc, "stages");
    if (is_absent(s)) return reject("missing required property: stages");
    stages = strings_of(s);
  } else if (version == "0.1.0" || version.empty()) {
    if (auto e = type_error(doc, {{"hook", 's'}, {"arguments", 'l'}, {"stages", 'l'}, {"stage", 'l'}, {"cmds", 'l'},
                                  {"cmd", 'l'}, {"annotations", 'l'}, {"annotation", 'l'}, {"hasbindmounts", 'b'}}))
      return reject("0.1.0: " + *e);
    const json* hook = field(doc, "hook");
    if (is_absent(hook)) return reject("0.1.0: missing required property: hook");
    const json* both[2] = {field(doc, "stages"), field(doc, "stage")};
    if (!is_absent(both[0]) && !is_absent(both[1])) return reject("0.1.0: cannot set both 'stage' and 'stages'");
    const json* s = is_absent(both[0]) ? both[1] : both[0];
    if (is_absent(s)) return reject("0.1.0: missing required property: stages");
    for (const char* pair : {"cmd", "annotation"}) {
      const std::string plural = std::string(pair) + "s";
      if (!is_absent(field(doc, plural)) && !is_absent(field(doc, pair)))
        return reject("0.1.0: cannot set both '" + std::string(pair) + "' and '" + plural + "'");
    }
    path = hook->get<std::string>();
    stages = strings_of(s);
    if (path.empty()) return reject("missing required property: hook.path");
    if (!binary_exists(path)) return HooksEntryRejection{"hook.path " + path + " does not exist", true};
    for (const char* key : {"cmds", "cmd", "annotations", "annotation"})
      for (const auto& c : strings_of(field(doc, key)))
        if (!compiles(c)) return reject("invalid pattern \"" + c + "\" in \"" + key + "\"");
  } else {
    return reject("unrecognized hook version: \"" + version + "\"");
  }

  const auto& standard = oci_hook_stages();
  for (const auto& stage : stages) {
    if (std::find(standard.begin(), standard.end(), stage) == standard.end() &&
        std::find(extension_stages.begin(), extension_stages.end(), stage) == extension_stages.end())
      return reject("unknown stage \"" + stage + "\"");
  }
  return std::nullopt;
}

std::vector<HooksRuntime> node_hooks_runtimes(const HostRoot& system) {
  std::vector<HooksRuntime> out;
  const auto first_present = [&](std::initializer_list<const char*> paths) -> std::string {
    for (const char* p : paths)
      if (system.exists(p)) return p;
    return "";
  };

  // /var/run is usually an absolute symlink to /run: HostRoot refuses to follow it out of a fixture root.
  std::string crio = first_present({"/etc/crio", "/run/crio/crio.sock", "/usr/bin/crio", "/usr/local/bin/crio", "/usr/sbin/crio"});
  if (crio.empty() && system.exists("/var/run/crio/crio.sock")) crio = "/var/run/crio/crio.sock";
  if (!crio.empty()) {
    HooksRuntime r{"CRI-O", crio, {"/usr/share/containers/oci/hooks.d"}, "CRI-O's default hooks_dir", {}};
    // hooks_dir = [ "/a", "/b", ] in crio.conf, then its drop-ins in name order: the last one that sets it wins.
    static const std::regex kHooksDir(R"((^|\n)\s*hooks_dir\s*=\s*\[([^\]]*)\])");
    static const std::regex kQuoted(R"re("([^"]*)"|'([^']*)')re");
    std::vector<std::string> files = {"etc/crio/crio.conf"};
    if (auto dropins = system.list_dir("etc/crio/crio.conf.d"))
      for (const auto& name : *dropins)
        if (name.ends_with(".conf")) files.push_back("etc/crio/crio.conf.d/" + name);
    for (const auto& file : files) {
      auto conf = system.read_file(file, 1 << 20);
      if (!conf) continue;
      for (std::sregex_iterator it(conf->begin(), conf->end(), kHooksDir), end; it != end; ++it) {
        std::vector<std::string> dirs;
        const std::string list = (*it)[2].str();
        for (std::sregex_iterator q(list.begin(), list.end(), kQuoted); q != end; ++q)
          dirs.push_back((*q)[1].matched ? (*q)[1].str() : (*q)[2].str());
        r.dirs = dirs;
        r.dirs_source = "CRI-O's hooks_dir (/" + file + ")";
      }
    }
    out.push_back(std::move(r));
  }
  std::string podman = first_present({"/usr/bin/podman", "/usr/local/bin/podman"});
  if (!podman.empty())
    out.push_back({"podman", podman, {"/usr/share/containers/oci/hooks.d", "/etc/containers/oci/hooks.d"},
                   "podman's default hooks directories", {"precreate", "poststop"}});
  return out;
}

}  // namespace gpuckpt
