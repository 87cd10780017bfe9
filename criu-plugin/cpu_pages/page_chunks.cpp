#include "criu-plugin/cpu_pages/page_chunks.h"

#include <algorithm>

namespace gpuckpt::cpu_pages {

std::vector<gpu_image::Region> cut_by_window(const PagemapImage& image, std::uint64_t window) {
  std::vector<gpu_image::Region> out;
  std::uint64_t offset = 0;                 // in the file
  std::uint64_t open_window = UINT64_MAX;   // the window the last range belongs to
  for (const PageRun& run : image.runs) {
    if (!run.in_file) continue;
    std::uint64_t vaddr = run.vaddr;
    std::uint64_t left = run.nr_pages * kPageSize;
    while (left > 0) {
      const std::uint64_t this_window = vaddr / window;
      const std::uint64_t piece = std::min(left, (this_window + 1) * window - vaddr);
      // Runs come in rising address order within a pagemap, so a window met again is the one just open.
      if (this_window == open_window && !out.empty() && out.back().length + piece <= window) out.back().length += piece;
      else out.push_back({offset, piece});
      open_window = this_window;
      offset += piece;
      vaddr += piece;
      left -= piece;
    }
  }
  return out;
}

}  // namespace gpuckpt::cpu_pages
