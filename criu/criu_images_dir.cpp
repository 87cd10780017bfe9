#include "criu/criu_images_dir.h"

#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>

namespace gpuckpt {

namespace fs = std::filesystem;

namespace {

// Global options of runc and crun that take their value as the next argument (before the verb).
bool takes_value(std::string_view option) {
  while (!option.empty() && option.front() == '-') option.remove_prefix(1);
  static constexpr std::array<std::string_view, 7> kWithValue = {"root",      "log",       "log-format", "criu",
                                                                 "rootless",  "log-level", "cgroup-manager"};
  for (auto name : kWithValue)
    if (option == name) return true;
  return false;
}

// Go's flag parsing (runc) takes -image-path as well as --image-path; crun's takes --image-path.
std::optional<std::string_view> image_path_option(std::string_view arg, bool& value_follows) {
  value_follows = false;
  for (std::string_view name : {"--image-path", "-image-path"}) {
    if (arg == name) {
      value_follows = true;
      return std::string_view();
    }
    if (arg.size() > name.size() && arg.substr(0, name.size()) == name && arg[name.size()] == '=')
      return arg.substr(name.size() + 1);
  }
  return std::nullopt;
}

Result<CriuImagesDir> checked(const fs::path& path, std::string found_by) {
  const std::string what = "CRIU's images directory " + path.string() + " (" + found_by + ")";
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return make_error(what + ": " + std::strerror(errno), errno);
  if (S_ISLNK(st.st_mode)) return make_error(what + " is a symlink: refused", ELOOP);
  if (!S_ISDIR(st.st_mode)) return make_error(what + " is not a directory", ENOTDIR);
  if (st.st_uid != ::geteuid())
    return make_error(what + " is owned by uid " + std::to_string(st.st_uid) + ", not by the hook's uid " +
                      std::to_string(::geteuid()) + ": refused", EPERM);
  struct stat inventory {};
  if (::lstat((path / "inventory.img").c_str(), &inventory) != 0 || !S_ISREG(inventory.st_mode))
    return make_error(what + " holds no inventory.img: not a CRIU checkpoint", ENOENT);
  return CriuImagesDir{path, std::move(found_by)};
}

std::vector<std::string> split_nul(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start < text.size()) {
    const std::size_t end = text.find('\0', start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  return out;
}

}  // namespace

RuntimeCommand parse_runtime_command(const std::vector<std::string>& argv) {
  RuntimeCommand command;
  if (argv.empty()) return command;
  command.program = fs::path(argv[0]).filename().string();
  std::size_t i = 1;
  for (; i < argv.size(); ++i) {
    const std::string& arg = argv[i];
    if (arg.empty() || arg.front() != '-') break;
    if (arg.find('=') == std::string::npos && takes_value(arg)) ++i;
  }
  if (i >= argv.size()) return command;
  command.verb = argv[i];
  if (command.verb != "restore") return command;
  for (++i; i < argv.size(); ++i) {
    bool value_follows = false;
    auto value = image_path_option(argv[i], value_follows);
    if (!value) continue;
    if (value_follows) {
      if (i + 1 < argv.size()) command.image_path = argv[++i];
    } else {
      command.image_path = std::string(*value);
    }
  }
  return command;
}

Result<std::optional<CriuImagesDir>> find_criu_images_dir(const HostRoot& host, int runtime_pid,
                                                          const fs::path& bundle) {
  const fs::path fallback = bundle / "checkpoint";
  if (runtime_pid > 0) {
    auto cmdline = host.read_file("proc/" + std::to_string(runtime_pid) + "/cmdline", 64 * 1024);
    const RuntimeCommand command = cmdline ? parse_runtime_command(split_nul(cmdline.value())) : RuntimeCommand{};
    if (command.verb == "restore") {
      if (command.image_path.empty()) {
        GPUCKPT_TRY(auto dir,
                    checked(fallback, command.program + " restore without --image-path: <bundle>/checkpoint"));
        return std::optional<CriuImagesDir>(std::move(dir));
      }
      if (command.image_path.front() != '/')
        return make_error(command.program + " restore --image-path " + command.image_path.substr(0, 256) +
                          " is relative: cannot tell where CRIU's images are", EINVAL);
      GPUCKPT_TRY(auto dir, checked(host.resolve(command.image_path), command.program + " restore --image-path"));
      return std::optional<CriuImagesDir>(std::move(dir));
    }
    if (command.verb == "create" || command.verb == "run") return std::optional<CriuImagesDir>();   // no restore
  }
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(fallback, ec))) return std::optional<CriuImagesDir>();
  GPUCKPT_TRY(auto dir,
              checked(fallback, "<bundle>/checkpoint (podman's layout; the runtime's command line said nothing)"));
  return std::optional<CriuImagesDir>(std::move(dir));
}

}  // namespace gpuckpt
