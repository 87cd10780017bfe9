#include "test/criu-plugin/stand_in/stand_ins.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "base/log.h"

namespace gpuckpt::cuda::stand_in {

Result<std::optional<std::string>> node_store_from_env() {
  const char* v = std::getenv("GPUCKPT_TEST_NODE_STORE");
  if (v == nullptr || *v == '\0') return std::optional<std::string>();
  if (v[0] != '/') return make_error("GPUCKPT_TEST_NODE_STORE='" + std::string(v) + "' is not an absolute path");
  return std::optional<std::string>(v);
}

Result<std::optional<std::uint64_t>> staging_vma_from_env() {
  const char* v = std::getenv("GPUCKPT_TEST_STAGING_VMA");
  if (v == nullptr || *v == '\0') return std::optional<std::uint64_t>();
  std::string_view s(v);
  if (s.starts_with("0x")) s.remove_prefix(2);
  std::uint64_t start = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), start, 16);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || start == 0)
    return make_error("GPUCKPT_TEST_STAGING_VMA='" + std::string(v) + "' is not a hex address");
  return std::optional<std::uint64_t>(start);
}

MemoryPathStandIns from_env() {
  MemoryPathStandIns stand_ins;
  if (auto node_store = node_store_from_env(); node_store && *node_store) {
    stand_ins.node_store = **node_store;
    log::warn("cuda: TEST SWITCH GPUCKPT_TEST_NODE_STORE=" + **node_store + ": treated as the node-local chunk store "
              "(for tests only)");
  } else if (!node_store) {
    log::error("cuda: " + node_store.error().message + "; the test switch stays off");
  }
  if (auto vma = staging_vma_from_env(); vma && *vma) {
    stand_ins.staging_vma = **vma;
    char buf[40];
    std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(**vma));
    log::warn(std::string("cuda: TEST SWITCH GPUCKPT_TEST_STAGING_VMA=") + buf + ": a process mapping private "
              "anonymous memory there is handled as a checkpointed CUDA process (for tests only)");
  } else if (!vma) {
    log::error("cuda: " + vma.error().message + "; the test switch stays off");
  }
  return stand_ins;
}

}  // namespace gpuckpt::cuda::stand_in
