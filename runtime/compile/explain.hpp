// Why a lookup hits or misses (`jitcache explain`): the key it uses and every fact in it,
// the tier that holds it, and for a miss the nearest entries of every tier that can list
// its entries (StorageTier::list_entries), each with the facts that differ, in words:
// "compiler build differs: cache has …, this node has …", "latent_scale: cache has
// identity, layer 78 needs dynamic". Nearest: the same kernel (kernel_family and kernel
// for jitcache's own kernels; record and family for kernels from outside), fewest
// differences first. A question, not a lookup: nothing is counted, filled or compiled.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include <filesystem>
#include <map>

#include "cache/store.hpp"
#include "jitcache/compile.hpp"
#include "jitcache/error.hpp"
#include "runtime/compile/compiler.hpp"

namespace jitcache {

// A tier as `coverage` and `explain` report it: "memory", "local" (the cache directory),
// "provider", "remote".
const char* coverage_tier_name(cache::Tier tier);

// One way an entry differs from what a lookup wants. Facts that change together for one
// cause are one difference: the kernel's source and headers ("source"), the record format
// (format or rope, and record_bytes).
struct FactDifference {
  std::string fact;                    // the fact, or "source" / "format" for a group
  std::optional<std::string> cached;   // the entry's value; absent: the entry has no such fact
  std::optional<std::string> wanted;   // the lookup's value; absent: the lookup has no such fact
  std::string text;                    // the difference in words
};

struct NearEntry {
  std::string key;
  std::vector<FactDifference> differences;
};

struct TierNearest {
  std::string tier;          // coverage_tier_name
  std::string name;          // the tier's own name (StorageTier::name)
  bool listable = true;      // false: the tier cannot list its entries (memory, a remote store)
  std::optional<std::string> error;  // listing failed: why
  std::size_t candidates = 0;        // entries of the same kernel it holds
  std::vector<NearEntry> nearest;    // fewest differences first
};

struct KeyExplanation {
  std::string what;  // what is looked up: a variant's label, a family and spec
  std::string key;
  std::vector<std::pair<std::string, std::string>> facts;  // every fact of the key, sorted by name
  std::optional<cache::Located> found;  // the tier that holds it
  std::vector<TierNearest> tiers;       // for a miss, each tier below memory in lookup order
};

struct ExplainOptions {
  // Who needs the lookup's values, for the sentences: "layer 78 needs", "this lookup needs".
  std::string subject = "this lookup needs";
  std::size_t nearest = 3;  // entries per tier
};

// The difference between an entry's value of `fact` and the lookup's, in words.
std::string describe_difference(const std::string& fact, const std::optional<std::string>& cached,
                                const std::optional<std::string>& wanted, const std::string& subject);

// How `cached` differs from `wanted`, grouped as FactDifference says, in fact order.
std::vector<FactDifference> fact_differences(const cache::Facts& cached, const cache::Facts& wanted,
                                             const std::string& subject);

Result<KeyExplanation> explain_key(cache::Store& store, const cache::Facts& wanted, std::string what,
                                   const ExplainOptions& options = {});

// A spec-keyed lookup of a kernel from outside (SourceCache::lookup): the spec key of
// `family` with `spec` facts, for `kind` and `target`, keyed with this node's tools (NVRTC's
// fingerprint is `nvrtc`'s, the others found through `memo` as probe_tools does). The
// nearest entries are the family's other spec records: another spec fact, target or tool build.
Result<KeyExplanation> explain_spec(cache::Store& store, const Compiler& nvrtc, const std::filesystem::path& memo,
                                    const std::string& family, const std::map<std::string, std::string>& spec,
                                    SourceKind kind, const std::string& target, std::size_t nearest = 3);

nlohmann::json to_json(const KeyExplanation& explanation);
// The explanation as lines of text for a terminal (no trailing newline on the last).
std::string to_text(const KeyExplanation& explanation);

}  // namespace jitcache
