#include "common/log.h"

#include <cstdio>
#include <mutex>

namespace gpuckpt::log {
namespace {

struct State {
  std::mutex mutex;
  Sink sink;
  Level max_level = Level::Info;
  std::string component = "gpuckpt";
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

}  // namespace

void set_sink(Sink sink) {
  std::lock_guard lock(state().mutex);
  state().sink = std::move(sink);
}

void set_level(Level max_level) {
  std::lock_guard lock(state().mutex);
  state().max_level = max_level;
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
  if (s.sink) {
    s.sink(level, message);
    return;
  }
  std::fprintf(stderr, "%s: %s: %.*s\n", s.component.c_str(), level_name(level),
               static_cast<int>(message.size()), message.data());
}

void param(std::string_view name, std::string_view value) {
  std::string line = "param: ";
  line.append(name).append(":").append(value);
  write(Level::Info, line);
}

}  // namespace gpuckpt::log
