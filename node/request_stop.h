// Apart from node/bounded_request.h, which uses it, so that the job service's header needs no httplib.
#pragma once

#include <atomic>

namespace gpuckpt::node {

// The agent's stop as its jobs' requests see it: once stop() is called, every bounded_send given this ends (the
// running ones at once, later ones before they are sent), as if its deadline had passed. The agent's shutdown
// (JobService::shutdown) calls it once the running jobs' grace is over: a peer or registry that trickles its answer
// holds a job, and with it the agent, no longer than that.
class RequestStop {
 public:
  void stop() { stopped_.store(true); }
  bool stopped() const { return stopped_.load(); }

 private:
  std::atomic<bool> stopped_{false};
};

}  // namespace gpuckpt::node
