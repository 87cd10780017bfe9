// CRIU's pagemap images, read: which page image (pages-<id>.img) holds a process's (or a shared mapping's) pages,
// and which virtual pages lie in it, in file order. The dump reads them from the image directory CRIU has just
// written; they are still bounded and checked, since the layout of a page image is only ever derived from them.
//
//   file = [IMG_COMMON_MAGIC u32] PAGEMAP magic u32 | (u32 length | PagemapHead) | (u32 length | PagemapEntry)*
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace gpuckpt::cpu_pages {

inline constexpr std::uint32_t kCommonImageMagic = 0x54564319;
inline constexpr std::uint32_t kPagemapMagic = 0x56084025;
inline constexpr std::uint32_t kPageParent = 1;    // PE_PARENT: the pages are in a parent image directory
inline constexpr std::uint32_t kPageLazy = 2;      // PE_LAZY
inline constexpr std::uint32_t kPagePresent = 4;   // PE_PRESENT
inline constexpr std::uint64_t kPageSize = 4096;
inline constexpr std::size_t kMaxPagemapBytes = 256u << 20;

// A run of virtual pages; those `in_file` are the next nr_pages * 4096 bytes of the page image.
struct PageRun {
  std::uint64_t vaddr = 0;
  std::uint64_t nr_pages = 0;
  bool in_file = false;
  bool in_parent = false;
};

struct PagemapImage {
  std::uint32_t pages_id = 0;
  std::vector<PageRun> runs;
  std::uint64_t file_bytes() const;   // what the page image must hold: the pages of the runs in_file
  bool any_in_parent() const;
};

// Whether `name` is a pagemap image's (pagemap-<id>.img, pagemap-shmem-<id>.img).
bool is_pagemap_name(std::string_view name);
std::string pages_file_name(std::uint32_t pages_id);   // pages-<id>.img

// The error names `source` and what is wrong (magic, a truncated record, a record that does not parse).
Result<PagemapImage> parse_pagemap_image(std::span<const std::byte> bytes, std::string_view source);

}  // namespace gpuckpt::cpu_pages
