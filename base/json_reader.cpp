#include "base/json_reader.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

namespace gpuckpt {

namespace {

std::string quoted_key(std::string_view key) {
  for (char c : key)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') return "[…]";
  return std::string(key);
}

// Builds the document from nlohmann's SAX events, holding the limits as it goes. Not nlohmann's callback parser:
// that one scans the parent container for discarded values after every object it closes, so an array of n empty
// objects cost O(n^2) (300k of them in a few KB took 18 s). Here every event costs O(1).
class BoundedBuilder {
 public:
  using json = nlohmann::json;
  explicit BoundedBuilder(const JsonLimits& limits) : limits_(limits) {}

  bool null() { return value(nullptr); }
  bool boolean(bool v) { return value(v); }
  bool number_integer(json::number_integer_t v) { return value(v); }
  bool number_unsigned(json::number_unsigned_t v) { return value(v); }
  bool number_float(json::number_float_t v, const json::string_t&) { return value(v); }
  bool string(json::string_t& v) { return value(std::move(v)); }
  bool binary(json::binary_t& v) { return value(json::binary(std::move(v))); }
  bool start_object(std::size_t) { return open(json::object()); }
  bool start_array(std::size_t) { return open(json::array()); }
  bool key(json::string_t& k) {
    if (!count()) return false;
    member_ = &(*open_.back())[k];
    return true;
  }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& e) {
    problem_ = e.id == 406 ? "malformed JSON (a number is out of range)"
                           : "malformed JSON (syntax error at byte " + std::to_string(position) + ")";
    return false;
  }

  json& root() { return root_; }
  const std::string& problem() const { return problem_; }
  bool over_limit() const { return over_limit_; }

 private:
  bool count() {
    if (++values_ <= limits_.max_values) return true;
    return refuse("more than " + std::to_string(limits_.max_values) + " values");
  }
  bool refuse(std::string what) {
    problem_ = "JSON " + std::move(what) + "; refused";
    over_limit_ = true;
    return false;
  }
  // Where the next value goes: the root, the end of the open array, or the member the last key named.
  json* place(json v) {
    if (open_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    *member_ = std::move(v);
    return member_;
  }
  bool value(json v) {
    if (!count()) return false;
    place(std::move(v));
    return true;
  }
  bool open(json container) {
    if (open_.size() >= static_cast<std::size_t>(limits_.max_depth))
      return refuse("nested deeper than " + std::to_string(limits_.max_depth) + " levels");
    if (!count()) return false;
    open_.push_back(place(std::move(container)));
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  const JsonLimits& limits_;
  json root_;
  std::vector<json*> open_;    // the containers being filled, innermost last (a child never moves while open)
  json* member_ = nullptr;
  std::size_t values_ = 0;
  std::string problem_;
  bool over_limit_ = false;
};

}  // namespace

Result<nlohmann::json> parse_json(std::string_view text, std::string_view source, const JsonLimits& limits) {
  const std::string where(source);
  if (text.size() > limits.max_bytes)
    return make_error(where + ": " + std::to_string(text.size()) + " bytes of JSON, over the limit of " +
                      std::to_string(limits.max_bytes), EFBIG);
  BoundedBuilder builder(limits);
  try {
    if (nlohmann::json::sax_parse(text.begin(), text.end(), &builder)) return std::move(builder.root());
  } catch (const nlohmann::json::exception&) {   // the SAX path reports through parse_error; kept as a boundary
    return make_error(where + ": malformed JSON");
  }
  return make_error(where + ": " + builder.problem(), builder.over_limit() ? EFBIG : EINVAL);
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
  GPUCKPT_TRY(auto json, parse_json(text, path.string(), limits));
  return std::optional<nlohmann::json>(std::move(json));
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
