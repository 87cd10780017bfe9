// lock_budget: the driver's lock and the wait for its answer end before CRIU's alarm, which aborts a dump whose
// hook it cannot interrupt without a word from the plugin.
#include <catch2/catch_test_macros.hpp>

#include "criu-plugin/cuda/lock_budget.h"

using gpuckpt::cuda::lock_budget;

TEST_CASE("the lock and the wait for its answer leave CRIU a margin before its alarm", "[unit]") {
  struct Row {
    unsigned alarm_left_ms, lock_ms, answer_ms;
  };
  const Row rows[] = {
      {10000, 9000, 9500},        // criu's default --timeout: a tenth, at least 1 s
      {180000, 175000, 177500},   // a long --timeout: at most 5 s
      {30000, 27000, 28500},
      {1500, 750, 1125},          // little left: never more than half of it
      {1, 1, 1},
  };
  for (const Row& row : rows) {
    const auto budget = lock_budget(row.alarm_left_ms, 60000);
    INFO("alarm left " << row.alarm_left_ms << " ms");
    CHECK(budget.lock_ms == row.lock_ms);
    CHECK(budget.answer_ms == row.answer_ms);
  }
  for (unsigned left = 2; left < 400000; left = left * 3 / 2 + 1) {
    const auto budget = lock_budget(left, 60000);
    INFO("alarm left " << left << " ms");
    CHECK(budget.lock_ms <= budget.answer_ms);
    CHECK(budget.answer_ms < left);
  }
}

TEST_CASE("without an alarm the configured lock timeout decides, with time for the driver's answer", "[unit]") {
  CHECK(lock_budget(0, 10000).lock_ms == 10000);
  CHECK(lock_budget(0, 10000).answer_ms == 12000);
  CHECK(lock_budget(0, 0).lock_ms == 1);   // 0 would be the driver's "no timeout"
  CHECK(lock_budget(0, ~0u).answer_ms == ~0u);
}
