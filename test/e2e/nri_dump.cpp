// nri-dump: a test-only NRI plugin that records what a runtime tells its plugins at CreateContainer, to capture a
// runtime's exact shape (e.g. CRI-O's restored container: test/fixtures/crio/). It never adjusts anything.
//   nri-dump --socket PATH --out DIR [--idx NN]
// For each CreateContainer: DIR/<n>-<container name>.pb (the request as the runtime sent it, unknown fields
// included) and DIR/<n>-<container name>.json (the same through gpuckpt's vendored NRI API). Exits when the
// runtime closes the connection.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <google/protobuf/util/json_util.h>

#include "nri-plugin/nri_session.h"
#include "nri-plugin/ttrpc_mux.h"
#include "ttrpc/envelope.pb.h"

namespace api = ::nri::pkg::api::v1alpha1;
using gpuckpt::nri::kPluginServiceConn;
using gpuckpt::nri::kRuntimeServiceConn;
using gpuckpt::nri::MessageType;

namespace {

bool send(int fd, std::uint32_t conn, std::uint32_t stream, MessageType type, const std::string& body) {
  const std::string frame = gpuckpt::nri::encode_mux_frame(conn, gpuckpt::nri::encode_ttrpc({stream, type, 0, body}));
  return ::write(fd, frame.data(), frame.size()) == static_cast<ssize_t>(frame.size());
}

void save(const std::filesystem::path& out, int n, const std::string& payload) {
  api::CreateContainerRequest request;
  request.ParseFromString(payload);
  const std::string base = (out / (std::to_string(n) + "-" + request.container().name())).string();
  std::ofstream(base + ".pb", std::ios::binary) << payload;
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(request, &json, options);
  std::ofstream(base + ".json") << json;
  std::fprintf(stderr, "nri-dump: CreateContainer %s -> %s.json\n", request.container().name().c_str(), base.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket, out, idx = "90";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string arg = argv[i];
    if (arg == "--socket") socket = argv[i + 1];
    else if (arg == "--out") out = argv[i + 1];
    else if (arg == "--idx") idx = argv[i + 1];
  }
  if (socket.empty() || out.empty()) {
    std::fprintf(stderr, "usage: nri-dump --socket PATH --out DIR [--idx NN]\n");
    return 2;
  }
  std::filesystem::create_directories(out);
  auto fd = gpuckpt::nri::connect_nri_socket(socket);
  if (!fd) {
    std::fprintf(stderr, "nri-dump: %s\n", fd.error().message.c_str());
    return 1;
  }
  api::RegisterPluginRequest registration;
  registration.set_plugin_name("dump");
  registration.set_plugin_idx(idx);
  ttrpc::Request register_call;
  register_call.set_service("nri.pkg.api.v1alpha1.Runtime");
  register_call.set_method("RegisterPlugin");
  register_call.set_payload(registration.SerializeAsString());
  if (!send(*fd, kRuntimeServiceConn, 1, MessageType::Request, register_call.SerializeAsString())) return 1;
  gpuckpt::nri::MuxDecoder decoder;
  char buffer[64 * 1024];
  int created = 0;
  for (;;) {
    const ssize_t n = ::read(*fd, buffer, sizeof buffer);
    if (n <= 0) return 0;
    if (!decoder.feed(std::string_view(buffer, static_cast<std::size_t>(n)))) return 1;
    while (auto item = decoder.next()) {
      const auto& [conn, message] = *item;
      if (conn == kRuntimeServiceConn) {
        std::fprintf(stderr, "nri-dump: registered\n");
        continue;
      }
      ttrpc::Request request;
      if (conn != kPluginServiceConn || message.type != MessageType::Request || !request.ParseFromString(message.body)) continue;
      ttrpc::Response response;
      if (request.method() == "Configure") {
        api::ConfigureResponse configure;
        configure.set_events(1 << (api::CREATE_CONTAINER - 1));
        response.set_payload(configure.SerializeAsString());
      } else if (request.method() == "CreateContainer") {
        save(out, ++created, request.payload());
        response.set_payload(api::CreateContainerResponse().SerializeAsString());
      }
      if (!send(*fd, kPluginServiceConn, message.stream, MessageType::Response, response.SerializeAsString())) return 1;
      if (request.method() == "Shutdown") return 0;
    }
  }
}
