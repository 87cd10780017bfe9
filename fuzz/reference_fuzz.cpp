// Writing a chunk store's references (gpumem/chunk_store.h put_ref, check_ref, remove_ref) as imports, transfer
// commits, dumps and `gpuckpt store unref` do, in any order and with any bytes: the input is a sequence of
//   u8 op | u8 text length | text
// where op's low 2 bits pick the reference (of 4 names over 2 checkpoint ids), bit 2 picks remove instead of put and
// bit 3 makes that remove one that only takes the reference when its bytes are the text (what retention does).
// What must hold after every step, against a model of what was first written: a kept reference is never replaced
// (other bytes are refused with EEXIST and leave the file as it was; the same bytes are no change), a removed one
// is gone and can be made again, a remove with other bytes leaves it, check_ref says what put_ref would, and refs/
// holds nothing but the references.
#include <dirent.h>

#include <array>
#include <cstdio>
#include <map>
#include <string>

#include "gpumem/chunk_store.h"
#include "fuzz/fuzz_support.h"

using namespace gpuckpt;
namespace cs = chunk_store;

namespace {

void violated(const std::string& what) {
  std::fprintf(stderr, "reference_fuzz: invariant violated: %s\n", what.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::array<std::string, 4> names = {
      cs::ref_name(std::string(32, 'a'), 7), cs::ref_name(std::string(32, 'a'), 8),
      cs::ref_name(std::string(32, 'b'), 7), cs::ref_name(std::string(32, 'b'), 4194304)};
  static std::unique_ptr<cs::Store> store = [] {
    auto opened = cs::Store::open(fuzz::scratch() / "reference-store", true);
    if (!opened) std::abort();
    return std::move(*opened);
  }();
  std::error_code ec;
  std::filesystem::remove_all(store->root() / cs::kRefsDir, ec);
  std::map<std::string, std::string> kept;
  std::string_view in(reinterpret_cast<const char*>(data), size);
  for (int steps = 0; in.size() >= 2 && steps < 32; ++steps) {
    const unsigned op = static_cast<unsigned char>(in[0]);
    const std::size_t length = std::min<std::size_t>(static_cast<unsigned char>(in[1]), in.size() - 2);
    const std::string text(in.substr(2, length));
    in.remove_prefix(2 + length);
    const std::string& name = names[op & 3u];
    const auto it = kept.find(name);
    if (op & 4u) {
      const bool only_if = (op & 8u) != 0;
      const bool goes = it != kept.end() && (!only_if || it->second == text);
      auto removed = only_if ? store->remove_ref(name, text) : store->remove_ref(name);
      if (!removed || *removed != goes) violated("remove_ref of " + name + " did not do what the model says");
      if (goes) kept.erase(it);
    } else {
      const bool free = it == kept.end() || it->second == text;
      if (static_cast<bool>(store->check_ref(name, text)) != free) violated("check_ref disagrees with the model");
      auto made = store->put_ref(name, text);
      if (free != static_cast<bool>(made)) violated("put_ref of " + name + " " + (free ? "refused" : "replaced it"));
      if (!made && made.error().errno_value != EEXIST) violated("a refusal that is not EEXIST");
      if (made && *made != (it == kept.end())) violated("put_ref said it made a reference that was there");
      kept.try_emplace(name, text);
    }
    for (const auto& n : names) {
      auto now = store->read_ref(n, 1024);
      const auto model = kept.find(n);
      if (model == kept.end() ? static_cast<bool>(now) : (!now || *now != model->second))
        violated(n + " is not what was first written");
    }
  }
  // Nothing else in refs/: no temporary file stays behind a refusal.
  std::size_t entries = 0;
  if (DIR* dir = ::opendir((store->root() / cs::kRefsDir).c_str())) {
    while (const dirent* e = ::readdir(dir))
      entries += std::string_view(e->d_name) == "." || std::string_view(e->d_name) == ".." ? 0 : 1;
    ::closedir(dir);
  }
  if (entries != kept.size()) violated("refs/ holds " + std::to_string(entries) + " files, not the " +
                                       std::to_string(kept.size()) + " references");
  return 0;
}
