#include "node/bounded_request.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace gpuckpt::node {

namespace {

using Clock = std::chrono::steady_clock;

// Why a request got no answer: httplib's names alone ("Connection") say nothing one can act on.
std::string no_answer(httplib::Error error) {
  switch (error) {
    case httplib::Error::Connection:
      return "could not connect (nothing listens there, the connection was refused, or the host is unreachable)";
    case httplib::Error::ConnectionTimeout: return "the connection timed out";
    case httplib::Error::Read: return "the connection broke, or went quiet past its read timeout, while the answer was read";
    case httplib::Error::Write: return "the connection broke while sending the request";
    case httplib::Error::SSLConnection: return "the TLS handshake failed";
    case httplib::Error::SSLLoadingCerts: return "the CA file cannot be loaded";
    case httplib::Error::SSLServerVerification: return "the server's certificate is not signed by the CA file's CA";
    default: return httplib::to_string(error);
  }
}

// How often a request's guard looks at its RequestStop: the most a stop waits for a request to be cut.
constexpr auto kStopPoll = std::chrono::milliseconds(50);

// Runs `call` (a request on `client`) and stops `client` if it is still running at `deadline`, or once `stop` is
// stopped. `expired` / `stopped` tell the caller why the request failed.
template <typename Client, typename Call>
auto with_deadline(Client& client, Clock::time_point deadline, const RequestStop* stop, bool& expired, bool& stopped,
                   Call&& call) {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  std::thread guard([&] {
    std::unique_lock lock(mutex);
    for (;;) {
      const auto until = stop ? std::min(deadline, Clock::now() + kStopPoll) : deadline;
      if (finished.wait_until(lock, until, [&] { return done; })) return;
      if (stop && stop->stopped()) {
        stopped = true;
        break;
      }
      if (Clock::now() >= deadline) {
        expired = true;
        break;
      }
    }
    // stop() shuts the request's socket down, and it fails at once; one that came before the socket was open had
    // nothing to shut, so it is repeated until the request returns.
    do client.stop();
    while (!finished.wait_for(lock, std::chrono::milliseconds(100), [&] { return done; }));
  });
  const auto finish = [&] {
    {
      std::lock_guard lock(mutex);
      done = true;
    }
    finished.notify_one();
    guard.join();
  };
  try {
    auto result = call();
    finish();
    return result;
  } catch (...) {   // the guard joined first: a joinable thread destroyed is std::terminate
    finish();
    throw;
  }
}

}  // namespace

Result<httplib::Response> bounded_send(httplib::Client& client, httplib::Request request, const std::string& who,
                                       Clock::time_point deadline, const std::string& deadline_setting,
                                       std::size_t max_answer_bytes,
                                       const std::function<bool(const char*, std::size_t)>& sink,
                                       const RequestStop* stop) {
  const auto stopping = [&] {
    return make_error(who + " was not done with " + request.method + " " + request.path.substr(0, 120) +
                      " when the agent stopped its jobs (limits.shutdown_grace_seconds had passed); stopped",
                      ETIMEDOUT);
  };
  if (stop && stop->stopped()) return stopping();
  std::string body;
  bool too_large = false, sink_stopped = false;
  int status = 0;
  request.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  request.content_receiver = [&](const char* data, std::size_t size, std::uint64_t, std::uint64_t) {
    if (sink && status >= 200 && status < 300) {
      if (sink(data, size)) return true;
      sink_stopped = true;
      return false;
    }
    if (body.size() + size > max_answer_bytes) {
      too_large = true;
      return false;
    }
    body.append(data, size);
    return true;
  };
  bool expired = false, cut_short = false;
  auto result = with_deadline(client, deadline, stop, expired, cut_short, [&] { return client.send(request); });
  if (cut_short) return stopping();
  if (expired)
    return make_error(who + " did not finish answering " + request.method + " " + request.path.substr(0, 120) +
                      " in time (" + deadline_setting + "); stopped", ETIMEDOUT);
  if (too_large)
    return make_error(who + " answered " + request.method + " with more than " +
                      std::to_string(max_answer_bytes) + " bytes; refused", EFBIG);
  if (sink_stopped) {   // the sink's owner says why
    httplib::Response stopped;
    stopped.status = status;
    return stopped;
  }
  if (!result)
    return make_error("cannot reach " + who + " (" + request.method + " " + request.path.substr(0, 120) +
                      "): " + no_answer(result.error()), EIO);
  httplib::Response response = result.value();
  response.body = std::move(body);
  return response;
}

}  // namespace gpuckpt::node
