// The C++ API through the installed static library: the same preparation as consumer.c.
//   consumer_static CHECKPOINT_DIR CACHE_DIR
#include <cstdio>

#include "jitcache/runtime.hpp"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: consumer_static CHECKPOINT_DIR CACHE_DIR\n");
    return 2;
  }
  jitcache::set_log_level(jitcache::LogLevel::warning);
  jitcache::RuntimeOptions options;
  options.cache_dir = argv[2];
  options.device = jitcache::DeviceUse::none;
  auto runtime = jitcache::Runtime::open(options);
  if (!runtime) {
    std::fprintf(stderr, "open: %s\n", runtime.error().to_string().c_str());
    return 1;
  }
  auto model = (*runtime)->prepare({argv[1], jitcache::RecordFormat::b12x_432, "sm_90", std::nullopt, std::nullopt});
  if (!model) {
    std::fprintf(stderr, "prepare: %s\n", model.error().to_string().c_str());
    return 1;
  }
  const auto& stats = (*model)->stats();
  std::printf("layers %zu\n", (*model)->layers().size());
  std::printf("variants %zu cached %zu compiled %zu\n", stats.variants, stats.cached, stats.compiled);
  return (*model)->layers().size() == 79 ? 0 : 1;
}
