// Every archive walk that does work an input may declare: the /dev tmpfs image rewrite (renumber_device_nodes),
// an archive arriving as a stream (receive_archive, the runtime's pipe), the extraction of a validated archive,
// and the JSON reader on the same bytes. All run under a time budget (ArchiveLimits::deadline) and small size
// limits: an input that makes any of them work past libFuzzer's -timeout (a padding writer, a quadratic parse,
// a decompression that ignores the budget) is a finding like a crash.
#include <chrono>

#include "archive/directory_archive.h"
#include "base/json_reader.h"
#include "fuzz/fuzz_support.h"

using namespace gpuckpt;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  auto limits = fuzz::small_limits();
  limits.deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  (void)renumber_device_nodes(bytes, {{"nvidia0", {"nvidia1", 195, 1}}, {"nvidia1", {"nvidia0", 195, 0}}}, limits);
  std::size_t offset = 0;
  const ArchiveByteSource source = [&](char* buffer, std::size_t room) -> Result<std::size_t> {
    const std::size_t n = std::min(room, bytes.size() - offset);
    std::copy_n(bytes.data() + offset, n, buffer);
    offset += n;
    return n;
  };
  const auto received = fuzz::scratch() / "received.tar.zst";
  if (receive_archive(source, "the fuzz stream", received, ArchiveEdit{}, limits)) {
    const auto into = fuzz::scratch() / "extracted";
    std::error_code ec;
    std::filesystem::remove_all(into, ec);
    std::filesystem::create_directories(into, ec);
    (void)extract_archive(received, into, limits);
    std::filesystem::remove_all(into, ec);
  }
  (void)parse_json(bytes, "fuzz.json");
  return 0;
}
