// The target prepare() gives a device when the caller names none (runtime/device_target.hpp):
// the most specific target whose every variant the cache holds, else the most specific
// one. Asked with a compute capability, so no device is needed: the cache is filled by
// prepare() with explicit targets, as `jitcache warm --arch` fills it on a fleet.
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
    RuntimeOptions options;
    options.cache_dir = cache_dir();
    options.device = DeviceUse::none;
    auto rt = Runtime::open(options);
    ASSERT_OK(rt);
    ModelSpec model;
    model.checkpoint = k_checkpoint;
    model.format = format;
    model.target = target;
    auto prepared = (*rt)->prepare(model);
    ASSERT_OK(prepared);
    EXPECT_EQ((*prepared)->stats().stored, (*prepared)->stats().variants) << target;
  }

  // What prepare() would give a device of compute capability major.minor.
  std::string chosen(int major, int minor, RecordFormat format = RecordFormat::b12x_432) {
    KernelCacheOptions options;
    options.cache_dir = cache_dir();
    options.remote = RemoteUse::off;
    auto opened = open_kernel_cache(options);
    EXPECT_OK(opened);
    if (!opened) return "";
    ResolveOptions resolve;
    resolve.checkpoint_dir = k_checkpoint;
    auto scales = resolve_scales(resolve);
    EXPECT_OK(scales);
    if (!scales) return "";
    auto target = target_for_device(*opened->store, *opened->compiler, *scales, format,
                                    default_policy(format), major, minor);
    EXPECT_OK(target);
    return target ? target->name : "";
  }
};

TEST_F(DeviceTargetTest, AnEmptyCacheGivesEachDeviceItsProductOrArchSpecificTarget) {
  EXPECT_EQ(chosen(9, 0), "sm_90");
  EXPECT_EQ(chosen(10, 0), "sm_100a");
  EXPECT_EQ(chosen(10, 3), "sm_103a");
  EXPECT_EQ(chosen(12, 0), "sm_120a");
  EXPECT_EQ(chosen(12, 1), "sm_121a");
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
  KernelCacheOptions options;
  options.cache_dir = cache_dir();
  options.remote = RemoteUse::off;
  auto opened = open_kernel_cache(options);
  ASSERT_OK(opened);
  ResolveOptions resolve;
  resolve.checkpoint_dir = k_checkpoint;
  auto scales = resolve_scales(resolve);
  ASSERT_OK(scales);
  auto none = target_for_device(*opened->store, *opened->compiler, *scales, RecordFormat::b12x_432,
                                LatentPolicy::per_layer, 8, 9);
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().code, ErrorCode::unavailable);
  EXPECT_NE(none.error().message.find("compute capability 8.9"), std::string::npos) << none.error().message;
}

}  // namespace
}  // namespace jitcache
