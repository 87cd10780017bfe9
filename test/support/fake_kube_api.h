// A stand-in for the Kubernetes API server on 127.0.0.1 (port chosen by the kernel): answers POST events with
// event_status (201) and records every request as it came.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpuckpt::test {

struct KubeApiRequest {
  std::string method, path, authorization, content_type, body;
};

class FakeKubeApi {
 public:
  int event_status = 201;

  FakeKubeApi() {
    server_.Post(R"(/api/v1/namespaces/([a-z0-9-]+)/events)", [this](const httplib::Request& req, httplib::Response& res) {
      keep(req);
      res.status = event_status;
      res.set_content(req.body, "application/json");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    // stop() only ends a server that is listening already: one stopped before would listen forever.
    while (!server_.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  ~FakeKubeApi() {
    server_.stop();
    thread_.join();
  }

  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // The requests so far, once there are at least `count` (or after 30 s, whatever came).
  std::vector<KubeApiRequest> wait_for(std::size_t count) {
    std::unique_lock lock(mutex_);
    arrived_.wait_for(lock, std::chrono::seconds(30), [&] { return requests_.size() >= count; });
    return requests_;
  }

  // The bodies of the POSTed events in order, once there are at least `count` (or after 30 s).
  std::vector<nlohmann::json> events(std::size_t count) {
    std::vector<nlohmann::json> out;
    std::unique_lock lock(mutex_);
    arrived_.wait_for(lock, std::chrono::seconds(30), [&] {
      std::size_t n = 0;
      for (const auto& r : requests_) n += r.method == "POST";
      return n >= count;
    });
    for (const auto& r : requests_)
      if (r.method == "POST") out.push_back(nlohmann::json::parse(r.body));
    return out;
  }

 private:
  void keep(const httplib::Request& req) {
    std::lock_guard lock(mutex_);
    requests_.push_back({req.method, req.path, req.get_header_value("Authorization"),
                         req.get_header_value("Content-Type"), req.body});
    arrived_.notify_all();
  }

  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<KubeApiRequest> requests_;
};

}  // namespace gpuckpt::test
