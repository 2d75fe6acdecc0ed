// One verified cache entry as it leaves this machine: into an export file
// (cache_archive.hpp) or a provider directory (cache_provider.hpp). gather_export_entries
// (cache_archive.hpp) collects them for either.
#pragma once

#include <string>

#include "cache/facts.hpp"
#include "cache/hash.hpp"
#include "cache/tier.hpp"

namespace jitcache {

struct ExportEntry {
  std::string label;  // "writer/dynamic/bf16/sm_90"
  cache::CacheKey key;
  cache::Facts facts;
  cache::SharedBytes bytes;
  double compile_ms = 0;
  bool compiled_now = false;  // compiled by the export that gathered it (else from a cache tier)
};

}  // namespace jitcache
