// What the kernel cache's tests share: a store in the test's temporary directory, opened as
// each process opens it, and a kernel an earlier process left there.
#pragma once

#include <memory>

#include <gtest/gtest.h>

#include "cache/store.hpp"
#include "runtime/compile/kernel_cache.hpp"
#include "test_support.hpp"

namespace jitcache::testing {

class KernelStoreTest : public TempDirTest {
 protected:
  std::unique_ptr<cache::Store> open_store() {
    auto store = cache::Store::open(dir() / "cache");
    EXPECT_TRUE(store.has_value()) << store.error().to_string();
    return std::move(*store);
  }

  // `spec` compiled by `compiler` into the store by a process that has closed it since.
  void warm(const KernelSpec& spec, const Compiler& compiler) {
    auto store = open_store();
    KernelCache kernels(*store, compiler);
    ASSERT_OK(kernels.get(spec));
  }
};

}  // namespace jitcache::testing
