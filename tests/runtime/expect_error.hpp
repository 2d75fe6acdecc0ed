// How the runtime tests check a refusal whose message must name several things.
#pragma once

#include <initializer_list>
#include <string>

#include <gtest/gtest.h>

#include "jitcache/error.hpp"

namespace jitcache::testing {

// Expects `error` to be `code` with a message holding each of `parts`; the message is shown
// with each part it lacks.
inline void expect_error_naming(const Error& error, ErrorCode code, std::initializer_list<std::string> parts) {
  EXPECT_EQ(error.code, code) << error.to_string();
  for (const std::string& part : parts)
    EXPECT_NE(error.message.find(part), std::string::npos) << "'" << part << "' in " << error.message;
}

}  // namespace jitcache::testing
