// A checkpoint archive as it arrives (kubelet's directory, an API restore): validation, inspect, the restore
// edits (spec.dump and the /dev tmpfs images) and the rewrite.
#include "fuzz/fuzz_support.h"

using namespace gpuckpt;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto archive = fuzz::scratch() / "archive.tar";
  fuzz::write_file(archive, std::string_view(reinterpret_cast<const char*>(data), size));
  const auto limits = fuzz::small_limits();
  if (!list_archive(archive, limits)) return 0;
  auto info = inspect_checkpoint_archive(archive, limits);
  (void)read_archive_entry(archive, "spec.dump", limits);
  if (!info) return 0;
  auto edit = restore_edits(info.value(), fuzz::fixed_plan(), fuzz::fixed_numbers(), limits);
  if (edit && edit.value()) {
    (void)rewrite_archive(archive, fuzz::scratch() / "rewritten.tar", *edit.value(), limits);
    (void)send_archive(archive, [](const char*, std::size_t) { return Result<void>(); }, *edit.value(), limits);
  }
  return 0;
}
