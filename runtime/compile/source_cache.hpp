// The cache of kernels from outside (kernel_request.hpp): like KernelCache for jitcache's
// own kernels, a KernelRequest becomes a verified cubin from the store's tiers, or is
// compiled once per key across threads and processes (Store::get_or_create). The stored
// value is the kernel bundle (artifact_bundle.hpp, read with parse_source_bundle) whose
// facts section holds every fact of the key, source_xxh3 among them; a read is refused
// unless those agree with the request, its entry and target included.
//
// Beside each entry, a spec record under the spec key (kernel_request.hpp): a small JSON
// value {"format", "key", "source_xxh3", "headers", "entry", "options"} so that lookup()
// finds an entry by family + spec + target alone, without the source. The first record of
// a spec is written create-only (Store::put_if_absent) after its first compile, so that of
// two requests compiling different sources for one spec at once, exactly one records it;
// the other is refused as below (its own bundle stays stored under its own key).
//
// Shadow verification: when a request comes with its source and a spec record exists,
// the source and header digests, the entry and the options must be the recorded ones. A
// difference means the family's spec does not determine its kernel (some input that
// changes the code is not a spec fact): compile() refuses with ErrorCode::invalid_input
// naming the family, the spec facts and each difference with both values, and serves
// nothing. A family whose source changes on purpose must say so in a spec fact (a version).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cache/store.hpp"
#include "jitcache/error.hpp"
#include "runtime/compile/kernel_cache.hpp"
#include "runtime/compile/kernel_request.hpp"

namespace jitcache {

// Bump when the spec record's JSON changes.
inline constexpr int k_spec_record_format = 2;

struct SourceResult {
  std::string entry;
  SourceKind kind = SourceKind::cuda;
  std::vector<std::uint8_t> cubin;
  std::string ptx;
  ResourceUsage usage;
  std::string log;
  bool from_cache = false;
  cache::CacheKey key;
  cache::Source source = cache::Source::produced;
  bool verified = false;  // compile(): the request was checked against an existing spec record
};

// A spec record: what one spec was built from.
struct SpecRecord {
  std::string key;  // the source bundle's key, 32 hex digits
  std::string source_xxh3;
  std::map<std::string, std::string> headers;  // header.<name> fact -> digest
  std::string entry;
  std::string options;  // normalized_options
};

// A spec record's JSON (format k_spec_record_format); invalid_input naming the field.
Result<SpecRecord> parse_spec_record(std::span<const std::byte> bytes);

// How a spec record disagrees with the facts of an entry (a request's, or a stored
// bundle's: both hold source_xxh3, entry, options and header.<name>): what differs, as the
// record has it and as the facts do (options as "[a, b]"). Empty when they agree.
struct RecordDifference {
  std::string what;  // "source_xxh3", "entry", "options", "header.<name>"
  std::string recorded;
  std::string found;
};
std::vector<RecordDifference> record_differences(const SpecRecord& record, const cache::Facts& facts);

using SourceCompileFn = std::function<Result<SourceOutput>(const SourceInput&)>;
using ToolProbe = std::function<Result<ToolFacts>(SourceKind)>;

struct SourceCacheOptions {
  // Spec schemas by family; a request's family must be registered. Null: SpecRegistry::global().
  const SpecRegistry* registry = nullptr;
  // The compile step; empty: compile_source. (Tests count or fake compiles here.)
  SourceCompileFn compile;
  // The tools' versions and fingerprints for keys; empty: probe_tools. Asked once per kind
  // for the cache's life (a failure is asked again).
  ToolProbe tools;
  // The tools as a compile loaded them, checked against the key's before a compiled entry
  // is stored (`tools` may answer from a memo without loading anything, and a toolkit
  // replaced under a running process must not store its binary under the old tool's key).
  // Empty: no check (a fake compile step).
  ToolProbe loaded_tools;
  // Whether a read also checks that the cubin is an ELF image holding the entry as a
  // function (cubin_elf.hpp). Off only for tests whose compile step is a fake.
  bool check_cubin = true;
  // No-compile mode (kernel_cache.hpp): compile() fails on a miss (ErrorCode::unavailable,
  // naming the request and every tier looked up in) and never calls the compile step.
  NoCompile no_compile = NoCompile::no;
};

// The check of a source cache entry's bytes against its facts, for tiers that are not this
// machine's (RemoteTierOptions::check_content): a source bundle whose facts and entry are
// exactly the key's, or a well-formed spec record.
Status check_source_content(const cache::Facts& facts, std::span<const std::byte> bytes);

// The content check of a store that holds both kinds of entry: check_source_content for a
// source cache entry (is_request_facts), check_bundle_facts for one of jitcache's own kernels.
Status check_stored_content(const cache::Facts& facts, std::span<const std::byte> bytes);

class SourceCache {
 public:
  explicit SourceCache(cache::Store& store, SourceCacheOptions options = {});

  // The cubin for `request`: validated against its family's schema, shadow-verified
  // against the spec record, then from the store or compiled once per key. A stored bundle
  // that does not parse or disagrees with the request's facts is removed and compiled again.
  Result<SourceResult> compile(const KernelRequest& request);

  // Shadow verification alone: an error when a spec record exists for the request's spec
  // and names another source or other headers; fine when none exists.
  Status verify_spec(const KernelRequest& request);

  // The entry for a spec, by the spec record (the kind comes from the family's schema, the
  // entry and options from the record); std::nullopt when there is none (or the entry it
  // names is gone). Never compiles.
  Result<std::optional<SourceResult>> lookup(const std::string& family, const std::map<std::string, std::string>& spec,
                                             const std::string& target);

 private:
  // A request whose spec is valid and whose source agrees with the spec record, if any.
  struct Checked {
    cache::Facts facts;  // the full key's
    cache::Facts spec;   // the spec key's
    std::optional<SpecRecord> record;
  };
  Result<Checked> check(const KernelRequest& request);
  const SpecRegistry& registry() const;
  Result<ToolFacts> tools(SourceKind kind) const;
  Result<std::optional<SpecRecord>> read_record(const cache::Facts& spec);
  Status check_record(const KernelRequest& request, const cache::Facts& facts, const SpecRecord& record) const;
  // Records the spec, replacing what was there.
  void write_record(const cache::Facts& spec, const cache::Facts& facts);
  // Records the spec unless it has a record: the record another writer stored first, or
  // std::nullopt when this request's is the spec's now (or could not be stored: logged).
  std::optional<SpecRecord> record_first(const cache::Facts& spec, const cache::Facts& facts);
  Result<SourceResult> fetch(const KernelRequest& request, const cache::Facts& facts);
  Result<SourceResult> decode(const cache::Facts& facts, const cache::SharedBytes& bytes, cache::Source source) const;

  cache::Store& m_store;
  SourceCacheOptions m_options;
  mutable std::mutex m_tools_mutex;
  mutable std::map<SourceKind, ToolFacts> m_tools;  // by kind, once known
};

}  // namespace jitcache
