// The fixture of the store tests (kept apart from cache_test_support.hpp, which the
// multi-process helper program also includes and which must not pull in GoogleTest's
// fixtures).
#pragma once

#include <filesystem>
#include <memory>

#include "cache/store.hpp"
#include "test_support.hpp"

namespace jitcache::cache::testing {

// A fresh private directory per test with a cache root below it.
class StoreFixture : public jitcache::testing::TempDirTest {
 protected:
  std::filesystem::path root() const { return dir() / "cache"; }

  std::unique_ptr<Store> open_store(StoreOptions options = {}) {
    auto store = Store::open(root(), std::move(options));
    EXPECT_TRUE(store.has_value()) << store.error().to_string();
    return store ? std::move(*store) : nullptr;
  }
};

}  // namespace jitcache::cache::testing
