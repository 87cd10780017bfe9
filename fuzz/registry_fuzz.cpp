// What a registry or its token service answers, as the push and the chunk pull read it: a WWW-Authenticate
// challenge, a token service's JSON, an error body, a chunks' artifact manifest. The first byte picks the parser; the
// rest is the answer.
#include "node/registry_chunks.h"
#include "node/registry_client.h"

#include <cstdint>
#include <string_view>

using namespace gpuckpt;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view answer(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 4) {
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
    case 3: {
      auto page = node::parse_chunks_manifest(answer, "the fuzz registry's manifest");
      if (page) {   // what the pull acts on is inside its bounds
        if (page->chunks.size() > node::kMaxChunkLayers || page->pages < 1 || page->pages > node::kMaxChunkPages ||
            !node::is_sha256(page->subject))
          __builtin_trap();
        for (const auto& c : page->chunks)
          if (!node::is_sha256(c.blob_digest) || c.size <= 32 || c.size > (64u << 20) + 32) __builtin_trap();
      }
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
