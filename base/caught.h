// The boundary every thread body runs inside: an exception that leaves a std::thread's function is std::terminate for
// the whole process (the agent, and every job it runs), so what a body throws (a JSON accessor meeting a peer's
// wrong type, bad_alloc) comes back as an Error naming `what`, which the caller makes its job's error.
#pragma once

#include <cerrno>
#include <exception>
#include <string>
#include <string_view>
#include <type_traits>

#include "base/result.h"

namespace gpuckpt {

// Runs `body` (returning void or Result<void>) and answers its result, or the exception it threw as an error.
template <class Body>
Result<void> caught(std::string_view what, Body&& body) noexcept {
  try {
    try {
      if constexpr (std::is_void_v<std::invoke_result_t<Body&>>) {
        body();
        return {};
      } else {
        return body();
      }
    } catch (const std::exception& e) {
      return make_error(std::string(what) + " failed: internal error: " + e.what(), EIO);
    } catch (...) {
      return make_error(std::string(what) + " failed: internal error (an exception of unknown type)", EIO);
    }
  } catch (...) {
    // Making the error itself ran out of memory.
    return make_error({}, ENOMEM);
  }
}

}  // namespace gpuckpt
