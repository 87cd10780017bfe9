// Reading JSON that gpuckpt did not just write itself (archive metadata, annotations, the hook's stdin, state
// files, API bodies): every such document goes through parse_json. Its limits hold WHILE parsing, so a document
// that is too deep or has too many values is refused before it is built, and what comes out is at most
// max_depth levels deep: copying, dumping and destroying it cannot exhaust the stack. JsonFields then reads
// typed fields and reports the first wrong one by its path, as an Error value (never nlohmann's exception text).
#pragma once

#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/result.h"

namespace gpuckpt {

struct JsonLimits {
  std::size_t max_bytes = 16 << 20;
  int max_depth = 64;                   // nested objects/arrays; OCI specs and gpuckpt records need < 10
  std::size_t max_values = 1 << 20;     // every object, array, key and scalar counts
};

// An error names `source` ("spec.dump in /x.tar.zst") and says which limit or where the syntax broke.
Result<nlohmann::json> parse_json(std::string_view text, std::string_view source, const JsonLimits& limits = {});

// The JSON document in `path` (not followed if it is a symlink); std::nullopt when there is no such file.
Result<std::optional<nlohmann::json>> read_json_file(const std::filesystem::path& path, const JsonLimits& limits = {});

// "object", "array", "string", "number", ...: what error messages show instead of an untrusted value.
std::string json_type(const nlohmann::json& value);

// Typed field access that remembers the first problem as "<source>: <path>: <problem>". Unknown keys are
// ignored (formats only grow). Each getter leaves `out` unchanged when the field is absent or wrong.
class JsonFields {
 public:
  explicit JsonFields(std::string source) : source_(std::move(source)) {}

  bool failed() const { return !problem_.empty(); }
  Error error() const { return make_error(source_.empty() ? problem_ : source_ + ": " + problem_); }
  void fail(const std::string& path, const std::string& problem);

  // The field `key` of `object` at `path`, or nullptr (a failure when `required`, or when `object` is no object).
  const nlohmann::json* field(const nlohmann::json& object, const std::string& path, std::string_view key,
                              bool required = false);
  const nlohmann::json* object(const nlohmann::json& object, const std::string& path, std::string_view key,
                               bool required = false);
  const nlohmann::json* array(const nlohmann::json& object, const std::string& path, std::string_view key,
                              bool required = false);

  void get(const nlohmann::json& object, const std::string& path, std::string_view key, std::string& out,
           bool required = false);
  void get(const nlohmann::json& object, const std::string& path, std::string_view key, bool& out);
  void get(const nlohmann::json& object, const std::string& path, std::string_view key,
           std::vector<std::string>& out, bool required = false);
  void get(const nlohmann::json& object, const std::string& path, std::string_view key,
           std::map<std::string, std::string>& out, bool required = false);
  // Integers only (1.9 and "1" are wrong, not 1), within [min, max] (4294967297 is not 1).
  void get_integer(const nlohmann::json& object, const std::string& path, std::string_view key, std::int64_t& out,
                   std::int64_t min, std::int64_t max, bool required = false);
  void get_unsigned(const nlohmann::json& object, const std::string& path, std::string_view key, std::uint64_t& out,
                    std::uint64_t max, bool required = false);
  template <class Int>
  void get_integer(const nlohmann::json& object, const std::string& path, std::string_view key, Int& out,
                   bool required = false) {
    if constexpr (std::is_unsigned_v<Int>) {
      std::uint64_t wide = out;
      get_unsigned(object, path, key, wide, std::numeric_limits<Int>::max(), required);
      out = static_cast<Int>(wide);
    } else {
      std::int64_t wide = out;
      get_integer(object, path, key, wide, std::numeric_limits<Int>::min(), std::numeric_limits<Int>::max(), required);
      out = static_cast<Int>(wide);
    }
  }

  // The document's "version": required, an integer from 1 to `newest`; a newer one says to upgrade.
  int version(const nlohmann::json& document, int newest, std::string_view what);

 private:
  std::string source_;
  std::string problem_;
};

// One integer value read strictly (see JsonFields::get_integer); std::nullopt when it is no integer or out of range.
std::optional<std::int64_t> json_integer(const nlohmann::json& value, std::int64_t min, std::int64_t max);
std::optional<std::uint64_t> json_unsigned(const nlohmann::json& value, std::uint64_t max);

}  // namespace gpuckpt
