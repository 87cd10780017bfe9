// The agent's API request bodies (POST /v1/checkpoints, /v1/restores, /v1/images) as any client may send them.
#include "node/requests.h"

using namespace gpuckpt;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  (void)node::parse_checkpoint_request(body);
  (void)node::parse_restore_request(body);
  (void)node::parse_image_request(body);
  return 0;
}
