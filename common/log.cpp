#include "common/log.h"

#include <sys/time.h>

#include <cstdio>
#include <ctime>
#include <mutex>

namespace gpuckpt::log {
namespace {

struct State {
  std::mutex mutex;
  Sink sink;
  Level max_level = Level::Info;
  std::string component = "gpuckpt";
  bool timestamps = false;
};

State& state() {
  static State s;
  return s;
}

const char* level_name(Level level) {
  switch (level) {
    case Level::Error: return "error";
    case Level::Warn: return "warn";
    case Level::Info: return "info";
    case Level::Debug: return "debug";
  }
  return "?";
}

// "2026-11-26T10:27:20.123Z "
std::string utc_stamp() {
  timeval now{};
  gettimeofday(&now, nullptr);
  std::tm tm{};
  gmtime_r(&now.tv_sec, &tm);
  char text[40];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(text + n, sizeof text - n, ".%03dZ ", static_cast<int>(now.tv_usec / 1000));
  return text;
}

constexpr char kHex[] = "0123456789abcdef";

void append_hex(std::string& out, unsigned char c) {
  out += "\\x";
  out += kHex[c >> 4];
  out += kHex[c & 0xf];
}

// The message with control characters escaped (most lines have none and are returned as they are).
std::string one_line(std::string_view message) {
  std::string out;
  out.reserve(message.size());
  for (const char ch : message) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7f)
      append_hex(out, c);
    else
      out += ch;
  }
  return out;
}

}  // namespace

std::string escaped(std::string_view text, std::size_t max) {
  std::string out;
  for (std::size_t i = 0; i < text.size() && i < max; ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\')
      out += static_cast<char>(c);
    else
      append_hex(out, c);
  }
  if (text.size() > max) out += "...";
  return out;
}

void set_sink(Sink sink) {
  std::lock_guard lock(state().mutex);
  state().sink = std::move(sink);
}

void set_level(Level max_level) {
  std::lock_guard lock(state().mutex);
  state().max_level = max_level;
}

void set_timestamps(bool on) {
  std::lock_guard lock(state().mutex);
  state().timestamps = on;
}

void set_component(std::string component) {
  std::lock_guard lock(state().mutex);
  state().component = std::move(component);
}

Level level_from_string(std::string_view name, Level fallback) {
  if (name == "error") return Level::Error;
  if (name == "warn" || name == "warning") return Level::Warn;
  if (name == "info") return Level::Info;
  if (name == "debug") return Level::Debug;
  return fallback;
}

void write(Level level, std::string_view message) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (static_cast<int>(level) > static_cast<int>(s.max_level)) return;
  const std::string line = one_line(message);
  if (s.sink) {
    s.sink(level, line);
    return;
  }
  std::fprintf(stderr, "%s%s: %s: %s\n", s.timestamps ? utc_stamp().c_str() : "", s.component.c_str(), level_name(level),
               line.c_str());
}

void param(std::string_view name, std::string_view value) {
  std::string line = "param: ";
  line.append(name).append(":").append(value);
  write(Level::Info, line);
}

}  // namespace gpuckpt::log
