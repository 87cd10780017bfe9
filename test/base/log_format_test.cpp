// The stderr sink's formats (base/log.h): each line, captured from the real stderr, parses as its format says,
// with the time, level, component and the message as written (control and non-ASCII bytes as \xNN text).
#include <catch2/catch_test_macros.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "test/support/temp_dir.h"

using namespace gpuckpt;

namespace {

// What `write` puts on file descriptor 2, line by line.
std::vector<std::string> stderr_lines(const std::function<void()>& write) {
  test::TempDir tmp;
  const std::string path = (tmp.path / "stderr").string();
  std::fflush(stderr);
  const int saved = ::dup(2);
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  ::dup2(fd, 2);
  ::close(fd);
  write();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// key=value pairs; a value is bare (up to a space) or double-quoted with \" and \\ escapes.
std::vector<std::pair<std::string, std::string>> parse_logfmt(const std::string& line) {
  std::vector<std::pair<std::string, std::string>> pairs;
  std::size_t i = 0;
  while (i < line.size()) {
    const auto eq = line.find('=', i);
    REQUIRE(eq != std::string::npos);
    std::string key = line.substr(i, eq - i), value;
    i = eq + 1;
    if (i < line.size() && line[i] == '"') {
      for (++i; i < line.size() && line[i] != '"'; ++i) {
        if (line[i] == '\\') ++i;
        REQUIRE(i < line.size());
        value += line[i];
      }
      REQUIRE(i < line.size());   // the closing quote
      ++i;
    } else {
      const auto end = line.find(' ', i);
      value = line.substr(i, end == std::string::npos ? std::string::npos : end - i);
      i = end == std::string::npos ? line.size() : end;
    }
    pairs.emplace_back(key, value);
    if (i < line.size()) {
      REQUIRE(line[i] == ' ');
      ++i;
    }
  }
  return pairs;
}

const std::regex kTime(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z)");
// A message with a quote, a backslash, a newline (it must not start a line), an escape sequence and bytes that
// are no UTF-8.
const std::string kMessage = "job ck-1: \"quoted\" C:\\dir\nforged line \x1b[31m \xff\xfe end";
// How every format carries it.
const std::string kWritten = "job ck-1: \"quoted\" C:\\dir\\x0aforged line \\x1b[31m \\xff\\xfe end";

struct Restore {
  ~Restore() {
    log::set_format(log::Format::Text);
    log::set_component("gpuckpt");
    log::set_level(log::Level::Info);
  }
};

}  // namespace

TEST_CASE("log formats: names", "[unit]") {
  CHECK(log::format_from_string("text") == log::Format::Text);
  CHECK(log::format_from_string("logfmt") == log::Format::Logfmt);
  CHECK(log::format_from_string("json") == log::Format::Json);
  CHECK_FALSE(log::format_from_string("JSON").has_value());
  CHECK_FALSE(log::format_from_string("").has_value());
}

TEST_CASE("logfmt lines parse, with time, level, component and the message", "[unit]") {
  Restore restore;
  log::set_component("gpuckpt-agent");
  log::set_format(log::Format::Logfmt);
  log::set_level(log::Level::Info);
  const auto lines = stderr_lines([] {
    log::warn(kMessage);
    log::debug("polled: not shown at info");
    log::info("plain");
  });
  REQUIRE(lines.size() == 2);
  const auto first = parse_logfmt(lines[0]);
  REQUIRE(first.size() == 4);
  CHECK(first[0].first == "time");
  CHECK(std::regex_match(first[0].second, kTime));
  CHECK(first[1] == std::pair<std::string, std::string>{"level", "warn"});
  CHECK(first[2] == std::pair<std::string, std::string>{"component", "gpuckpt-agent"});
  CHECK(first[3] == std::pair<std::string, std::string>{"msg", kWritten});
  CHECK(parse_logfmt(lines[1])[3].second == "plain");
}

TEST_CASE("JSON lines parse, with time, level, component and the message", "[unit]") {
  Restore restore;
  log::set_component("gpuckpt-agent");
  log::set_format(log::Format::Json);
  log::set_level(log::Level::Debug);
  const auto lines = stderr_lines([] {
    log::error(kMessage);
    log::debug("GET /v1/checkpoints/ck-1 -> 200");
  });
  REQUIRE(lines.size() == 2);
  const auto first = nlohmann::json::parse(lines[0]);   // throws on anything but one valid JSON object
  CHECK(first.size() == 4);
  CHECK(std::regex_match(first["time"].get<std::string>(), kTime));
  CHECK(first["level"] == "error");
  CHECK(first["component"] == "gpuckpt-agent");
  CHECK(first["msg"] == kWritten);
  const auto second = nlohmann::json::parse(lines[1]);
  CHECK(second["level"] == "debug");
  CHECK(second["msg"] == "GET /v1/checkpoints/ck-1 -> 200");
}

TEST_CASE("text lines stay as they were: time only when asked, one line per message", "[unit]") {
  Restore restore;
  log::set_component("gpuckpt-agent");
  const auto plain = stderr_lines([] { log::info(kMessage); });
  REQUIRE(plain.size() == 1);
  CHECK(plain[0] == "gpuckpt-agent: info: job ck-1: \"quoted\" C:\\dir\\x0aforged line \\x1b[31m \xff\xfe end");
  log::set_timestamps(true);
  const auto stamped = stderr_lines([] { log::info("x"); });
  log::set_timestamps(false);
  REQUIRE(stamped.size() == 1);
  CHECK(std::regex_match(stamped[0], std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z gpuckpt-agent: info: x)")));
}
