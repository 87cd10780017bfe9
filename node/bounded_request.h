// One HTTP request to a host this node does not trust (a peer agent, a registry, its token service), its answer
// read as it streams: at most `max_answer_bytes` of it kept (more ends the request), and the whole exchange ended
// at `deadline`. httplib's own timeouts are per read, so without the deadline an answer that trickles a byte every
// few seconds would hold a job for hours; without the bound a 512 MiB answer would sit in memory.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

#include "base/result.h"
#include "node/request_stop.h"

namespace gpuckpt::node {

// A 2xx answer's body goes to `sink` when there is one (it returns false to stop: the sink then knows why, and the
// answer comes back with its status and no body); every other body is kept, at most `max_answer_bytes` of it.
// Errors: ETIMEDOUT past `deadline` (naming `deadline_setting`), EFBIG an answer over the bound, EIO no answer
// (the connection failed; the message says how). `who` names the host in them ("the target agent at URL").
// `stop` (may be null): once stopped, ETIMEDOUT too, saying that the agent is stopping.
Result<httplib::Response> bounded_send(httplib::Client& client, httplib::Request request, const std::string& who,
                                       std::chrono::steady_clock::time_point deadline,
                                       const std::string& deadline_setting, std::size_t max_answer_bytes,
                                       const std::function<bool(const char*, std::size_t)>& sink = nullptr,
                                       const RequestStop* stop = nullptr);

}  // namespace gpuckpt::node
