// A real registry for the push tests: Debian's docker-registry (distribution 2.8, scripts/setup.sh installs it),
// started on 127.0.0.1 with its storage in a temporary directory, optionally behind HTTP Basic auth (htpasswd,
// bcrypt made by python3's crypt) or token auth (test/support/token_server.py, signing with a key and certificate
// openssl makes here), stopped with the object.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <httplib.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "test/support/archive_builder.h"

namespace gpuckpt::test {

class RegistryServer {
 public:
  enum class Auth { none, basic, token };
  // user empty: anonymous.
  explicit RegistryServer(const std::string& user = "", const std::string& password = "", Auth mode = Auth::basic) {
    if (std::system("command -v docker-registry >/dev/null 2>&1") != 0) return;
    port_ = free_port();
    std::string auth;
    if (!user.empty() && mode == Auth::token) {
      const auto key = dir_.path / "token.key", cert = dir_.path / "token.crt", port_file = dir_.path / "token.port";
      const std::string make = "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=gpuckpt-test-token -keyout " +
                               key.string() + " -out " + cert.string() + " >/dev/null 2>&1";
      if (std::system(make.c_str()) != 0) return;
      token_pid_ = ::fork();
      if (token_pid_ == 0) {
        const int log = ::open((dir_.path / "token.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        ::dup2(log, 1);
        ::dup2(log, 2);
        const std::string script = std::string(GPUCKPT_SOURCE_DIR) + "/test/support/token_server.py";
        ::execlp("python3", "python3", script.c_str(), port_file.c_str(), key.c_str(), cert.c_str(), "gpuckpt-test-issuer",
                 "gpuckpt-test-registry", user.c_str(), password.c_str(), static_cast<char*>(nullptr));
        ::_exit(127);
      }
      for (int i = 0; i < 100 && !std::filesystem::exists(port_file); ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (!std::filesystem::exists(port_file)) return;
      token_realm_ = "http://127.0.0.1:" + read_file(port_file) + "/token";
      auth = "auth: {token: {realm: '" + token_realm_ + "', service: gpuckpt-test-registry, issuer: gpuckpt-test-issuer, "
             "rootcertbundle: " + cert.string() + "}}\n";
    } else if (!user.empty()) {
      const auto htpasswd = dir_.path / "htpasswd";
      const std::string make = "python3 -W ignore -c 'import crypt, sys; print(sys.argv[1] + \":\" + crypt.crypt(sys.argv[2], "
                               "crypt.mksalt(crypt.METHOD_BLOWFISH)))' " + user + " " + password + " > " + htpasswd.string();
      if (std::system(make.c_str()) != 0) return;
      auth = "auth: {htpasswd: {realm: gpuckpt-test, path: " + htpasswd.string() + "}}\n";
    }
    write_file(dir_.path / "config.yml", "version: 0.1\nlog: {level: error}\nstorage: {filesystem: {rootdirectory: " +
                                              (dir_.path / "data").string() + "}}\nhttp: {addr: 127.0.0.1:" +
                                              std::to_string(port_) + ", secret: gpuckpt-test}\n" + auth);
    pid_ = ::fork();
    if (pid_ == 0) {
      // dup2, not freopen: the parent's unflushed stdio buffers must not be written again by this child.
      const int log = ::open((dir_.path / "registry.log").c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
      ::dup2(log, 1);
      ::dup2(log, 2);
      const std::string config = (dir_.path / "config.yml").string();
      ::execlp("docker-registry", "docker-registry", "serve", config.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    httplib::Client probe("127.0.0.1", port_);
    for (int i = 0; i < 100 && !ready_; ++i) {
      if (auto r = probe.Get("/v2/"); r && (r->status == 200 || r->status == 401)) ready_ = true;
      else std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ~RegistryServer() {
    for (pid_t pid : {pid_, token_pid_})
      if (pid > 0) {
        ::kill(pid, SIGTERM);
        ::waitpid(pid, nullptr, 0);
      }
  }
  RegistryServer(const RegistryServer&) = delete;
  RegistryServer& operator=(const RegistryServer&) = delete;

  bool ready() const { return ready_; }
  int port() const { return port_; }
  std::string host() const { return "127.0.0.1:" + std::to_string(port_); }
  // Where the registry keeps blobs: <storage>/docker/registry/v2/blobs/sha256/<2 hex>/<64 hex>/data (distribution's
  // filesystem driver), for tests that play a registry whose storage was tampered with.
  std::filesystem::path blob_file(const std::string& digest) const {
    const std::string hex = digest.substr(7);
    return dir_.path / "data" / "docker" / "registry" / "v2" / "blobs" / "sha256" / hex.substr(0, 2) / hex / "data";
  }

  // A port nothing listens on right now (the kernel's choice; the registry binds it a moment later).
  static int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    ::close(fd);
    return ntohs(addr.sin_port);
  }

 private:
  TempDir dir_;
  pid_t pid_ = -1;
  pid_t token_pid_ = -1;
  std::string token_realm_;
  int port_ = 0;
  bool ready_ = false;
};

}  // namespace gpuckpt::test
