// Logging goes through one process-wide sink that a host (a serving engine) can replace,
// so jitcache's lines land in the engine's own logger. Default: stderr.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace jitcache {

enum class LogLevel { debug = 0, info = 1, warning = 2, error = 3, off = 4 };

const char* to_string(LogLevel level);
std::optional<LogLevel> parse_log_level(std::string_view text);

using LogSink = std::function<void(LogLevel, std::string_view message)>;

// Replaces the sink (nullptr restores stderr). Thread-safe.
void set_log_sink(LogSink sink);
// Lines below this level are dropped before reaching the sink. Thread-safe.
void set_log_level(LogLevel level);
LogLevel log_level();

// Control characters in `message` (C0 and DEL: newline, tab, ...) reach the sink as \xNN,
// so every message is exactly one line.
void log(LogLevel level, std::string_view message);
inline void log_debug(std::string_view m) { log(LogLevel::debug, m); }
inline void log_info(std::string_view m) { log(LogLevel::info, m); }
inline void log_warning(std::string_view m) { log(LogLevel::warning, m); }
inline void log_error(std::string_view m) { log(LogLevel::error, m); }

}  // namespace jitcache
