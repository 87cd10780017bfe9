// One logging front for every component. The sink is replaceable: the CRIU plugin routes lines into CRIU's own
// log, the agent and the hook write to stderr (journald / container logs pick them up).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace gpuckpt::log {

enum class Level { Error = 1, Warn = 2, Info = 3, Debug = 4 };

// How the stderr sink writes a line (docs/api.md, Logs):
//   text    2026-11-26T10:27:20.123Z gpuckpt-agent: info: MESSAGE   (the time only with set_timestamps)
//   logfmt  time=2026-11-26T10:27:20.123Z level=info component=gpuckpt-agent msg="MESSAGE"
//   json    {"time":"2026-11-26T10:27:20.123Z","level":"info","component":"gpuckpt-agent","msg":"MESSAGE"}
// The structured formats always carry the time; their message is printable ASCII (control characters and bytes
// outside ASCII as \xNN text), so every line parses whatever a message carries.
enum class Format { Text, Logfmt, Json };

using Sink = std::function<void(Level, std::string_view line)>;

void set_sink(Sink sink);                 // nullptr restores the stderr sink
void set_level(Level max_level);          // lines above this level are dropped
void set_component(std::string component);  // prefix, e.g. "gpuckpt-agent"
// The stderr sink starts each line with its UTC time, "2026-11-26T10:27:20.123Z " (a long-running daemon's lines
// must say when; CRIU's log and the hook's own file carry their own).
void set_timestamps(bool on);
void set_format(Format format);
Level level_from_string(std::string_view name, Level fallback);
// "text", "logfmt", "json"; nullopt for anything else.
std::optional<Format> format_from_string(std::string_view name);

// Writes one line: control characters in `message` (a newline, a carriage return, an escape sequence) are
// written as \xNN, so whatever a message carries can never start a line of its own.
void write(Level level, std::string_view message);
inline void error(std::string_view m) { write(Level::Error, m); }
inline void warn(std::string_view m) { write(Level::Warn, m); }
inline void info(std::string_view m) { write(Level::Info, m); }
inline void debug(std::string_view m) { write(Level::Debug, m); }

// A value from outside (a file name in a watched directory, an archive's container name, a container id a runtime
// sent, a request path) as it may appear in a log line or an error message: bytes outside printable ASCII and the
// backslash become \xNN, cut at `max` bytes ("..." marks the cut). The one escaping helper of every component.
std::string escaped(std::string_view text, std::size_t max = 256);

// Every tunable is logged exactly once as "param: NAME:VALUE" (the CRIU amdgpu plugin's habit).
void param(std::string_view name, std::string_view value);

}  // namespace gpuckpt::log
