// What the source cache's race tests (tests/runtime/compile/test_source_cache_race.cpp)
// and their helper program (source_race_helper.cpp) share: the family, a request of one
// spec whose source depends on a scale that is no spec fact, the fleet key, and the exit
// status that says how a compile ended.
#pragma once

#include <chrono>
#include <string>
#include <thread>

#include "runtime/compile/kernel_request.hpp"
#include "runtime/compile/source_cache.hpp"
#include "source_cache_fakes.hpp"

namespace jitcache::testing {

// A family whose spec (one fact, `round`, so that each round of a test has a spec of its
// own) does not determine its source: the scale is not a spec fact.
inline SpecSchema racing_schema() { return SpecSchema{"racing", SourceKind::cuda, {{"round", FactDomain{}}}}; }

inline KernelRequest racing_request(const std::string& round, const std::string& scale) {
  KernelRequest r;
  r.family = "racing";
  r.spec = {{"round", round}};
  r.text = "extern \"C\" __global__ void scale(float* x) { x[threadIdx.x] *= " + scale + "f; }\n";
  r.entry = "scale";
  r.target = "sm_90";
  return r;
}

inline constexpr const char* k_race_fleet_key = "race-fleet-key-of-32-bytes-or-more";

// How a racing compile ended (the helper's exit status).
enum RaceOutcome : int {
  race_served = 0,      // compiled or found, and its own source's cubin served
  race_failed = 1,      // any other error, or a wrong cubin
  race_arguments = 2,   // the helper was called wrongly
  race_incomplete = 3,  // ErrorCode::invalid_input: "the spec of kernel family racing is incomplete"
};

inline SourceCacheOptions racing_options(const SpecRegistry& registry, std::chrono::milliseconds compile_time) {
  SourceCacheOptions options;
  options.registry = &registry;
  options.compile = [compile_time](const SourceInput& input) -> Result<SourceOutput> {
    std::this_thread::sleep_for(compile_time);  // both racers finish their compiles together
    return fake_output(input);
  };
  options.tools = [](SourceKind kind) -> Result<ToolFacts> { return fake_tools(kind); };
  options.check_cubin = false;
  return options;
}

// One racer's compile, classified.
inline RaceOutcome race_compile(SourceCache& cache, const KernelRequest& request, std::string* message = nullptr) {
  auto got = cache.compile(request);
  if (!got) {
    if (message) *message = got.error().to_string();
    const bool incomplete = got.error().code == ErrorCode::invalid_input &&
                            got.error().message.find("spec of kernel family racing is incomplete") != std::string::npos;
    return incomplete ? race_incomplete : race_failed;
  }
  if (got->cubin != fake_output(source_input(request)).cubin) {
    if (message) *message = "served another source's cubin";
    return race_failed;
  }
  return race_served;
}

}  // namespace jitcache::testing
