// A simulated kubelet for a test: build/test/podresources/podresources-server started on a socket in a temporary
// directory, serving the allocations a test writes (and rewrites), stopped with the object. The server's stdout
// (one line per request) is read back so a test sees which calls a client made.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch_test_macros.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "test/support/temp_dir.h"

namespace gpuckpt::test {

class PodResourcesServer {
 public:
  explicit PodResourcesServer(const std::string& allocations_json, const std::vector<std::string>& flags = {})
      : dir_("gpuckpt-podres"), socket_((dir_.path / "kubelet.sock").string()),
        allocations_((dir_.path / "allocations.json").string()) {
    set_allocations(allocations_json);
    const std::string binary = std::string(GPUCKPT_BINARY_DIR) + "/test/podresources/podresources-server";
    std::vector<std::string> args{binary};
    args.insert(args.end(), flags.begin(), flags.end());
    args.push_back(socket_);
    args.push_back(allocations_);
    std::vector<char*> argv;
    for (auto& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);

    int out[2];
    REQUIRE(::pipe2(out, O_CLOEXEC) == 0);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::dup2(out[1], STDOUT_FILENO);
      ::execv(binary.c_str(), argv.data());
      ::_exit(127);
    }
    ::close(out[1]);
    stdout_ = out[0];
    const std::string ready = read_until("listening\n", std::chrono::seconds(20));
    INFO("podresources-server said: " << ready);
    REQUIRE(ready.ends_with("listening\n"));
  }

  ~PodResourcesServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      int status = 0;
      ::waitpid(pid_, &status, 0);
    }
    if (stdout_ >= 0) ::close(stdout_);
  }
  PodResourcesServer(const PodResourcesServer&) = delete;
  PodResourcesServer& operator=(const PodResourcesServer&) = delete;

  const std::string& socket() const { return socket_; }
  const std::filesystem::path& dir() const { return dir_.path; }

  // Replaced whole (rename), so a request never reads a half-written file.
  void set_allocations(const std::string& json) const {
    const std::string next = allocations_ + ".next";
    std::ofstream(next, std::ios::trunc) << json;
    std::filesystem::rename(next, allocations_);
  }

  // The requests the server logged since the last call, in order ("Get default/p", "List"). The server logs a
  // request before answering it, so every call a client has returned from is already in the pipe.
  std::vector<std::string> calls() {
    std::string text;
    char buffer[4096];
    for (pollfd p{stdout_, POLLIN, 0}; ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN);) {
      const ssize_t n = ::read(stdout_, buffer, sizeof buffer);
      if (n <= 0) break;
      text.append(buffer, static_cast<std::size_t>(n));
    }
    std::vector<std::string> lines;
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) lines.push_back(line);
    return lines;
  }

 private:
  std::string read_until(const std::string& end, std::chrono::milliseconds limit) {
    std::string text;
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!text.ends_with(end)) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      pollfd p{stdout_, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) != 1) break;
      char c = 0;
      if (::read(stdout_, &c, 1) != 1) break;   // the server exited
      text += c;
    }
    return text;
  }

  TempDir dir_;
  std::string socket_;
  std::string allocations_;
  pid_t pid_ = -1;
  int stdout_ = -1;
};

}  // namespace gpuckpt::test
