// NRI's wire format, decoded and encoded without I/O: one unix socket carries several byte streams ("mux"
// frames: [connection id u32 BE][length u32 BE][bytes], connection 1 = the plugin's service, 2 = the runtime's),
// and each stream carries ttrpc messages ([length u32 BE][stream id u32 BE][type u8][flags u8][body]) whose body
// is a ttrpc Request or Response (proto/ttrpc_envelope.proto). No C++ ttrpc library exists; this is the part of
// ttrpc NRI uses: unary calls, no streaming.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"

namespace gpuckpt::nri {

inline constexpr std::uint32_t kPluginServiceConn = 1;    // the runtime calls the plugin here
inline constexpr std::uint32_t kRuntimeServiceConn = 2;   // the plugin calls the runtime here
inline constexpr std::size_t kMaxMuxPayload = 1 << 24;    // NRI's own limit per frame
inline constexpr std::size_t kMaxTtrpcMessage = 4 << 20;  // ttrpc's default message limit

enum class MessageType : std::uint8_t { Request = 1, Response = 2 };

struct TtrpcMessage {
  std::uint32_t stream = 0;
  MessageType type = MessageType::Request;
  std::uint8_t flags = 0;
  std::string body;
};

std::string encode_mux_frame(std::uint32_t conn, std::string_view payload);
std::string encode_ttrpc(const TtrpcMessage& message);

// Bytes from the socket in, (connection, ttrpc message) out, in order. A frame or message over the limits, an
// unknown message type, or a connection id NRI does not use (only 1 and 2 exist: the peer cannot make the decoder
// keep a buffer per id it invents) is an error: the caller drops the connection. What the decoder holds is
// bounded: one partial frame (16 MiB) and one partial message per connection (4 MiB each).
class MuxDecoder {
 public:
  Result<void> feed(std::string_view bytes);
  std::optional<std::pair<std::uint32_t, TtrpcMessage>> next();

 private:
  Result<void> drain(std::uint32_t conn);
  std::string pending_;                          // socket bytes not yet a whole mux frame
  std::map<std::uint32_t, std::string> streams_; // per connection: bytes not yet a whole ttrpc message
  std::deque<std::pair<std::uint32_t, TtrpcMessage>> ready_;
};

}  // namespace gpuckpt::nri
