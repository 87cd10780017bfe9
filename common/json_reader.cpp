#include "common/json_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

namespace gpuckpt {

namespace {

// Thrown by the parse callback to stop at the first exceeded limit; caught in parse_json only.
struct LimitExceeded {
  std::string what;
};

std::string quoted_key(std::string_view key) {
  for (char c : key)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return "[…]";
  return std::string(key);
}

}  // namespace

Result<nlohmann::json> parse_json(std::string_view text, std::string_view source, const JsonLimits& limits) {
  const std::string where(source);
  if (text.size() > limits.max_bytes)
    return make_error(where + ": " + std::to_string(text.size()) + " bytes of JSON, over the limit of " +
                      std::to_string(limits.max_bytes), EFBIG);
  std::size_t values = 0;
  const nlohmann::json::parser_callback_t bound = [&](int depth, nlohmann::json::parse_event_t event,
                                                      nlohmann::json&) {
    using Event = nlohmann::json::parse_event_t;
    if ((event == Event::object_start || event == Event::array_start) && depth >= limits.max_depth)
      throw LimitExceeded{"nested deeper than " + std::to_string(limits.max_depth) + " levels"};
    if (event != Event::object_end && event != Event::array_end && ++values > limits.max_values)
      throw LimitExceeded{"more than " + std::to_string(limits.max_values) + " values"};
    return true;
  };
  try {
    auto json = nlohmann::json::parse(text.begin(), text.end(), bound, /*allow_exceptions=*/true);
    return json;
  } catch (const LimitExceeded& e) {
    return make_error(where + ": JSON " + e.what + "; refused", EFBIG);
  } catch (const nlohmann::json::parse_error& e) {
    return make_error(where + ": malformed JSON (syntax error at byte " + std::to_string(e.byte) + ")");
  } catch (const nlohmann::json::exception&) {   // out_of_range: a number beyond double
    return make_error(where + ": malformed JSON (a number is out of range)");
  }
}

Result<std::optional<nlohmann::json>> read_json_file(const std::filesystem::path& path, const JsonLimits& limits) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) return std::optional<nlohmann::json>{};
    return make_error("cannot read " + path.string() + ": " + std::strerror(errno), errno);
  }
  struct stat st {};
  std::string text;
  bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  if (regular) {
    char chunk[64 * 1024];
    for (;;) {
      const ssize_t n = ::read(fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) break;
      text.append(chunk, static_cast<std::size_t>(n));
      if (text.size() > limits.max_bytes) break;
    }
  }
  ::close(fd);
  if (!regular) return make_error(path.string() + " is not a regular file");
  auto json = parse_json(text, path.string(), limits);
  if (!json) return json.error();
  return std::optional<nlohmann::json>(std::move(json.value()));
}

std::string json_type(const nlohmann::json& value) {
  if (value.is_number_integer()) return "integer";
  if (value.is_number_float()) return "fraction";
  return value.type_name();
}

std::optional<std::int64_t> json_integer(const nlohmann::json& value, std::int64_t min, std::int64_t max) {
  if (!value.is_number_integer()) return std::nullopt;
  if (value.is_number_unsigned()) {
    const auto u = value.get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return std::nullopt;
    const auto v = static_cast<std::int64_t>(u);
    if (v < min || v > max) return std::nullopt;
    return v;
  }
  const auto v = value.get<std::int64_t>();
  if (v < min || v > max) return std::nullopt;
  return v;
}

std::optional<std::uint64_t> json_unsigned(const nlohmann::json& value, std::uint64_t max) {
  if (!value.is_number_integer()) return std::nullopt;
  if (!value.is_number_unsigned() && value.get<std::int64_t>() < 0) return std::nullopt;
  const auto v = value.get<std::uint64_t>();
  if (v > max) return std::nullopt;
  return v;
}

void JsonFields::fail(const std::string& path, const std::string& problem) {
  if (problem_.empty()) problem_ = path.empty() ? problem : path + ": " + problem;
}

const nlohmann::json* JsonFields::field(const nlohmann::json& object, const std::string& path, std::string_view key,
                                        bool required) {
  if (!object.is_object()) {
    fail(path, "expected an object, found " + json_type(object));
    return nullptr;
  }
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) {
    if (required) fail(path, "missing required field '" + quoted_key(key) + "'");
    return nullptr;
  }
  return &*it;
}

const nlohmann::json* JsonFields::object(const nlohmann::json& object, const std::string& path,
                                         std::string_view key, bool required) {
  const nlohmann::json* v = field(object, path, key, required);
  if (v && !v->is_object()) {
    fail(path + "." + quoted_key(key), "expected an object, found " + json_type(*v));
    return nullptr;
  }
  return v;
}

const nlohmann::json* JsonFields::array(const nlohmann::json& object, const std::string& path, std::string_view key,
                                        bool required) {
  const nlohmann::json* v = field(object, path, key, required);
  if (v && !v->is_array()) {
    fail(path + "." + quoted_key(key), "expected an array, found " + json_type(*v));
    return nullptr;
  }
  return v;
}

void JsonFields::get(const nlohmann::json& object, const std::string& path, std::string_view key, std::string& out,
                     bool required) {
  const nlohmann::json* v = field(object, path, key, required);
  if (!v) return;
  if (!v->is_string()) return fail(path + "." + quoted_key(key), "expected a string, found " + json_type(*v));
  out = v->get<std::string>();
}

void JsonFields::get(const nlohmann::json& object, const std::string& path, std::string_view key, bool& out) {
  const nlohmann::json* v = field(object, path, key, false);
  if (!v) return;
  if (!v->is_boolean()) return fail(path + "." + quoted_key(key), "expected true or false, found " + json_type(*v));
  out = v->get<bool>();
}

void JsonFields::get(const nlohmann::json& object, const std::string& path, std::string_view key,
                     std::vector<std::string>& out, bool required) {
  const nlohmann::json* v = array(object, path, key, required);
  if (!v) return;
  std::vector<std::string> values;
  for (std::size_t i = 0; i < v->size(); ++i) {
    if (!(*v)[i].is_string())
      return fail(path + "." + quoted_key(key) + "[" + std::to_string(i) + "]",
                  "expected a string, found " + json_type((*v)[i]));
    values.push_back((*v)[i].get<std::string>());
  }
  out = std::move(values);
}

void JsonFields::get(const nlohmann::json& object, const std::string& path, std::string_view key,
                     std::map<std::string, std::string>& out, bool required) {
  const nlohmann::json* v = this->object(object, path, key, required);
  if (!v) return;
  std::map<std::string, std::string> values;
  for (const auto& [name, value] : v->items()) {
    if (!value.is_string())
      return fail(path + "." + quoted_key(key) + "." + quoted_key(name), "expected a string, found " + json_type(value));
    values[name] = value.get<std::string>();
  }
  out = std::move(values);
}

void JsonFields::get_integer(const nlohmann::json& object, const std::string& path, std::string_view key,
                             std::int64_t& out, std::int64_t min, std::int64_t max, bool required) {
  const nlohmann::json* v = field(object, path, key, required);
  if (!v) return;
  const auto value = json_integer(*v, min, max);
  if (!value) {
    if (!v->is_number_integer()) return fail(path + "." + quoted_key(key), "expected an integer, found " + json_type(*v));
    return fail(path + "." + quoted_key(key),
                "integer out of range (expected " + std::to_string(min) + " to " + std::to_string(max) + ")");
  }
  out = *value;
}

void JsonFields::get_unsigned(const nlohmann::json& object, const std::string& path, std::string_view key,
                              std::uint64_t& out, std::uint64_t max, bool required) {
  const nlohmann::json* v = field(object, path, key, required);
  if (!v) return;
  const auto value = json_unsigned(*v, max);
  if (!value) {
    if (!v->is_number_integer())
      return fail(path + "." + quoted_key(key), "expected a non-negative integer, found " + json_type(*v));
    return fail(path + "." + quoted_key(key), "integer out of range (expected 0 to " + std::to_string(max) + ")");
  }
  out = *value;
}

int JsonFields::version(const nlohmann::json& document, int newest, std::string_view what) {
  const nlohmann::json* v = field(document, "", "version", true);
  if (!v) return 0;
  const auto value = json_integer(*v, std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max());
  if (!value || *value < 1) {
    fail("version", "expected an integer from 1, found " + (value ? std::to_string(*value) : json_type(*v)));
    return 0;
  }
  if (*value > newest) {
    fail("version", std::string(what) + " version " + std::to_string(*value) +
                        " is newer than this gpuckpt understands (" + std::to_string(newest) +
                        "); upgrade gpuckpt on this node");
    return 0;
  }
  return static_cast<int>(*value);
}

}  // namespace gpuckpt
