// SDMA linear-copy command buffers (IBs) as the kernel's SDMA emitters build them (amdgpu sdma_v4_0.c and later:
// sdma_vX_emit_copy_buffer, sdma_vX_ring_pad_ib): per packet the COPY/LINEAR header, the byte count (minus one
// from family AI, SDMA v4, on), a parameter dword of 0 and the source and destination addresses as lo/hi halves;
// the IB padded with NOP dwords (0) to a multiple of 8 dwords, which the SDMA engine fetches in. Pure functions,
// so the layout is tested without a GPU; sdma_copier.cpp submits them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpuckpt::amd {

// Bytes one linear-copy packet moves at most: below every SDMA generation's limit (0x1fffff on SDMA v2/v3,
// 0x400000 from v4).
inline constexpr std::uint64_t kSdmaMaxLinearCopy = 1ull << 21;
inline constexpr std::uint32_t kSdmaCopyPacketDwords = 7;
inline constexpr std::uint32_t kSdmaIbAlignDwords = 8;

// The IB that copies `count` bytes from GPU address `src` to `dst`. `count_minus_one`: the family encodes the
// byte count as count - 1 (AI and later).
std::vector<std::uint32_t> sdma_linear_copy_ib(std::uint64_t src, std::uint64_t dst, std::uint64_t count,
                                               bool count_minus_one);

// The most dwords sdma_linear_copy_ib returns for a copy of up to `count` bytes (to size the IB buffer).
std::size_t sdma_linear_copy_ib_dwords(std::uint64_t count);

}  // namespace gpuckpt::amd
