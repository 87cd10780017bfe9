// The SDMA command buffer as the kernel's sdma_v4_0+ emitters build it — packet fields, byte
// counts split at the per-packet limit, and NOP padding to a multiple of 8 dwords.
#include <catch2/catch_test_macros.hpp>
#include <initializer_list>

#include "criu-plugin/amd/sdma_packets.h"

namespace gpuckpt::amd::test {

TEST_CASE("SDMA: one small copy is one linear-copy packet padded with a NOP to 8 dwords", "[unit]") {
  const auto ib = sdma_linear_copy_ib(0x1'2345'6000ull, 0x7'0000'1000ull, 100, true);
  REQUIRE(ib.size() == 8);
  CHECK(ib[0] == 0x00000001u);   // SDMA_OP_COPY, SDMA_SUBOP_COPY_LINEAR
  CHECK(ib[1] == 99u);           // byte count - 1 (family AI on)
  CHECK(ib[2] == 0u);
  CHECK(ib[3] == 0x23456000u);
  CHECK(ib[4] == 0x1u);
  CHECK(ib[5] == 0x00001000u);
  CHECK(ib[6] == 0x7u);
  CHECK(ib[7] == 0u);            // SDMA_OP_NOP
}

TEST_CASE("SDMA: a copy over the per-packet limit is split, addresses advance, counts add up", "[unit]") {
  const std::uint64_t count = 2 * kSdmaMaxLinearCopy + 12345;
  const auto ib = sdma_linear_copy_ib(0x1000, 0x100000000ull, count, true);
  REQUIRE(ib.size() == 24);   // 3 packets of 7 dwords, 3 NOPs
  std::uint64_t moved = 0;
  for (std::size_t p = 0; p < 3; ++p) {
    const std::uint32_t* packet = ib.data() + p * kSdmaCopyPacketDwords;
    CHECK(packet[0] == 1u);
    const std::uint64_t bytes = packet[1] + 1ull;
    CHECK(bytes <= kSdmaMaxLinearCopy);
    CHECK((packet[3] | static_cast<std::uint64_t>(packet[4]) << 32) == 0x1000 + moved);
    CHECK((packet[5] | static_cast<std::uint64_t>(packet[6]) << 32) == 0x100000000ull + moved);
    moved += bytes;
  }
  CHECK(moved == count);
  for (std::size_t i = 21; i < 24; ++i) CHECK(ib[i] == 0u);
}

TEST_CASE("SDMA: families before AI take the byte count itself; the IB size bound holds", "[unit]") {
  CHECK(sdma_linear_copy_ib(0, 0x1000, 4096, false)[1] == 4096u);
  for (std::uint64_t count : std::initializer_list<std::uint64_t>{1, 4096, kSdmaMaxLinearCopy, kSdmaMaxLinearCopy + 1,
                                                                 256ull << 20}) {
    const auto ib = sdma_linear_copy_ib(0, 0, count, true);
    CHECK(ib.size() % kSdmaIbAlignDwords == 0);
    CHECK(ib.size() <= sdma_linear_copy_ib_dwords(count));
  }
}

}  // namespace gpuckpt::amd::test
