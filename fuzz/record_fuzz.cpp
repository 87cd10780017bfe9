// The GPU properties record in both encodings (JSON annotations and API, protobuf in CRIU images) and the
// gpuckpt-gpus.json document around it. A record that reads must read again after writing it out.
#include "base/json_reader.h"
#include "gpu/properties_record.h"
#include "fuzz/fuzz_support.h"

using namespace gpuckpt;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  if (auto record = read_record(bytes, "fuzz")) {
    if (!parse_record(to_json(record.value()).dump(), "again") ||
        !record_from_protobuf(to_protobuf(record.value()), "again"))
      __builtin_trap();   // a record that validated must survive its own serialisations
  }
  (void)record_from_protobuf(bytes, "fuzz.img");
  if (auto json = parse_json(bytes, "fuzz.json")) {
    if (auto checkpoint = checkpoint_record_from_json(json.value(), "fuzz.json"))
      if (!checkpoint_record_from_json(parse_json(to_json(checkpoint.value()).dump(), "again").value(), "again"))
        __builtin_trap();
  }
  return 0;
}
