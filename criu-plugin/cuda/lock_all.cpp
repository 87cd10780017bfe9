#include "criu-plugin/cuda/lock_all.h"

#include <chrono>
#include <thread>

namespace gpuckpt::cuda {
namespace {

template <class Work>
void on_threads(std::size_t n, Work&& work) {
  if (n == 1) {
    work(0);
    return;
  }
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (std::size_t i = 0; i < n; ++i) threads.emplace_back([&work, i] { work(i); });
  for (auto& thread : threads) thread.join();
}

}  // namespace

LockAllOutcome lock_all(const std::vector<int>& pids, const std::function<int(int)>& lock,
                        const std::function<int(int)>& unlock) {
  LockAllOutcome outcome;
  outcome.attempts.resize(pids.size());
  on_threads(pids.size(), [&](std::size_t i) {
    auto start = std::chrono::steady_clock::now();
    outcome.attempts[i].pid = pids[i];
    outcome.attempts[i].result = lock(pids[i]);
    outcome.attempts[i].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  });
  outcome.all_locked = true;
  for (const auto& attempt : outcome.attempts) outcome.all_locked = outcome.all_locked && attempt.result == 0;
  if (outcome.all_locked || pids.empty()) return outcome;
  on_threads(pids.size(), [&](std::size_t i) {
    if (outcome.attempts[i].result != 0) return;
    outcome.attempts[i].unlock_result = unlock(pids[i]);
    outcome.attempts[i].rolled_back = true;
  });
  return outcome;
}

}  // namespace gpuckpt::cuda
