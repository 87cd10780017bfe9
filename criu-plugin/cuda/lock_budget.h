// How long PAUSE_DEVICES may wait for the driver's lock of a CUDA process. CRIU arms its alarm (criu --timeout,
// default 10 s) over the whole seizing stage, PAUSE_DEVICES included. When it fires inside a hook, CRIU cannot
// interrupt the hook: it retries for 5 s and aborts ("Unable to interrupt the current operation", a BUG), and
// the plugin never says why. So the lock gives up, and the plugin reports it, a margin before the alarm: a tenth
// of what is left, at least 1 s and at most 5 s, never more than half of it.
#pragma once

namespace gpuckpt::cuda {

struct LockBudget {
  unsigned lock_ms = 0;     // the timeout the driver's lock gets
  unsigned answer_ms = 0;   // how long the plugin waits for the driver host's answer to a call, the lock included
};

// `alarm_left_ms`: what is left of CRIU's alarm (0: none armed, then `configured_ms` decides, with 2 s for the
// driver to answer after its own timeout).
LockBudget lock_budget(unsigned alarm_left_ms, unsigned configured_ms);

}  // namespace gpuckpt::cuda
