// Checks of a command's JSON report, one row per field: the field's name and the value it
// must have (null for a field that must be null or absent). A failure names the field.
#pragma once

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace jitcache::testing {

inline void expect_fields(const nlohmann::json& doc, const nlohmann::json& expected) {
  for (const auto& [name, value] : expected.items()) {
    const nlohmann::json& actual = doc.contains(name) ? doc.at(name) : nlohmann::json();
    EXPECT_EQ(actual, value) << "field " << name << " of " << doc.dump();
  }
}

}  // namespace jitcache::testing
