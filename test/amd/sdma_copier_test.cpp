// The SDMA copy path (sdma_copier.cpp) runs unchanged — libdrm_amdgpu dlopen()ed, GTT staging
// and IB buffers, dma-buf import, VA mappings, BO lists, submission, fence wait — against a libdrm_amdgpu.so.1
// whose SDMA engine executes the submitted packets (sim/fake_libdrm_amdgpu.cpp; this executable's run path finds
// it before the system's). The bytes arrive only if every packet's fields, counts and addresses are right.
// Not a GPU: the engine is written from the kernel's packet formats, and the real engine has never run this.
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <amdgpu_drm.h>

#include <catch2/catch_test_macros.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "criu-plugin/amd/sdma_copier.h"

namespace gpuckpt::amd::test {
namespace {

struct FakeEngine {
  void (*set)(std::uint32_t family, int fence_never_signals) = nullptr;
  void (*stats)(std::uint64_t* submissions, std::uint64_t* copy_packets, std::uint64_t* bytes_copied) = nullptr;
};

// The library the copier will dlopen: this test is meaningless unless it is the fake.
FakeEngine fake_engine() {
  FakeEngine e;
  void* handle = ::dlopen("libdrm_amdgpu.so.1", RTLD_NOW | RTLD_LOCAL);
  REQUIRE(handle != nullptr);
  e.set = reinterpret_cast<decltype(e.set)>(::dlsym(handle, "gpuckpt_fake_amdgpu_set"));
  e.stats = reinterpret_cast<decltype(e.stats)>(::dlsym(handle, "gpuckpt_fake_amdgpu_stats"));
  REQUIRE(e.set != nullptr);
  REQUIRE(e.stats != nullptr);
  return e;
}

struct Stats {
  std::uint64_t submissions = 0, copy_packets = 0, bytes = 0;
};
Stats stats(const FakeEngine& e) {
  Stats s;
  e.stats(&s.submissions, &s.copy_packets, &s.bytes);
  return s;
}

// A stand-in dma-buf: a memfd of `size` bytes filled with a pattern seeded by `seed`.
struct Dmabuf {
  int fd = -1;
  std::size_t size = 0;
  Dmabuf(std::size_t n, std::uint32_t seed) : fd(::memfd_create("bo", MFD_CLOEXEC)), size(n) {
    REQUIRE(fd >= 0);
    REQUIRE(::ftruncate(fd, static_cast<off_t>(n)) == 0);
    REQUIRE(::pwrite(fd, pattern(n, seed).data(), n, 0) == static_cast<ssize_t>(n));
  }
  ~Dmabuf() { ::close(fd); }
  std::vector<std::uint8_t> bytes(std::size_t offset, std::size_t n) const {
    std::vector<std::uint8_t> out(n);
    REQUIRE(::pread(fd, out.data(), n, static_cast<off_t>(offset)) == static_cast<ssize_t>(n));
    return out;
  }
  static std::vector<std::uint8_t> pattern(std::size_t n, std::uint32_t seed) {
    std::vector<std::uint8_t> out(n);
    std::uint32_t x = seed * 2654435761u + 1;
    for (auto& b : out) {
      x ^= x << 13;
      x ^= x >> 17;
      x ^= x << 5;
      b = static_cast<std::uint8_t>(x);
    }
    return out;
  }
};

int render_node_stand_in() {
  const int fd = ::open("/dev/null", O_RDWR | O_CLOEXEC);
  REQUIRE(fd >= 0);
  return fd;
}

// Writes `n` bytes into the BO at `offset` and reads them back through SDMA; checks the BO in between.
void round_trip(BoCopier& copier, const Dmabuf& bo, std::size_t offset, std::size_t n, std::uint32_t seed) {
  const auto data = Dmabuf::pattern(n, seed);
  REQUIRE(copier.write(bo.fd, offset, data.data(), n).ok());
  CHECK(bo.bytes(offset, n) == data);
  std::vector<std::uint8_t> back(n);
  REQUIRE(copier.read(bo.fd, offset, back.data(), n).ok());
  CHECK(back == data);
}

}  // namespace

TEST_CASE("SDMA copy path: BO contents move both ways through executed linear-copy packets (family AI on)",
          "[unit]") {
  const FakeEngine engine = fake_engine();
  engine.set(AMDGPU_FAMILY_NV, 0);
  const int render = render_node_stand_in();
  constexpr std::size_t kBuffer = (4u << 20) + 4096;   // a staging buffer of 3 packets: 2 MiB, 2 MiB, 4 KiB
  auto copier = make_libdrm_sdma_copier(render, kBuffer);
  REQUIRE(copier.ok());
  CHECK(std::string((*copier)->name()) == "sdma");
  Dmabuf a((6u << 20) + 333, 1), b(64 << 10, 2);
  const Stats before = stats(engine);
  round_trip(**copier, a, 777, kBuffer, 3);   // unaligned, three packets each way
  round_trip(**copier, b, 0, 1, 4);           // a 1-byte copy: count field 0 on this family
  round_trip(**copier, a, a.size - 5, 5, 5);  // the BO's last bytes
  const Stats after = stats(engine);
  CHECK(after.submissions - before.submissions == 6);
  CHECK(after.copy_packets - before.copy_packets == 2 * (3 + 1 + 1));
  CHECK(after.bytes - before.bytes == 2 * (kBuffer + 1 + 5));
  // Bytes outside what was written are the BO's own.
  const auto original = Dmabuf::pattern(a.size, 1);
  CHECK(a.bytes(0, 777) == std::vector<std::uint8_t>(original.begin(), original.begin() + 777));
  copier->reset();
  ::close(render);
}

TEST_CASE("SDMA copy path: before family AI the packet's count is the byte count", "[unit]") {
  const FakeEngine engine = fake_engine();
  engine.set(AMDGPU_FAMILY_VI, 0);
  const int render = render_node_stand_in();
  auto copier = make_libdrm_sdma_copier(render, 1 << 20);
  REQUIRE(copier.ok());
  Dmabuf bo(1 << 20, 6);
  round_trip(**copier, bo, 4096, (1 << 20) - 4096, 7);
  round_trip(**copier, bo, 10, 1, 8);
  copier->reset();
  engine.set(AMDGPU_FAMILY_AI, 0);
  ::close(render);
}

TEST_CASE("SDMA copy path: a fence that does not signal fails the copy with ETIMEDOUT", "[unit]") {
  const FakeEngine engine = fake_engine();
  engine.set(AMDGPU_FAMILY_AI, 1);
  const int render = render_node_stand_in();
  auto copier = make_libdrm_sdma_copier(render, 64 << 10);
  REQUIRE(copier.ok());
  Dmabuf bo(64 << 10, 9);
  std::vector<std::uint8_t> out(4096);
  auto r = (*copier)->read(bo.fd, 0, out.data(), out.size());
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().errno_value == ETIMEDOUT);
  CHECK(r.error().message.find("SDMA: copy did not finish within 10 s") != std::string::npos);
  engine.set(AMDGPU_FAMILY_AI, 0);
  copier->reset();
  ::close(render);
}

}  // namespace gpuckpt::amd::test
