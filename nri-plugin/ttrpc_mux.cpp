#include "nri-plugin/ttrpc_mux.h"

#include <cerrno>

namespace gpuckpt::nri {

namespace {

void put_u32(std::string& out, std::uint32_t v) {
  out.push_back(static_cast<char>(v >> 24));
  out.push_back(static_cast<char>(v >> 16));
  out.push_back(static_cast<char>(v >> 8));
  out.push_back(static_cast<char>(v));
}

std::uint32_t get_u32(std::string_view in) {
  const auto b = [&](std::size_t i) { return static_cast<std::uint32_t>(static_cast<unsigned char>(in[i])); };
  return (b(0) << 24) | (b(1) << 16) | (b(2) << 8) | b(3);
}

constexpr std::size_t kMuxHeader = 8;
constexpr std::size_t kTtrpcHeader = 10;

}  // namespace

std::string encode_mux_frame(std::uint32_t conn, std::string_view payload) {
  std::string out;
  out.reserve(kMuxHeader + payload.size());
  put_u32(out, conn);
  put_u32(out, static_cast<std::uint32_t>(payload.size()));
  out.append(payload);
  return out;
}

std::string encode_ttrpc(const TtrpcMessage& message) {
  std::string out;
  out.reserve(kTtrpcHeader + message.body.size());
  put_u32(out, static_cast<std::uint32_t>(message.body.size()));
  put_u32(out, message.stream);
  out.push_back(static_cast<char>(message.type));
  out.push_back(static_cast<char>(message.flags));
  out.append(message.body);
  return out;
}

Result<void> MuxDecoder::feed(std::string_view bytes) {
  pending_.append(bytes);
  std::size_t at = 0;
  while (pending_.size() - at >= kMuxHeader) {
    const std::uint32_t conn = get_u32(std::string_view(pending_).substr(at));
    const std::uint32_t length = get_u32(std::string_view(pending_).substr(at + 4));
    if (conn != kPluginServiceConn && conn != kRuntimeServiceConn)
      return make_error("NRI frame on connection " + std::to_string(conn) + ", which NRI does not have (1: plugin "
                        "service, 2: runtime service)", EPROTO);
    if (length > kMaxMuxPayload)
      return make_error("NRI frame of " + std::to_string(length) + " bytes on connection " + std::to_string(conn) +
                        " exceeds the 16 MiB limit", EPROTO);
    if (pending_.size() - at - kMuxHeader < length) break;
    auto& stream = streams_[conn];
    stream.append(pending_, at + kMuxHeader, length);
    at += kMuxHeader + length;
    auto drained = drain(conn);
    if (!drained) return drained;
  }
  pending_.erase(0, at);
  return {};
}

Result<void> MuxDecoder::drain(std::uint32_t conn) {
  auto& stream = streams_[conn];
  std::size_t at = 0;
  while (stream.size() - at >= kTtrpcHeader) {
    const std::string_view view(stream);
    const std::uint32_t length = get_u32(view.substr(at));
    if (length > kMaxTtrpcMessage)
      return make_error("ttrpc message of " + std::to_string(length) + " bytes exceeds the 4 MiB limit", EPROTO);
    if (stream.size() - at - kTtrpcHeader < length) break;
    TtrpcMessage message;
    message.stream = get_u32(view.substr(at + 4));
    const auto type = static_cast<std::uint8_t>(view[at + 8]);
    if (type != 1 && type != 2) return make_error("ttrpc message of unknown type " + std::to_string(type), EPROTO);
    message.type = static_cast<MessageType>(type);
    message.flags = static_cast<std::uint8_t>(view[at + 9]);
    message.body.assign(view.substr(at + kTtrpcHeader, length));
    ready_.emplace_back(conn, std::move(message));
    at += kTtrpcHeader + length;
  }
  stream.erase(0, at);
  return {};
}

std::optional<std::pair<std::uint32_t, TtrpcMessage>> MuxDecoder::next() {
  if (ready_.empty()) return std::nullopt;
  auto out = std::move(ready_.front());
  ready_.pop_front();
  return out;
}

}  // namespace gpuckpt::nri
