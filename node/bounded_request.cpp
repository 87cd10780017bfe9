#include "node/bounded_request.h"

#include <condition_variable>
#include <mutex>
#include <thread>

namespace gpuckpt::node {

namespace {

using Clock = std::chrono::steady_clock;

// Runs `call` (a request on `client`) and stops `client` if it is still running at `deadline`. `expired` tells the
// caller why the request failed.
template <typename Client, typename Call>
auto with_deadline(Client& client, Clock::time_point deadline, bool& expired, Call&& call) {
  std::mutex mutex;
  std::condition_variable finished;
  bool done = false;
  std::thread guard([&] {
    std::unique_lock lock(mutex);
    if (finished.wait_until(lock, deadline, [&] { return done; })) return;
    expired = true;
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
                                       const std::function<bool(const char*, std::size_t)>& sink) {
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
  bool expired = false;
  auto result = with_deadline(client, deadline, expired, [&] { return client.send(request); });
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
  if (!result) return make_error("cannot reach " + who + ": " + httplib::to_string(result.error()), EIO);
  httplib::Response response = result.value();
  response.body = std::move(body);
  return response;
}

}  // namespace gpuckpt::node
