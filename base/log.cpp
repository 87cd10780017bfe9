#include "base/log.h"

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
  Format format = Format::Text;
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

// "2026-11-26T10:27:20.123Z"
std::string utc_stamp() {
  timeval now{};
  gettimeofday(&now, nullptr);
  std::tm tm{};
  gmtime_r(&now.tv_sec, &tm);
  char text[40];
  const std::size_t n = std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &tm);
  std::snprintf(text + n, sizeof text - n, ".%03dZ", static_cast<int>(now.tv_usec / 1000));
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

// `line` (one_line's output) as the inside of a double-quoted logfmt or JSON string: the quote and the backslash
// escaped, bytes outside ASCII as \xNN text (JSON must be valid UTF-8, which a message's bytes need not be).
std::string quoted_inside(std::string_view line) {
  std::string out;
  out.reserve(line.size());
  for (const char ch : line) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += ch;
    } else if (c >= 0x80) {   // \xNN as text: the backslash escaped like any other
      out += '\\';
      append_hex(out, c);
    } else {
      out += ch;
    }
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

void set_format(Format format) {
  std::lock_guard lock(state().mutex);
  state().format = format;
}

std::optional<Format> format_from_string(std::string_view name) {
  if (name == "text") return Format::Text;
  if (name == "logfmt") return Format::Logfmt;
  if (name == "json") return Format::Json;
  return std::nullopt;
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
  switch (s.format) {
    case Format::Text:
      std::fprintf(stderr, "%s%s%s: %s: %s\n", s.timestamps ? utc_stamp().c_str() : "", s.timestamps ? " " : "",
                   s.component.c_str(), level_name(level), line.c_str());
      break;
    case Format::Logfmt:
      std::fprintf(stderr, "time=%s level=%s component=%s msg=\"%s\"\n", utc_stamp().c_str(), level_name(level),
                   s.component.c_str(), quoted_inside(line).c_str());
      break;
    case Format::Json:
      std::fprintf(stderr, "{\"time\":\"%s\",\"level\":\"%s\",\"component\":\"%s\",\"msg\":\"%s\"}\n",
                   utc_stamp().c_str(), level_name(level), quoted_inside(s.component).c_str(),
                   quoted_inside(line).c_str());
      break;
  }
}

void param(std::string_view name, std::string_view value) {
  std::string line = "param: ";
  line.append(name).append(":").append(value);
  write(Level::Info, line);
}

}  // namespace gpuckpt::log
