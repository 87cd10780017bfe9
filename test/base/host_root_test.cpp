#include <catch2/catch_test_macros.hpp>

#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "base/host_root.h"

namespace fs = std::filesystem;
using gpuckpt::HostRoot;

namespace {
fs::path make_tree() {
  fs::path root = fs::temp_directory_path() / ("gpuckpt-hostroot-" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root / "sys/a");
  std::ofstream(root / "sys/a/num") << "42\n";
  std::ofstream(root / "sys/a/hex") << "0x1002\n";
  std::ofstream(root / "sys/a/bad") << "12abc\n";
  std::ofstream(root / "outside-sibling") << "secret\n";
  return root;
}
}  // namespace

TEST_CASE("HostRoot reads numbers, lines and directories under its root", "[unit]") {
  const fs::path root = make_tree();
  HostRoot host(root);
  CHECK(host.read_uint("sys/a/num").value() == 42);
  CHECK(host.read_uint("/sys/a/hex").value() == 0x1002);
  CHECK_FALSE(host.read_uint("sys/a/bad").ok());
  CHECK(host.read_uint("sys/a/bad").error().message.find("sys/a/bad") != std::string::npos);
  CHECK_FALSE(host.read_line("sys/a/missing").ok());
  CHECK(host.list_dir("sys/a").value() == std::vector<std::string>{"bad", "hex", "num"});
  fs::remove_all(root);
}

TEST_CASE("HostRoot never resolves a path outside its root", "[unit]") {
  HostRoot host("/some/root");
  CHECK(host.resolve("../../etc/passwd") == fs::path("/some/root/etc/passwd"));
  CHECK(host.resolve("sys/../../../x") == fs::path("/some/root/x"));
  CHECK(host.resolve("/proc/driver") == fs::path("/some/root/proc/driver"));
}
