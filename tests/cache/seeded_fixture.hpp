// A test fixture with a fresh seed for each test's random data, printed under the test
// suite's name as every seed is (jitcache::testing::test_seed; replay with
// JITCACHE_TEST_SEED). The store tests and the remote ones derive their fixtures from it:
// `using StoreTest = Seeded<StoreFixture>;`.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "test_support.hpp"

namespace jitcache::cache::testing {

template <class Fixture>
class Seeded : public Fixture {
 protected:
  std::uint64_t seed =
      jitcache::testing::test_seed(::testing::UnitTest::GetInstance()->current_test_info()->test_suite_name());
};

}  // namespace jitcache::cache::testing
