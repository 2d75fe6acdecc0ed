#include "jitcache/log.hpp"

#include <pthread.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <mutex>

#include "support/text.hpp"

namespace jitcache {
namespace {

std::mutex g_sink_mutex;
std::shared_ptr<const LogSink> g_sink;  // null: stderr
std::atomic<LogLevel> g_level{LogLevel::info};

// fork() from one thread while another copies the sink would leave the child's mutex held
// for ever: the forking thread takes it around fork() (it is held only to copy a pointer).
void lock_sink() { g_sink_mutex.lock(); }
void unlock_sink() { g_sink_mutex.unlock(); }
[[maybe_unused]] const int g_fork_handlers = pthread_atfork(&lock_sink, &unlock_sink, &unlock_sink);

void write_stderr(LogLevel level, std::string_view message) {
  std::fprintf(stderr, "jitcache %s: %.*s\n", to_string(level), static_cast<int>(message.size()),
               message.data());
}

}  // namespace

const char* to_string(LogLevel level) {
  switch (level) {
    case LogLevel::debug: return "DEBUG";
    case LogLevel::info: return "INFO";
    case LogLevel::warning: return "WARNING";
    case LogLevel::error: return "ERROR";
    case LogLevel::off: return "OFF";
  }
  return "?";
}

std::optional<LogLevel> parse_log_level(std::string_view text) {
  std::string lower;
  for (char c : text) lower += static_cast<char>((c >= 'A' && c <= 'Z') ? c - 'A' + 'a' : c);
  if (lower == "debug") return LogLevel::debug;
  if (lower == "info") return LogLevel::info;
  if (lower == "warning" || lower == "warn") return LogLevel::warning;
  if (lower == "error") return LogLevel::error;
  if (lower == "off" || lower == "none") return LogLevel::off;
  return std::nullopt;
}

void set_log_sink(LogSink sink) {
  auto next = sink ? std::make_shared<const LogSink>(std::move(sink)) : nullptr;
  std::lock_guard lock(g_sink_mutex);
  g_sink = std::move(next);
}

void set_log_level(LogLevel level) { g_level.store(level, std::memory_order_relaxed); }
LogLevel log_level() { return g_level.load(std::memory_order_relaxed); }

void log(LogLevel level, std::string_view message) {
  if (level < g_level.load(std::memory_order_relaxed) || level == LogLevel::off) return;
  // Messages quote paths and names a user chose: one message must stay one line, so a
  // newline in a checkpoint path can neither split it nor forge a second line.
  const std::string line = text::escape_control(message);
  std::shared_ptr<const LogSink> sink;
  {
    std::lock_guard lock(g_sink_mutex);
    sink = g_sink;
  }
  if (sink) {
    (*sink)(level, line);
  } else {
    write_stderr(level, line);
  }
}

}  // namespace jitcache
