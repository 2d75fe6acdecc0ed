// Checks the store tests share: a lookup that must hit in a given tier, a verify that must
// find nothing, and chosen counters, one row per counter (the member and the value it must
// have; a failure names the counter as k_counter_fields in cache/entry.hpp spells it).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "cache/entry.hpp"
#include "cache/store.hpp"
#include "test_support.hpp"

namespace jitcache::cache::testing {

// Options of a store with no memory tier: every hit is read from its tier.
inline StoreOptions without_memory_tier() {
  StoreOptions options;
  options.memory_max_bytes = 0;
  return options;
}

// Looks `key` up in `store`: the lookup must succeed and hit in `tier`, with `bytes` where
// given. Returns the hit's bytes, or null where there was no hit (the caller asserts it).
inline SharedBytes expect_hit(Store& store, const CacheKey& key, Tier tier, const Bytes* bytes = nullptr) {
  auto hit = store.get(key);
  EXPECT_OK(hit);
  if (!hit) return nullptr;
  EXPECT_TRUE(*hit) << "a miss where a hit in the " << to_string(tier) << " tier was due";
  if (!*hit) return nullptr;
  EXPECT_EQ((*hit)->tier, tier);
  if (bytes) {
    EXPECT_EQ(*(*hit)->bytes, *bytes);
  }
  return (*hit)->bytes;
}

// `store.verify()` runs and finds nothing; `why` is said where it finds something.
inline void expect_verified_clean(Store& store, const std::string& why = {}) {
  auto report = store.verify();
  ASSERT_OK(report);
  EXPECT_TRUE(report->clean()) << why;
}

// One row of expect_counters: a counter of Counters and its value.
struct CounterIs {
  CounterIs(std::uint64_t Counters::*member, std::uint64_t value, std::string why = {})
      : count(member), count_value(value), note(std::move(why)) {}
  CounterIs(double Counters::*member, double value, std::string why = {})
      : milliseconds(member), milliseconds_value(value), note(std::move(why)) {}

  std::string_view name() const {
    for (const CounterField& field : k_counter_fields)
      if ((count && field.count == count) || (milliseconds && field.milliseconds == milliseconds))
        return field.name;
    return "(not a counter of k_counter_fields)";
  }

  std::uint64_t Counters::*count = nullptr;
  std::uint64_t count_value = 0;
  double Counters::*milliseconds = nullptr;
  double milliseconds_value = 0;
  std::string note;  // said with a failure, after the counter's name
};

// Every row's counter in `counters` has the row's value (milliseconds as doubles).
inline void expect_counters(const Counters& counters, std::initializer_list<CounterIs> rows) {
  for (const CounterIs& row : rows) {
    if (row.count) {
      EXPECT_EQ(counters.*row.count, row.count_value) << "counter " << row.name() << " " << row.note;
    } else {
      EXPECT_DOUBLE_EQ(counters.*row.milliseconds, row.milliseconds_value)
          << "counter " << row.name() << " " << row.note;
    }
  }
}

}  // namespace jitcache::cache::testing
