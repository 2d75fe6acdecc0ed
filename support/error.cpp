#include "jitcache/error.hpp"

namespace jitcache {

const char* to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument: return "invalid argument";
    case ErrorCode::invalid_input: return "invalid input";
    case ErrorCode::io: return "I/O error";
    case ErrorCode::not_found: return "not found";
    case ErrorCode::unsafe: return "refused as unsafe";
    case ErrorCode::compile: return "compile error";
    case ErrorCode::database: return "database error";
    case ErrorCode::unavailable: return "unavailable";
    case ErrorCode::internal: return "internal error";
  }
  return "error";
}

std::string Error::to_string() const {
  std::string text = message;
  if (!detail.empty()) {
    text += "\n";
    text += detail;
  }
  return text;
}

}  // namespace jitcache
