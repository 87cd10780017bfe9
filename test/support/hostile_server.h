// An in-process HTTP server on 127.0.0.1 (port chosen by the kernel) playing a hostile peer agent or API server:
// routes go on `http` before start(); streaming() makes one that answers 200 with a body that comes piece by piece,
// as fast or as slowly as asked, for as long as it is read (or a given number of pieces), counting what it produced.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

namespace gpuckpt::test {

struct HostileServer {
  httplib::Server http;
  std::thread thread;
  int port = 0;
  std::atomic<bool> stopping{false};
  std::atomic<std::uint64_t> offered{0};   // bytes of streamed answers produced so far
  std::atomic<int> asked{0};               // requests that got a streamed answer

  void start() {
    port = http.bind_to_any_port("127.0.0.1");
    thread = std::thread([this] { http.listen_after_bind(); });
    while (!http.is_running()) std::this_thread::yield();
  }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
  // 200 with `piece` every `pause`, `pieces` times (0: without end).
  httplib::Server::Handler streaming(std::string piece, std::chrono::milliseconds pause, std::uint64_t pieces = 0) {
    return [this, piece, pause, pieces](const httplib::Request&, httplib::Response& res) {
      ++asked;
      res.status = 200;
      auto sent = std::make_shared<std::uint64_t>(0);
      res.set_chunked_content_provider("application/json",
                                       [this, piece, pause, pieces, sent](std::size_t, httplib::DataSink& sink) {
        if (stopping) return false;
        if (pieces != 0 && *sent == pieces) {
          sink.done();
          return true;
        }
        if (pause.count() > 0) std::this_thread::sleep_for(pause);
        ++*sent;
        offered += piece.size();
        return sink.write(piece.data(), piece.size());
      });
    };
  }
  ~HostileServer() {
    stopping = true;
    http.stop();
    if (thread.joinable()) thread.join();
  }
};

}  // namespace gpuckpt::test
