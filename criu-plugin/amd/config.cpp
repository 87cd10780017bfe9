#include "criu-plugin/amd/config.h"

#include <cstdlib>
#include <limits>
#include <mutex>
#include <string>

#include "base/log.h"

namespace gpuckpt::amd {

Result<std::uint64_t> parse_size(std::string_view text, std::string_view name) {
  const auto bad = [&](const char* why) {
    return make_error(std::string(name) + "=" + std::string(text) + ": " + why +
                      "; expected bytes with an optional K, M or G suffix, e.g. 512M");
  };
  if (text.empty()) return bad("empty value");
  std::uint64_t value = 0;
  std::size_t i = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    const std::uint64_t digit = static_cast<std::uint64_t>(text[i] - '0');
    if (value > (std::numeric_limits<std::uint64_t>::max() - digit) / 10) return bad("too large");
    value = value * 10 + digit;
  }
  if (i == 0) return bad("not a number");
  unsigned shift = 0;
  if (i < text.size()) {
    switch (text[i]) {
      case 'k': case 'K': shift = 10; break;
      case 'm': case 'M': shift = 20; break;
      case 'g': case 'G': shift = 30; break;
      default: return bad("unknown suffix");
    }
    if (++i != text.size()) return bad("trailing characters");
  }
  if (value > (std::numeric_limits<std::uint64_t>::max() >> shift)) return bad("too large");
  value <<= shift;
  if (value == 0) return bad("must be at least 1 byte");
  return value;
}

Result<bool> parse_bool(std::string_view text, std::string_view name) {
  if (text == "1" || text == "yes" || text == "YES" || text == "true") return true;
  if (text == "0" || text == "no" || text == "NO" || text == "false") return false;
  return make_error(std::string(name) + "=" + std::string(text) + ": expected 1/0, yes/no or true/false");
}

Result<AmdConfig> AmdConfig::from_env() {
  AmdConfig config;
  if (const char* v = std::getenv("GPUCKPT_AMD_MAX_BUFFER_SIZE")) {
    GPUCKPT_TRY(config.max_buffer_size, parse_size(v, "GPUCKPT_AMD_MAX_BUFFER_SIZE"));
  }
  if (const char* v = std::getenv("GPUCKPT_AMD_PARALLEL_RESTORE")) {
    GPUCKPT_TRY(config.parallel_restore, parse_bool(v, "GPUCKPT_AMD_PARALLEL_RESTORE"));
  }
  if (const char* v = std::getenv("GPUCKPT_AMD_SDMA")) {
    GPUCKPT_TRY(config.use_sdma, parse_bool(v, "GPUCKPT_AMD_SDMA"));
  }
  return config;
}

void AmdConfig::log_once() const {
  static std::once_flag once;
  std::call_once(once, [this] {
    log::param("GPUCKPT_AMD_MAX_BUFFER_SIZE", std::to_string(max_buffer_size));
    log::param("GPUCKPT_AMD_PARALLEL_RESTORE", parallel_restore ? "1" : "0");
    log::param("GPUCKPT_AMD_SDMA", use_sdma ? "1" : "0");
  });
}

}  // namespace gpuckpt::amd
