// Tees one of the process's output descriptors (stdout, stderr) through a pipe: what a verb writes still reaches
// the terminal as it is written, and is also kept (up to a cap) and counted, so `--json` can turn a failure that
// printed only text into a JSON error object, and -o yaml can rewrite the JSON a verb printed (main.cpp).
#pragma once

#include <cstddef>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>

namespace gpuckpt::cli {

class OutputTee {
 public:
  // `stream` is the stdio stream on `fd` (flushed before the swap and at finish). Does nothing when the pipe
  // cannot be made: then kept() is empty and written() 0. `pass_on` false: kept only, for the caller to write in
  // another form (-o yaml).
  OutputTee(int fd, std::FILE* stream, std::size_t keep_bytes, bool pass_on = true);
  ~OutputTee();
  OutputTee(const OutputTee&) = delete;
  OutputTee& operator=(const OutputTee&) = delete;

  // Puts the descriptor back and waits until everything written has been passed on.
  void finish();
  std::string kept() const;
  std::size_t written() const;

 private:
  int fd_;
  std::FILE* stream_;
  std::size_t keep_bytes_;
  bool pass_on_;
  int saved_ = -1;
  int read_end_ = -1;
  std::thread pump_;
  mutable std::mutex mutex_;
  std::string kept_;
  std::size_t written_ = 0;
};

}  // namespace gpuckpt::cli
