#include <catch2/catch_test_macros.hpp>

#include <cerrno>
#include <cstring>
#include <string>

#include "base/errno_text.h"

using gpuckpt::errno_text;

TEST_CASE("errno_text says what strerror says, for known and unknown values", "[unit]") {
  for (int err : {ENOENT, EACCES, EIO, ENOSPC, ETIMEDOUT, EXDEV, 0, 4095, -1})
    CHECK(errno_text(err) == std::string(std::strerror(err)));
  CHECK(errno_text(ENOENT) == "No such file or directory");
}
