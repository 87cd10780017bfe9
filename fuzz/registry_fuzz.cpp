// What a registry or its token service answers, as the push reads it: a WWW-Authenticate challenge, a token
// service's JSON, an error body. The first byte picks the parser; the rest is the answer.
#include "node/registry_push.h"

#include <cstdint>
#include <string_view>

using namespace gpuckpt;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view answer(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      const auto params = node::challenge_params(answer);
      for (const auto& [key, value] : params)
        if (key.size() > answer.size() || value.size() > answer.size()) __builtin_trap();   // never more than it read
      break;
    }
    case 1: {
      auto token = node::token_from_answer(answer, "the fuzz token service");
      if (token && (token->empty() || token->size() > 16384 || token->find('\n') != std::string::npos))
        __builtin_trap();   // a token is one non-empty line of at most 16 KiB
      break;
    }
    default: {
      const std::string text = node::registry_error_text(401, answer, answer);
      for (char c : text)
        if (c == '\n' || c == '\r') __builtin_trap();   // error texts reach log lines: one line, always
      break;
    }
  }
  return 0;
}
