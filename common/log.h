// One logging front for every component. The sink is replaceable: the CRIU plugin routes lines into CRIU's own
// log, the agent and the hook write to stderr (journald / container logs pick them up).
#pragma once

#include <functional>
#include <string>
#include <string_view>

namespace gpuckpt::log {

enum class Level { Error = 1, Warn = 2, Info = 3, Debug = 4 };

using Sink = std::function<void(Level, std::string_view line)>;

void set_sink(Sink sink);                 // nullptr restores the stderr sink
void set_level(Level max_level);          // lines above this level are dropped
void set_component(std::string component);  // prefix, e.g. "gpuckpt-agent"
Level level_from_string(std::string_view name, Level fallback);

void write(Level level, std::string_view message);
inline void error(std::string_view m) { write(Level::Error, m); }
inline void warn(std::string_view m) { write(Level::Warn, m); }
inline void info(std::string_view m) { write(Level::Info, m); }
inline void debug(std::string_view m) { write(Level::Debug, m); }

// Every tunable is logged exactly once as "param: NAME:VALUE" (the CRIU amdgpu plugin's habit).
void param(std::string_view name, std::string_view value);

}  // namespace gpuckpt::log
