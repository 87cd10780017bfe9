// Where a page image is cut into chunks. Along the process's virtual addresses, not the file's offsets: every chunk
// holds the pages of one 2 MiB-aligned window of virtual memory (from one or several runs), so a process whose
// memory barely changed cuts the same chunks at its next checkpoint, even where a page that became present (a
// stack that grew, one more small allocation) shifts every later page of the file. Fixed file offsets would turn
// one new page into a new copy of everything after it.
#pragma once

#include <cstdint>
#include <vector>

#include "gpumem/gpu_image.h"
#include "criu-plugin/cpu_pages/pagemap_image.h"

namespace gpuckpt::cpu_pages {

inline constexpr std::uint64_t kWindowBytes = 2u << 20;

// The page image's bytes as ranges of the file (Region: start = file offset, length), back to back from 0, one per
// window of `window` bytes (a multiple of 4096) that holds pages of runs in the file; together they cover
// image.file_bytes() exactly. Runs must be in file order (as CRIU writes them); runs not in the file hold none.
std::vector<gpu_image::Region> cut_by_window(const PagemapImage& image, std::uint64_t window = kWindowBytes);

}  // namespace gpuckpt::cpu_pages
