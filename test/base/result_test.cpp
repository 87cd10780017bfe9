#include <catch2/catch_test_macros.hpp>

#include <memory>
#include <string>

#include "base/result.h"

using gpuckpt::Error;
using gpuckpt::make_error;
using gpuckpt::Result;

namespace {
Result<int> number(bool ok, int* calls = nullptr) {
  if (calls) ++*calls;
  if (!ok) return make_error("no such file", ENOENT);
  return 7;
}

Result<void> step(bool ok) {
  if (!ok) return make_error("disk full", ENOSPC);
  return {};
}

Result<int> twice(bool ok, int* calls) {
  GPUCKPT_TRY(auto n, number(ok, calls), "reading count");
  return n * 2;
}

Result<int> twice_plain(bool ok) {
  GPUCKPT_TRY(const auto& n, number(ok));
  return n * 2;
}

Result<int> counted_context(bool ok, int* builds) {
  GPUCKPT_TRY(auto n, number(ok), (++*builds, std::string("counting")));
  return n;
}

Result<std::string> outer(bool ok) {
  GPUCKPT_TRY(int n, twice(ok, nullptr), "restoring pod web-0");
  return std::to_string(n);
}

Result<std::unique_ptr<int>> boxed(bool ok) {
  if (!ok) return make_error("gone", ESRCH);
  return std::make_unique<int>(3);
}

Result<int> unbox(bool ok) {
  GPUCKPT_TRY(auto box, boxed(ok), "unboxing");
  return *box;
}

Result<int> assign_existing(bool ok) {
  int n = 0;
  GPUCKPT_TRY(n, number(ok));
  return n;
}

Result<void> steps(bool first, bool second) {
  GPUCKPT_TRY_VOID(step(first), "writing job record");
  GPUCKPT_TRY_VOID(number(second));  // a value that is not needed
  return {};
}

Result<void> checked_late(bool ok, int* cleanups) {
  const auto late = step(ok);
  ++*cleanups;  // runs whether or not the step failed
  GPUCKPT_TRY_VOID(late, "syncing the store");
  return {};
}
}  // namespace

TEST_CASE("with_context prefixes the message once and keeps errno", "[unit]") {
  const Error cause = make_error("no such file", ENOENT);
  const Error wrapped = cause.with_context("reading /x/spec.dump");
  CHECK(wrapped.message == "reading /x/spec.dump: no such file");
  CHECK(wrapped.errno_value == ENOENT);
  CHECK(cause.message == "no such file");  // the const& overload leaves its source alone
  CHECK(wrapped.with_context("").message == wrapped.message);
  // A caller naming the same step as its callee adds nothing; a different step still gets its words.
  CHECK(wrapped.with_context("reading /x/spec.dump").message == wrapped.message);
  CHECK(wrapped.with_context("reading").message == "reading: reading /x/spec.dump: no such file");
}

TEST_CASE("GPUCKPT_TRY moves the value out on success", "[unit]") {
  CHECK(twice(true, nullptr).value() == 14);
  CHECK(twice_plain(true).value() == 14);
  CHECK(outer(true).value() == "14");
  CHECK(unbox(true).value() == 3);  // move-only values are moved, not copied
  CHECK(assign_existing(true).value() == 7);
}

TEST_CASE("GPUCKPT_TRY adds its context once per level and keeps errno", "[unit]") {
  const auto failed = outer(false);
  REQUIRE_FALSE(failed.ok());
  CHECK(failed.error().message == "restoring pod web-0: reading count: no such file");
  CHECK(failed.error().errno_value == ENOENT);
  CHECK(twice_plain(false).error().message == "no such file");  // no context given: the cause unchanged
  CHECK(unbox(false).error().errno_value == ESRCH);
  CHECK(assign_existing(false).error().message == "no such file");
}

TEST_CASE("GPUCKPT_TRY evaluates its expression once, and its context only on failure", "[unit]") {
  int calls = 0;
  CHECK(twice(true, &calls).ok());
  CHECK(calls == 1);
  CHECK_FALSE(twice(false, &calls).ok());
  CHECK(calls == 2);
  int builds = 0;
  CHECK(counted_context(true, &builds).ok());
  CHECK(builds == 0);
  CHECK(counted_context(false, &builds).error().message == "counting: no such file");
  CHECK(builds == 1);
}

TEST_CASE("GPUCKPT_TRY_VOID propagates void and discarded results", "[unit]") {
  CHECK(steps(true, true).ok());
  const auto disk = steps(false, true);
  REQUIRE_FALSE(disk.ok());
  CHECK(disk.error().message == "writing job record: disk full");
  CHECK(disk.error().errno_value == ENOSPC);
  CHECK(steps(true, false).error().message == "no such file");
  int cleanups = 0;
  CHECK(checked_late(true, &cleanups).ok());
  CHECK(checked_late(false, &cleanups).error().message == "syncing the store: disk full");
  CHECK(cleanups == 2);
}
