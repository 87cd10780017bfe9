#include "criu-plugin/amd/sdma_packets.h"

#include <algorithm>

namespace gpuckpt::amd {
namespace {

constexpr std::uint32_t kSdmaOpNop = 0;
constexpr std::uint32_t kSdmaOpCopy = 1;
constexpr std::uint32_t kSdmaSubopCopyLinear = 0;

}  // namespace

std::vector<std::uint32_t> sdma_linear_copy_ib(std::uint64_t src, std::uint64_t dst, std::uint64_t count,
                                               bool count_minus_one) {
  std::vector<std::uint32_t> ib;
  ib.reserve(sdma_linear_copy_ib_dwords(count));
  for (std::uint64_t done = 0; done < count;) {
    const std::uint64_t n = std::min(kSdmaMaxLinearCopy, count - done);
    const std::uint64_t s = src + done, d = dst + done;
    ib.push_back(kSdmaOpCopy | (kSdmaSubopCopyLinear << 8));
    ib.push_back(static_cast<std::uint32_t>(count_minus_one ? n - 1 : n));
    ib.push_back(0);   // no endian swap
    ib.push_back(static_cast<std::uint32_t>(s));
    ib.push_back(static_cast<std::uint32_t>(s >> 32));
    ib.push_back(static_cast<std::uint32_t>(d));
    ib.push_back(static_cast<std::uint32_t>(d >> 32));
    done += n;
  }
  while (ib.size() % kSdmaIbAlignDwords != 0) ib.push_back(kSdmaOpNop);
  return ib;
}

std::size_t sdma_linear_copy_ib_dwords(std::uint64_t count) {
  const std::uint64_t packets = (count + kSdmaMaxLinearCopy - 1) / kSdmaMaxLinearCopy;
  const std::uint64_t dwords = packets * kSdmaCopyPacketDwords;
  return static_cast<std::size_t>((dwords + kSdmaIbAlignDwords - 1) / kSdmaIbAlignDwords * kSdmaIbAlignDwords);
}

}  // namespace gpuckpt::amd
