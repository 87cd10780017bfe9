#include "nri-plugin/nri_session.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "base/log.h"
#include "nri-plugin/ttrpc_mux.h"
#include "ttrpc/envelope.pb.h"

namespace gpuckpt::nri {

namespace {

constexpr std::uint32_t kRegisterStream = 1;   // ttrpc clients use odd stream ids
constexpr int kGrpcUnknown = 2;
constexpr int kGrpcUnimplemented = 12;

Result<void> write_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(std::string("writing to the NRI socket: ") + std::strerror(errno), errno);
    done += static_cast<std::size_t>(n);
  }
  return {};
}

Result<void> send(int fd, std::uint32_t conn, std::uint32_t stream, MessageType type, const std::string& body) {
  return write_all(fd, encode_mux_frame(conn, encode_ttrpc({stream, type, 0, body})));
}

Result<void> answer(int fd, NriPlugin& plugin, const TtrpcMessage& message) {
  ttrpc::Request request;
  ttrpc::Response response;
  if (!request.ParseFromString(message.body)) {
    response.mutable_status()->set_code(kGrpcUnknown);
    response.mutable_status()->set_message("not a ttrpc request");
  } else {
    auto result = plugin.handle(request.method(), request.payload());
    if (result) {
      response.set_payload(std::move(result.value()));
    } else {
      log::warn(result.error().message);
      response.mutable_status()->set_code(result.error().errno_value == ENOSYS ? kGrpcUnimplemented : kGrpcUnknown);
      response.mutable_status()->set_message(result.error().message);
    }
  }
  return send(fd, kPluginServiceConn, message.stream, MessageType::Response, response.SerializeAsString());
}

}  // namespace

Result<int> connect_nri_socket(const std::string& path) {
  sockaddr_un address{};
  if (path.size() >= sizeof(address.sun_path)) return make_error("NRI socket path too long: " + path);
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return make_error(std::string("socket: ") + std::strerror(errno), errno);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0) {
    const int e = errno;
    ::close(fd);
    return make_error("cannot connect to the NRI socket " + path + ": " + std::strerror(e) +
                          " (is NRI enabled in the runtime? containerd: [plugins.\"io.containerd.nri.v1.nri\"] disable = false)",
                      e);
  }
  return fd;
}

Result<void> serve(int fd, NriPlugin& plugin, const SessionOptions& options) {
  ::nri::pkg::api::v1alpha1::RegisterPluginRequest registration;
  registration.set_plugin_name(options.plugin_name);
  registration.set_plugin_idx(options.plugin_idx);
  ttrpc::Request request;
  request.set_service("nri.pkg.api.v1alpha1.Runtime");
  request.set_method("RegisterPlugin");
  request.set_payload(registration.SerializeAsString());
  auto sent = send(fd, kRuntimeServiceConn, kRegisterStream, MessageType::Request, request.SerializeAsString());
  if (!sent) return sent;
  MuxDecoder decoder;
  char buffer[64 * 1024];
  while (!plugin.shutdown_requested()) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return make_error(std::string("reading the NRI socket: ") + std::strerror(errno), errno);
    if (n == 0) return {};   // the runtime went away
    auto fed = decoder.feed(std::string_view(buffer, static_cast<std::size_t>(n)));
    if (!fed) return fed;
    while (auto item = decoder.next()) {
      const auto& [conn, message] = *item;
      if (conn == kPluginServiceConn && message.type == MessageType::Request) {
        auto answered = answer(fd, plugin, message);
        if (!answered) return answered;
      } else if (conn == kRuntimeServiceConn && message.type == MessageType::Response &&
                 message.stream == kRegisterStream) {
        ttrpc::Response response;
        if (!response.ParseFromString(message.body))
          return make_error("the runtime's answer to RegisterPlugin is not a ttrpc response", EPROTO);
        if (response.has_status() && response.status().code() != 0)
          return make_error("the runtime refused the registration of NRI plugin " + options.plugin_idx + "-" +
                                options.plugin_name + ": " + response.status().message(),
                            EPERM);
        log::info("NRI: plugin " + options.plugin_idx + "-" + options.plugin_name + " registered");
      }
    }
  }
  return {};
}

}  // namespace gpuckpt::nri
