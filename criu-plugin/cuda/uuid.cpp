#include "criu-plugin/cuda/uuid.h"

namespace gpuckpt::cuda {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

Result<Uuid> parse_uuid(std::string_view text, std::string_view source) {
  auto bad = [&](const std::string& why) {
    return make_error(std::string(source) + ": '" + std::string(text) + "' is not a GPU UUID (" + why +
                      "); expected GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx as nvidia-smi -L prints it");
  };
  std::string_view rest = text;
  if (rest.substr(0, 4) == "GPU-") rest.remove_prefix(4);
  Uuid uuid{};
  std::size_t nibbles = 0;
  for (char c : rest) {
    if (c == '-') continue;
    int v = hex_value(c);
    if (v < 0) return bad(std::string("unexpected character '") + c + "'");
    if (nibbles >= 32) return bad("more than 32 hex digits");
    auto& byte = uuid[nibbles / 2];
    byte = static_cast<std::uint8_t>(nibbles % 2 == 0 ? v << 4 : byte | v);
    ++nibbles;
  }
  if (nibbles != 32) return bad(std::to_string(nibbles) + " hex digits, need 32");
  return uuid;
}

std::string format_uuid(const Uuid& uuid) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "GPU-";
  for (std::size_t i = 0; i < uuid.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out.push_back('-');
    out.push_back(kHex[uuid[i] >> 4]);
    out.push_back(kHex[uuid[i] & 0xf]);
  }
  return out;
}

}  // namespace gpuckpt::cuda
