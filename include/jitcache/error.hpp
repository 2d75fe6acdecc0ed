// Errors as values: functions that can fail return jitcache::Result<T>, which carries
// either the value or an Error naming what went wrong, where (file, field), and why.
// Results become exceptions or exit codes only at the public API and CLI boundary.
#pragma once

#include <expected>
#include <string>
#include <utility>

namespace jitcache {

enum class ErrorCode {
  invalid_argument,  // caller passed something unusable
  invalid_input,     // a file or value failed validation (malformed, out of range)
  io,                // the operating system refused a read, write, rename, ...
  not_found,         // a named thing that must exist does not
  unsafe,            // refused for safety (symlink, wrong owner, permissions, path escape)
  compile,           // a compiler back end rejected the program
  database,          // the SQLite index is unusable
  unavailable,       // an optional facility (GPU, driver, tool) is absent
  internal,          // a bug: an invariant did not hold
};

const char* to_string(ErrorCode code);

struct Error {
  ErrorCode code = ErrorCode::internal;
  std::string message;  // complete sentence-like text, naming file and field where known
  std::string detail;   // optional long text (a compiler log); printed after the message

  std::string to_string() const;
};

template <class T>
using Result = std::expected<T, Error>;

using Status = std::expected<void, Error>;

inline std::unexpected<Error> make_error(ErrorCode code, std::string message,
                                         std::string detail = {}) {
  return std::unexpected<Error>(Error{code, std::move(message), std::move(detail)});
}

}  // namespace jitcache

// Propagates an error from an expression returning Result/Status, else yields its value.
// A GCC/Clang statement expression, so call sites stay one line. Its value is copied
// out, so for move-only values test the Result explicitly instead.
#define JC_TRY(expr)                                              \
  __extension__({                                                        \
    auto jc_try_result_ = (expr);                                 \
    if (!jc_try_result_) return std::unexpected(std::move(jc_try_result_.error())); \
    std::move(jc_try_result_).value();                            \
  })
