#include "criu-plugin/cpu_pages/pagemap_image.h"

#include <cerrno>
#include <cstring>

#include "criu_pagemap.pb.h"

namespace gpuckpt::cpu_pages {
namespace {

std::uint32_t read_u32(std::span<const std::byte> bytes, std::size_t at) {
  std::uint32_t v = 0;
  std::memcpy(&v, bytes.data() + at, sizeof v);   // CRIU writes host order; gpuckpt runs on x86-64 and arm64 (LE)
  return v;
}

}  // namespace

std::uint64_t PagemapImage::file_bytes() const {
  std::uint64_t bytes = 0;
  for (const PageRun& r : runs)
    if (r.in_file) bytes += r.nr_pages * kPageSize;
  return bytes;
}

bool PagemapImage::any_in_parent() const {
  for (const PageRun& r : runs)
    if (r.in_parent) return true;
  return false;
}

bool is_pagemap_name(std::string_view name) {
  if (!name.starts_with("pagemap-") || !name.ends_with(".img")) return false;
  std::string_view id = name.substr(8, name.size() - 8 - 4);
  if (id.starts_with("shmem-")) id.remove_prefix(6);
  return !id.empty() && id.size() <= 20 && id.find_first_not_of("0123456789") == std::string_view::npos;
}

std::string pages_file_name(std::uint32_t pages_id) { return "pages-" + std::to_string(pages_id) + ".img"; }

Result<PagemapImage> parse_pagemap_image(std::span<const std::byte> bytes, std::string_view source) {
  const auto bad = [&](const std::string& what) {
    return make_error(std::string(source) + ": not a CRIU pagemap image: " + what, EBADMSG);
  };
  if (bytes.size() > kMaxPagemapBytes) return bad("larger than " + std::to_string(kMaxPagemapBytes) + " bytes");
  std::size_t at = 0;
  if (bytes.size() >= 4 && read_u32(bytes, 0) == kCommonImageMagic) at = 4;
  if (bytes.size() < at + 4 || read_u32(bytes, at) != kPagemapMagic) return bad("no PAGEMAP magic");
  at += 4;
  PagemapImage image;
  bool head = true;
  while (at < bytes.size()) {
    if (bytes.size() - at < 4) return bad("a truncated record length at byte " + std::to_string(at));
    const std::uint32_t length = read_u32(bytes, at);
    at += 4;
    if (length > bytes.size() - at) return bad("a record of " + std::to_string(length) + " bytes at byte " +
                                              std::to_string(at) + " runs past the end");
    const auto* data = reinterpret_cast<const char*>(bytes.data() + at);
    at += length;
    if (head) {
      pb::PagemapHead h;
      if (!h.ParseFromArray(data, static_cast<int>(length)) || !h.has_pages_id() || h.pages_id() == 0)
        return bad("its head names no page image (pages_id)");
      image.pages_id = h.pages_id();
      head = false;
      continue;
    }
    pb::PagemapEntry e;
    if (!e.ParseFromArray(data, static_cast<int>(length)) || !e.has_vaddr() ||
        (!e.has_nr_pages() && !e.has_compat_nr_pages()))
      return bad("entry " + std::to_string(image.runs.size()) + " does not parse");
    // CRIU 4.2 and newer count in the 64-bit field and leave the old one 0; older CRIU wrote only the old one.
    const std::uint64_t pages = e.has_nr_pages() ? e.nr_pages() : e.compat_nr_pages();
    constexpr std::uint64_t kMaxPages = (1ull << 47) / kPageSize;   // x86-64 user space
    if (e.vaddr() % kPageSize != 0 || pages == 0 || pages > kMaxPages || e.vaddr() + pages * kPageSize < e.vaddr())
      return bad("entry " + std::to_string(image.runs.size()) + " is not a run of whole pages");
    PageRun run;
    run.vaddr = e.vaddr();
    run.nr_pages = pages;
    if (e.has_flags()) {
      run.in_parent = (e.flags() & kPageParent) != 0;
      run.in_file = (e.flags() & kPagePresent) != 0 && !run.in_parent;
    } else {
      run.in_parent = e.in_parent();
      run.in_file = !run.in_parent;
    }
    image.runs.push_back(run);
  }
  if (head) return bad("no head");
  return image;
}

}  // namespace gpuckpt::cpu_pages
