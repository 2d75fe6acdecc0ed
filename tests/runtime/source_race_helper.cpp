// A separate process for the source cache's race tests (test_source_cache_race.cpp):
//
//   source_race_helper ROOT ROUND SCALE READY_FD BARRIER_FD [REDIS_URL]
//       Opens the store at ROOT (with a remote tier on REDIS_URL when given), writes one
//       byte to READY_FD, waits until BARRIER_FD reads end-of-file (both racers are
//       released together), then compiles racing_request(ROUND, SCALE) with a fake
//       compile step of 30 ms. Prints the error, if any, on stderr.
//
// Exit status: a RaceOutcome (source_race_helper.hpp).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "cache/store.hpp"
#include "remote/redis_url.hpp"
#include "remote/remote_tier.hpp"
#include "source_race_helper.hpp"

using namespace jitcache;
using namespace jitcache::testing;

int main(int argc, char** argv) {
  if (argc != 6 && argc != 7) return race_arguments;
  ::alarm(60);  // never hang a test run, whatever happens
  const std::string root = argv[1];
  const int ready = std::atoi(argv[4]);
  const int barrier = std::atoi(argv[5]);
  cache::StoreOptions store_options;
  if (argc == 7) {
    auto url = remote::parse_redis_url(argv[6], "the helper's argument");
    if (!url) return race_arguments;
    remote::RemoteTierOptions options;
    options.redis.url = *url;
    options.fleet_key = k_race_fleet_key;
    options.check_content = check_stored_content;
    store_options.extra_tiers.push_back(std::make_shared<remote::RemoteTier>(options));
  }
  int outcome = race_failed;
  {
    auto store = cache::Store::open(root, store_options);
    if (!store) {
      std::fprintf(stderr, "open: %s\n", store.error().to_string().c_str());
      return race_failed;
    }
    SpecRegistry registry;
    if (!registry.add(racing_schema())) return race_failed;
    SourceCache cache(**store, racing_options(registry, std::chrono::milliseconds(30)));
    const char byte = 'r';
    if (::write(ready, &byte, 1) != 1) return race_arguments;
    ::close(ready);
    char ignored;
    while (::read(barrier, &ignored, 1) > 0) {
    }
    std::string message;
    outcome = race_compile(cache, racing_request(argv[2], argv[3]), &message);
    if (!message.empty()) std::fprintf(stderr, "%s\n", message.c_str());
  }
  return outcome;
}
