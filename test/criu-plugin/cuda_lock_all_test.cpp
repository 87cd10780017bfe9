// lock_all with an injected lock: ranks that can only drain together (each lock waits until every rank's lock
// has begun, as an all-reduce waits for every rank) lock when locked at once and time out one after another; a
// failed lock unlocks every process already locked.
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <vector>

#include "criu-plugin/cuda/lock_all.h"

using namespace gpuckpt::cuda;

namespace {

constexpr int kNotReady = 600;   // CUDA_ERROR_NOT_READY

// Ranks of one collective: a rank's lock completes only once all `ranks` locks are in progress together, else
// it gives up after `timeout` with CUDA_ERROR_NOT_READY, as the driver's lock of a rank whose peer is not drained.
class CollectiveRanks {
 public:
  CollectiveRanks(std::size_t ranks, std::chrono::milliseconds timeout) : ranks_(ranks), timeout_(timeout) {}

  int lock(int pid) {
    std::unique_lock guard(mutex_);
    ++locking_;
    changed_.notify_all();
    const bool drained = changed_.wait_for(guard, timeout_, [&] { return locking_ + locked_.size() >= ranks_; });
    --locking_;
    if (!drained) return kNotReady;
    locked_.insert(pid);
    return 0;
  }
  int unlock(int pid) {
    std::lock_guard guard(mutex_);
    unlocked_.push_back(pid);
    locked_.erase(pid);
    return 0;
  }
  std::set<int> locked() {
    std::lock_guard guard(mutex_);
    return locked_;
  }
  std::vector<int> unlocked() {
    std::lock_guard guard(mutex_);
    return unlocked_;
  }

 private:
  std::size_t ranks_;
  std::chrono::milliseconds timeout_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::size_t locking_ = 0;
  std::set<int> locked_;
  std::vector<int> unlocked_;
};

}  // namespace

TEST_CASE("ranks that drain only together are all locked when locked at once", "[unit]") {
  CollectiveRanks ranks(3, std::chrono::seconds(20));
  const LockAllOutcome outcome = lock_all(
      {641, 642, 643}, [&](int pid) { return ranks.lock(pid); }, [&](int pid) { return ranks.unlock(pid); });
  CHECK(outcome.all_locked);
  REQUIRE(outcome.attempts.size() == 3);
  CHECK(outcome.attempts[0].pid == 641);
  CHECK(outcome.attempts[2].pid == 643);
  for (const auto& attempt : outcome.attempts) {
    CHECK(attempt.result == 0);
    CHECK_FALSE(attempt.rolled_back);
  }
  CHECK(ranks.locked() == std::set<int>{641, 642, 643});
  CHECK(ranks.unlocked().empty());
}

TEST_CASE("the same ranks locked one after another time out (what lock_all replaces)", "[unit]") {
  CollectiveRanks ranks(2, std::chrono::milliseconds(50));
  CHECK(ranks.lock(641) == kNotReady);
}

TEST_CASE("one failed lock unlocks every process already locked, and only those", "[unit]") {
  std::mutex mutex;
  std::vector<int> unlocked;
  const LockAllOutcome outcome = lock_all(
      {10, 11, 12, 13}, [](int pid) { return pid == 12 ? kNotReady : 0; },
      [&](int pid) {
        std::lock_guard guard(mutex);
        unlocked.push_back(pid);
        return pid == 13 ? 999 : 0;
      });
  CHECK_FALSE(outcome.all_locked);
  std::sort(unlocked.begin(), unlocked.end());
  CHECK(unlocked == std::vector<int>{10, 11, 13});
  CHECK(outcome.attempts[2].result == kNotReady);
  CHECK_FALSE(outcome.attempts[2].rolled_back);
  CHECK(outcome.attempts[0].rolled_back);
  CHECK(outcome.attempts[3].rolled_back);
  CHECK(outcome.attempts[3].unlock_result == 999);
}

TEST_CASE("a single process is locked on the calling thread, and nothing is rolled back when all succeed",
          "[unit]") {
  int calls = 0;
  const LockAllOutcome outcome = lock_all(
      {77}, [&](int) { return ++calls, 0; }, [](int) -> int { FAIL("unlock after a successful lock"); return 0; });
  CHECK(outcome.all_locked);
  CHECK(calls == 1);
}

TEST_CASE("no processes: nothing to lock", "[unit]") {
  const LockAllOutcome outcome =
      lock_all({}, [](int) -> int { FAIL("lock"); return 0; }, [](int) -> int { FAIL("unlock"); return 0; });
  CHECK(outcome.attempts.empty());
  CHECK(outcome.all_locked);
}
