// NVIDIA's rule of which devices a target's cubin runs on (variant_dimensions.hpp: each
// target's compute capability and reach; kernel_spec.hpp: cubin_runs_on,
// targets_for_device, choose_device_target), one row per device capability against every
// target.
#include <algorithm>
#include <string>
#include <vector>

#include "kernel_templates/kernel_spec.hpp"
#include "kernel_templates/variant_dimensions.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

// The columns of the matrix below, in table order. Pinned here so that a new target row
// makes this test ask for its column.
const std::vector<std::string> k_columns{"sm_90",   "sm_90a",  "sm_100", "sm_100a", "sm_100f", "sm_103a",
                                         "sm_110a", "sm_120",  "sm_120a", "sm_120f", "sm_121a"};

struct DeviceRow {
  int major;
  int minor;
  const char* runs;                      // one character per column: x runs, . does not
  std::vector<std::string> most_specific;  // targets_for_device, in order
};

// clang-format off
const std::vector<DeviceRow> k_matrix{
    //                 sm_90 sm_90a sm_100 sm_100a sm_100f sm_103a sm_110a sm_120 sm_120a sm_120f sm_121a
    {8, 9,   "...........", {}},
    {9, 0,   "xx.........", {"sm_90a", "sm_90"}},
    {10, 0,  "..xxx......", {"sm_100a", "sm_100f", "sm_100"}},
    {10, 3,  "..x.xx.....", {"sm_103a", "sm_100f", "sm_100"}},
    {11, 0,  "......x....", {"sm_110a"}},
    {12, 0,  ".......xxx.", {"sm_120a", "sm_120f", "sm_120"}},
    {12, 1,  ".......x.xx", {"sm_121a", "sm_120f", "sm_120"}},
    // A later 12.x chip the table does not know: the generic cubin reaches it (SASS is
    // forward compatible in the minor version), a family's only its known members.
    {12, 5,  ".......x...", {"sm_120"}},
    {13, 0,  "...........", {}},
};
// clang-format on

TEST(TargetCompatibility, TheColumnsAreTheTable) {
  std::vector<std::string> names;
  for (const TargetRow& row : k_targets.rows) names.emplace_back(row.name);
  EXPECT_EQ(names, k_columns);
}

TEST(TargetCompatibility, EveryDeviceAgainstEveryTarget) {
  for (const DeviceRow& device : k_matrix) {
    const std::string cc = capability_text(device.major, device.minor);
    ASSERT_EQ(std::string(device.runs).size(), k_columns.size()) << cc;
    for (std::size_t i = 0; i < k_columns.size(); ++i)
      EXPECT_EQ(cubin_runs_on(k_columns[i], device.major, device.minor), device.runs[i] == 'x')
          << "a " << k_columns[i] << " cubin on a " << cc << " device";
    EXPECT_EQ(targets_for_device(device.major, device.minor), device.most_specific) << cc;
  }
}

TEST(TargetCompatibility, EveryKnownDeviceHasATargetAndEveryTargetADevice) {
  for (const DeviceCapability& d : k_device_capabilities)
    EXPECT_FALSE(targets_for_device(d.major, d.minor).empty()) << capability_text(d.major, d.minor);
  for (const TargetRow& row : k_targets.rows) {
    // A target runs on the capability it is compiled for.
    EXPECT_TRUE(cubin_runs_on(row.name, row.major, row.minor)) << row.name;
    EXPECT_NE(capabilities_of(row.name), "no known device") << row.name;
  }
}

TEST(TargetCompatibility, NamesThatAreNoTargetRunNowhere) {
  for (const char* name : {"", "sm_12", "sm_120x", "SM_120a", "compute_120f", "sm_121f", "sm_90f"})
    for (const DeviceCapability& d : k_device_capabilities) EXPECT_FALSE(cubin_runs_on(name, d.major, d.minor)) << name;
}

TEST(TargetCompatibility, WhatEachTargetRunsOnReads) {
  const std::pair<const char*, const char*> cases[] = {
      {"sm_100f", "10.0 and 10.3"},
      {"sm_120f", "12.0 and 12.1"},
      {"sm_120", "12.0 and 12.1"},
      {"sm_120a", "12.0 only"},
      {"sm_90", "9.0 only"},
      {"sm_89", "no known device"},
  };
  for (const auto& [target, reads] : cases) EXPECT_EQ(capabilities_of(target), reads) << target;
}

TEST(TargetCompatibility, TheRefusalNamesTheTargetTheDeviceAndWhatRunsThere) {
  EXPECT_OK(check_cubin_runs_on("sm_120f", 12, 1));
  const Status refused = check_cubin_runs_on("sm_120a", 12, 1);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::invalid_argument);
  EXPECT_EQ(refused.error().message,
            "an sm_120a cubin cannot run on a device of compute capability 12.1: it runs on 12.0 only; the targets "
            "that run there: sm_121a, sm_120f, sm_120");
  const Status nowhere = check_cubin_runs_on("sm_90", 8, 9);
  ASSERT_FALSE(nowhere);
  EXPECT_NE(nowhere.error().message.find("no target of this build runs there"), std::string::npos)
      << nowhere.error().message;
}

// choose_device_target: the first target the cache holds, most specific first, else the
// most specific one.
struct Choice {
  int major;
  int minor;
  std::vector<std::string> held;
  std::string chosen;
  std::vector<std::string> asked;  // in order
};

TEST(TargetCompatibility, ADeviceIsGivenTheMostSpecificCubinHeldOrCompilable) {
  const std::vector<Choice> cases{
      // Nothing held: the arch-specific target of the chip, compiled (no product target runs on 12.1).
      {12, 1, {}, "sm_121a", {"sm_121a", "sm_120f", "sm_120"}},
      // An sm_120a cubin is never offered to a 12.1 device; an sm_120f one is.
      {12, 1, {"sm_120a"}, "sm_121a", {"sm_121a", "sm_120f", "sm_120"}},
      {12, 1, {"sm_120a", "sm_120f"}, "sm_120f", {"sm_121a", "sm_120f"}},
      {12, 1, {"sm_120", "sm_120f"}, "sm_120f", {"sm_121a", "sm_120f"}},
      {12, 1, {"sm_120"}, "sm_120", {"sm_121a", "sm_120f", "sm_120"}},
      {12, 0, {"sm_120a", "sm_120f"}, "sm_120a", {"sm_120a"}},
      {12, 0, {"sm_121a", "sm_120"}, "sm_120", {"sm_120a", "sm_120f", "sm_120"}},
      {10, 3, {"sm_100a", "sm_100f"}, "sm_100f", {"sm_103a", "sm_100f"}},
      {10, 3, {"sm_100a"}, "sm_103a", {"sm_103a", "sm_100f", "sm_100"}},
      {10, 0, {"sm_103a", "sm_100"}, "sm_100", {"sm_100a", "sm_100f", "sm_100"}},
      {9, 0, {"sm_90"}, "sm_90", {"sm_90a", "sm_90"}},
      // Nothing held on Hopper: the product's sm_90 (its kernels use nothing of sm_90a).
      {9, 0, {}, "sm_90", {"sm_90a", "sm_90"}},
      {11, 0, {"sm_100f"}, "sm_110a", {"sm_110a"}},
  };
  for (const Choice& c : cases) {
    std::vector<std::string> asked;
    const auto chosen = choose_device_target(c.major, c.minor, [&](const Target& t) -> Result<bool> {
      asked.push_back(t.name);
      return std::find(c.held.begin(), c.held.end(), t.name) != c.held.end();
    });
    const std::string cc = capability_text(c.major, c.minor);
    ASSERT_OK(chosen);
    EXPECT_EQ(chosen->name, c.chosen) << cc;
    EXPECT_EQ(asked, c.asked) << cc;
    EXPECT_TRUE(cubin_runs_on(chosen->name, c.major, c.minor)) << cc;
  }
}

TEST(TargetCompatibility, ADeviceNoTargetRunsOnIsUnavailableNamingIt) {
  bool asked = false;
  const auto none = choose_device_target(8, 9, [&](const Target&) -> Result<bool> {
    asked = true;
    return true;
  });
  ASSERT_FALSE(none);
  EXPECT_FALSE(asked);
  EXPECT_EQ(none.error().code, ErrorCode::unavailable);
  EXPECT_EQ(none.error().message,
            "no target of this build runs on a device of compute capability 8.9 (its targets run on 9.0, 10.0, "
            "10.3, 11.0, 12.0 or 12.1)");
}

TEST(TargetCompatibility, TheCachesErrorIsReturned) {
  const auto failed = choose_device_target(12, 0, [](const Target&) -> Result<bool> {
    return make_error(ErrorCode::database, "index unreadable");
  });
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, ErrorCode::database);
}

}  // namespace
}  // namespace jitcache
