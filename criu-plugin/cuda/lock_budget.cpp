#include "criu-plugin/cuda/lock_budget.h"

#include <algorithm>

namespace gpuckpt::cuda {

LockBudget lock_budget(unsigned alarm_left_ms, unsigned configured_ms) {
  constexpr unsigned kAnswerGraceMs = 2000;
  if (alarm_left_ms == 0) {
    const unsigned lock = std::max(configured_ms, 1u);
    return {lock, lock > ~0u - kAnswerGraceMs ? ~0u : lock + kAnswerGraceMs};
  }
  const unsigned margin = std::min(std::clamp(alarm_left_ms / 10, 1000u, 5000u), alarm_left_ms / 2);
  // The wait for the answer ends half the margin after the lock's timeout, which leaves CRIU the other half.
  const unsigned lock = std::max(alarm_left_ms - margin, 1u);
  return {lock, std::max(lock + margin / 2, 1u)};
}

}  // namespace gpuckpt::cuda
