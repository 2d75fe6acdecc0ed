#include "cache/entry.hpp"

namespace jitcache::cache {

Counters& Counters::operator+=(const Counters& other) {
  memory_hits += other.memory_hits;
  disk_hits += other.disk_hits;
  coalesced += other.coalesced;
  misses += other.misses;
  produces += other.produces;
  produce_failures += other.produce_failures;
  quarantined += other.quarantined;
  evicted += other.evicted;
  compile_ms_spent += other.compile_ms_spent;
  compile_ms_saved += other.compile_ms_saved;
  return *this;
}

}  // namespace jitcache::cache
