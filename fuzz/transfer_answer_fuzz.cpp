// What a transfer target (another agent, or whatever answers at its address) says to the sending side, as
// upload_chunks, ask_missing_chunks and push_archive read it: a chunk PUT's answer, the missing chunks, the state of
// an incoming archive, a commit's answer, an error body. The first byte picks the reader; the rest is the answer.
// Every shape must come back as a value or an error, never an exception (which on an upload thread would end the
// agent), and what the sender acts on stays inside its bounds.
#include "node/archive_transfer.h"
#include "node/chunk_transfer.h"

#include <cstdint>
#include <set>
#include <string_view>

using namespace gpuckpt;
namespace cs = gpuckpt::chunk_store;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string_view answer(reinterpret_cast<const char*>(data) + 1, size - 1);
  const std::string who = "the fuzz target";
  switch (data[0] % 5) {
    case 0:
      (void)node::parse_chunk_put_answer(answer, who);
      break;
    case 1: {
      // Asked about two digests: what comes back is one of them, or an error.
      static const std::set<cs::Digest> asked = {*cs::parse_digest(std::string(64, 'a'), "a"),
                                                 *cs::parse_digest(std::string(64, 'b'), "b")};
      auto missing = node::parse_missing_answer(answer, asked, who);
      if (missing)
        for (const auto& d : *missing)
          if (!asked.contains(d)) __builtin_trap();
      break;
    }
    case 2:
      (void)node::parse_incoming_state(answer, who);
      break;
    case 3: {
      auto committed = node::parse_commit_answer(answer, who);
      if (committed && !committed->chunks.is_object() && !committed->chunks.is_null()) __builtin_trap();
      break;
    }
    default: {
      // An error reaches the job's error, its record and a log line: one line, bounded.
      const std::string text = node::peer_says(400, answer);
      if (text.size() > node::kMaxPeerMessageChars + 32) __builtin_trap();
      for (char c : text)
        if (c == '\n' || c == '\r') __builtin_trap();
      break;
    }
  }
  return 0;
}
