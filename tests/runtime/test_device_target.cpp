// The target prepare() gives a device when the caller names none (runtime/device_target.hpp):
// the most specific target whose every variant the cache holds, else the most specific
// one. Asked with a compute capability, so no device is needed: the cache is filled by
// prepare() with explicit targets, as `jitcache warm --arch` fills it on a fleet.
#include "deviceless_runtime.hpp"
#include "jitcache/runtime.hpp"
#include "runtime/compile/open_kernel_cache.hpp"
#include "runtime/device_target.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

const std::filesystem::path k_checkpoint = jitcache::testing::source_dir() / "examples" / "glm5-mini";

class DeviceTargetTest : public jitcache::testing::TempDirTest {
 protected:
  std::filesystem::path cache_dir() { return dir() / "cache"; }

  // Compiles and stores every variant the checkpoint needs on `target` in `format`.
  void warm(const std::string& target, RecordFormat format = RecordFormat::b12x_432) {
    auto rt = jitcache::testing::open_deviceless_runtime(cache_dir());
    ASSERT_OK(rt);
    ModelSpec model;
    model.checkpoint = k_checkpoint;
    model.format = format;
    model.target = target;
    auto prepared = (*rt)->prepare(model);
    ASSERT_OK(prepared);
    EXPECT_EQ((*prepared)->stats().stored, (*prepared)->stats().variants) << target;
  }

  // The target prepare() would give a device of compute capability major.minor, asked of
  // the cache directory alone (no remote) for the checkpoint's scales.
  Result<Target> target_for(int major, int minor, RecordFormat format, LatentPolicy policy) {
    KernelCacheOptions options;
    options.cache_dir = cache_dir();
    options.remote = RemoteUse::off;
    auto opened = open_kernel_cache(options);
    if (!opened) return std::unexpected(opened.error());
    ResolveOptions resolve;
    resolve.checkpoint_dir = k_checkpoint;
    const ResolvedScales scales = JC_TRY(resolve_scales(resolve));
    return target_for_device(*opened->store, *opened->compiler, scales, format, policy, major, minor);
  }

  // Its name, for the tests that expect one.
  std::string chosen(int major, int minor, RecordFormat format = RecordFormat::b12x_432) {
    auto target = target_for(major, minor, format, default_policy(format));
    EXPECT_OK(target);
    return target ? target->name : "";
  }
};

TEST_F(DeviceTargetTest, AnEmptyCacheGivesEachDeviceItsProductOrArchSpecificTarget) {
  const struct {
    int major, minor;
    const char* target;
  } cases[] = {{9, 0, "sm_90"}, {10, 0, "sm_100a"}, {10, 3, "sm_103a"}, {12, 0, "sm_120a"}, {12, 1, "sm_121a"}};
  for (const auto& c : cases) EXPECT_EQ(chosen(c.major, c.minor), c.target) << c.major << "." << c.minor;
}

TEST_F(DeviceTargetTest, AFamilyCubinTheCacheHoldsServesEveryMemberOfTheFamily) {
  warm("sm_120f");
  warm("sm_120a");
  // 12.0 holds its own arch-specific cubins: the most specific.
  EXPECT_EQ(chosen(12, 0), "sm_120a");
  // An sm_120a cubin is never offered to a 12.1 device; the sm_120f one is.
  EXPECT_EQ(chosen(12, 1), "sm_120f");
  // Nothing of another family is offered.
  EXPECT_EQ(chosen(10, 0), "sm_100a");
  EXPECT_EQ(chosen(10, 3), "sm_103a");
}

TEST_F(DeviceTargetTest, BlackwellUltraTakesTheB200FamilyCubinButNeverTheB200Ones) {
  warm("sm_100a");
  EXPECT_EQ(chosen(10, 3), "sm_103a");
  warm("sm_100f");
  EXPECT_EQ(chosen(10, 3), "sm_100f");
  EXPECT_EQ(chosen(10, 0), "sm_100a");
}

TEST_F(DeviceTargetTest, TheGenericCubinIsTheLastChoiceAndAPartialTargetIsNone) {
  warm("sm_120");
  EXPECT_EQ(chosen(12, 1), "sm_120");
  // Every variant of the plan must be held: sm_120f cubins of another record format do
  // not make the target held for this one.
  warm("sm_120f", RecordFormat::b12x_368);
  EXPECT_EQ(chosen(12, 1), "sm_120");
  EXPECT_EQ(chosen(12, 1, RecordFormat::b12x_368), "sm_120f");
}

TEST_F(DeviceTargetTest, ADeviceNoTargetRunsOnIsRefusedNamingIt) {
  auto none = target_for(8, 9, RecordFormat::b12x_432, LatentPolicy::per_layer);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::unavailable);
  EXPECT_NE(none.error().message.find("compute capability 8.9"), std::string::npos) << none.error().message;
}

}  // namespace
}  // namespace jitcache
