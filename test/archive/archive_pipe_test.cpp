// The named pipe between the agent and a runtime (archive/archive_pipe.h): what the runtime writes before the agent
// reads survives, every wait ends when the runtime exits, a reader that goes away is an error and not a signal,
// and nothing at the pipe's path is ever replaced.
#include <catch2/catch_test_macros.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "archive/archive_pipe.h"
#include "test/support/temp_dir.h"

using gpuckpt::ArchivePipe;
using Direction = gpuckpt::ArchivePipe::Direction;

namespace {

// Everything the runtime writes, up to the end of its stream (no assertions: it also runs on other threads).
gpuckpt::Result<std::string> receive_all(ArchivePipe& pipe) {
  std::string out;
  std::vector<char> buffer(4096);
  for (;;) {
    auto got = pipe.receive(buffer.data(), buffer.size());
    if (!got) return got.error();
    if (got.value() == 0) return out;
    out.append(buffer.data(), got.value());
  }
}

}  // namespace

TEST_CASE("a runtime that writes and closes before the agent reads loses nothing", "[unit]") {
  gpuckpt::test::TempDir tmp;
  auto pipe = ArchivePipe::create(tmp.path / "export.fifo", Direction::from_runtime);
  REQUIRE(pipe.ok());
  // podman opens its export file read-write (os.Create): the open never waits, and it may be done before we read.
  const int fd = ::open((tmp.path / "export.fifo").c_str(), O_RDWR);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "checkpoint archive", 18) == 18);
  ::close(fd);
  auto received = receive_all(*pipe.value());
  REQUIRE(received.ok());
  CHECK(received.value() == "checkpoint archive");
}

TEST_CASE("a runtime that exits without opening the pipe ends the agent's wait", "[unit]") {
  gpuckpt::test::TempDir tmp;
  auto pipe = ArchivePipe::create(tmp.path / "export.fifo", Direction::from_runtime);
  REQUIRE(pipe.ok());
  gpuckpt::Result<std::string> received = std::string("not yet");
  std::thread receiver([&] { received = receive_all(*pipe.value()); });
  pipe.value()->runtime_exited();
  receiver.join();
  REQUIRE(received.ok());
  CHECK(received.value().empty());
}

TEST_CASE("serving a runtime: it exits before opening, or stops reading half-way", "[unit]") {
  gpuckpt::test::TempDir tmp;
  const auto path = tmp.path / "import.fifo";
  auto pipe = ArchivePipe::create(path, Direction::to_runtime);
  REQUIRE(pipe.ok());
  SECTION("it exits before it opens the pipe: the wait for a reader ends") {
    gpuckpt::Result<bool> opened = true;
    std::thread sender([&] { opened = pipe.value()->await_reader(); });
    pipe.value()->runtime_exited();
    sender.join();
    REQUIRE(opened.ok());
    CHECK_FALSE(opened.value());
  }
  SECTION("it reads a little and closes: EPIPE, and the process is not killed by SIGPIPE") {
    std::thread reader([&] {
      std::ifstream in(path, std::ios::binary);
      char head[16];
      in.read(head, sizeof head);
    });
    gpuckpt::Result<bool> opened = false;
    gpuckpt::Result<void> sent;
    std::thread sender([&] {
      opened = pipe.value()->await_reader();
      if (!opened || !opened.value()) return;
      const std::string data(8 << 20, 'x');   // more than the pipe holds
      sent = pipe.value()->send(data.data(), data.size());
      pipe.value()->end_stream();
    });
    reader.join();
    sender.join();
    REQUIRE(opened.ok());
    REQUIRE(opened.value());
    REQUIRE_FALSE(sent.ok());
    CHECK(sent.error().errno_value == EPIPE);
  }
}

TEST_CASE("a runtime that reads a little, closes and opens again gets the stream from its start", "[unit]") {
  // podman's import reads the archive's config entries, closes it and opens it again for the whole archive. The
  // first stream is still being written when the second open comes: nothing of it may reach the second reader.
  gpuckpt::test::TempDir tmp;
  const auto path = tmp.path / "import.fifo";
  auto pipe = ArchivePipe::create(path, Direction::to_runtime);
  REQUIRE(pipe.ok());
  const std::string head = "start of stream.";
  std::string stream = head + std::string(8 << 20, 'x');   // more than the pipe holds
  std::thread sender([&] {
    for (;;) {
      auto opened = pipe.value()->await_reader();
      if (!opened || !opened.value()) return;
      (void)pipe.value()->send(stream.data(), stream.size());
      pipe.value()->end_stream();
    }
  });
  std::vector<std::string> heads;
  for (int open = 0; open < 3; ++open) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    REQUIRE(fd >= 0);
    std::string got(head.size(), '\0');
    std::size_t have = 0;
    while (have < got.size()) {
      const ssize_t n = ::read(fd, got.data() + have, got.size() - have);
      if (n <= 0) break;
      have += static_cast<std::size_t>(n);
    }
    ::close(fd);   // at once: the sender is still writing this stream
    heads.push_back(got.substr(0, have));
  }
  pipe.value()->runtime_exited();
  sender.join();
  CHECK(heads == std::vector<std::string>(3, head));
  CHECK_FALSE(std::filesystem::exists(std::filesystem::symlink_status(path.string() + ".next")));
}

TEST_CASE("a pipe is never made over something already at its path", "[unit]") {
  gpuckpt::test::TempDir tmp;
  const auto path = tmp.path / "ck.runtime.fifo";
  std::ofstream(path) << "someone's file";
  auto pipe = ArchivePipe::create(path, Direction::from_runtime);
  REQUIRE_FALSE(pipe.ok());
  CHECK(pipe.error().errno_value == EEXIST);
  std::ifstream in(path);
  std::string kept;
  std::getline(in, kept);
  CHECK(kept == "someone's file");
}
