// Cache providers: read-only directories of prebuilt kernel bundles installed on a node (a
// cache wheel made by `jitcache pack`, or any directory laid out as below), asked after the
// local cache and before the remote one. A hit is verified like every other read and then
// copied into the local cache; nothing is ever written to a provider.
//
// Layout of a provider directory (k_provider_version 1):
//
//   manifest.json         the manifest (below), at most k_max_provider_manifest_bytes
//   manifest.json.hmac    optional: 64 hex digits, HMAC-SHA256 under the fleet key of
//                         "jitcache.provider.v1\0" || the bytes of manifest.json
//   bundles/<key>.bundle  each entry's bytes (a kernel bundle, artifact_bundle.hpp), named by
//                         the entry's key (32 lowercase hex digits)
//
//   manifest := {"format": "jitcache-provider", "version": 1, "producer": "jitcache 0.1.0",
//                "created": "2026-12-06T16:02:11.123Z", "name": "jitcache_cache_glm5_mini_sm90",
//                "checkpoint": "glm5-mini", "record_format": "b12x-432", "targets": ["sm_90"],
//                "compiler_builds": {"<compiler_fingerprint>": <entries keyed with it>, ...},
//                "entries": [{"key": <32 hex>, "label": "writer/dynamic/b12x-432/sm_90",
//                             "facts": {<cache/facts.hpp's readable form>},
//                             "digest": <32 hex: XXH3-128 of the bundle>,
//                             "sha256": <64 hex: SHA-256 of the bundle>, "size": <bytes>,
//                             "compile_ms": <number>}, ...]}
//
// The manifest's signature covers every bundle through its SHA-256 (XXH3 is the store's
// integrity check, not a cryptographic one). The fleet key's rules are the export files':
// with a key configured, an unsigned or wrongly signed provider is refused whole; without
// one, a signed provider is used with its signature unchecked.
//
// What a reader refuses, and how:
//   - the whole provider (one warning, every lookup a miss): a directory another user could
//     replace (owned by neither the caller nor root, or group- or world-writable; its
//     manifest and bundles/ too), a manifest that is not a regular file or is too large,
//     malformed JSON, another format, a version this reader does not know (a newer
//     jitcache's), a bad signature or a missing one where a key is configured;
//   - one entry (one warning naming the provider and the entry, the others still served):
//     a manifest entry whose fields break their rules or whose facts do not hash to its key;
//     a bundle that is missing, not a regular file (a symbolic link included), of another
//     size, whose XXH3-128 or SHA-256 differs, or whose content fails the caller's check
//     (its own facts and the cubin's embedded facts against the key: check_stored_content).
// An entry keyed for another compiler build, format or jitcache version is not refused: no
// lookup here computes its key, so it simply misses.
#pragma once

#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cache/facts.hpp"
#include "cache/hash.hpp"
#include "cache/tier.hpp"
#include "jitcache/error.hpp"
#include "runtime/compile/export_entry.hpp"

namespace jitcache {

// Bump when the layout above changes; the golden test in
// tests/runtime/compile/test_cache_provider.cpp fails when you forget.
inline constexpr int k_provider_version = 1;
inline constexpr std::string_view k_provider_format = "jitcache-provider";
inline constexpr std::string_view k_provider_manifest_name = "manifest.json";
inline constexpr std::string_view k_provider_signature_name = "manifest.json.hmac";
inline constexpr std::string_view k_provider_bundles_dir = "bundles";
inline constexpr std::string_view k_provider_mac_domain = std::string_view("jitcache.provider.v1\0", 21);
inline constexpr std::uint64_t k_max_provider_manifest_bytes = 16u << 20;
inline constexpr std::size_t k_max_provider_entries = 4096;
inline constexpr std::uint64_t k_max_provider_bundle_bytes = 256u << 20;

// What the manifest says besides its entries.
struct ProviderInfo {
  std::string producer;       // "jitcache <version>"
  std::string created;        // ISO 8601 UTC
  std::string name;           // the package's name, e.g. "jitcache_cache_glm5_mini_sm90"
  std::string checkpoint;     // the checkpoint directory's name
  std::string record_format;  // "b12x-432", ...
  std::vector<std::string> targets;
};

// Writes a provider directory at `dir` (created; it must not exist, or be an empty
// directory): the bundles, then the manifest, then its signature when `fleet_key` is given.
// Each file is written atomically. Returns the bytes written.
Result<std::uint64_t> write_provider(const std::filesystem::path& dir, const ProviderInfo& info,
                                     std::span<const ExportEntry> entries,
                                     const std::optional<std::string>& fleet_key);

// The manifest's text as write_provider writes it (for tests of the reader).
std::string encode_provider_manifest(const ProviderInfo& info, std::span<const ExportEntry> entries);
// The signature file's text for `manifest` under `fleet_key`.
std::string sign_provider_manifest(std::string_view manifest, std::string_view fleet_key);

// An entry of a manifest that passed its checks.
struct ProviderItem {
  std::string label;
  cache::CacheKey key;
  cache::Facts facts;
  cache::BlobDigest digest;
  std::string sha256;  // lowercase hex
  std::uint64_t size = 0;
  double compile_ms = 0;
};

enum class ProviderSignature { verified, absent, unchecked };
const char* to_string(ProviderSignature signature);  // "verified", "unsigned", "unchecked"

// A manifest read and checked, with the entries that passed and why the others did not.
struct ProviderManifest {
  std::filesystem::path dir;
  ProviderInfo info;
  ProviderSignature signature = ProviderSignature::absent;
  std::vector<ProviderItem> items;
  std::vector<std::string> refused_entries;  // "entry 3 (<key or label>): why"
  std::map<std::string, std::size_t> compiler_builds;
};

// Reads and checks the provider at `dir` (the whole-provider refusals above are errors:
// ErrorCode::unsafe for a replaceable directory, invalid_input for a bad manifest or
// signature, not_found for a missing manifest).
Result<ProviderManifest> read_provider_manifest(const std::filesystem::path& dir,
                                                const std::optional<std::string>& fleet_key);

// Checks a bundle's content against the facts of its key (check_stored_content).
using ProviderContentCheck = std::function<Status(const cache::Facts&, std::span<const std::byte>)>;

// Reads one entry's bundle and checks its size, digests and content; the error names the
// file and what differs (ErrorCode::invalid_input, or not_found for a missing bundle).
Result<cache::SharedBytes> read_provider_bundle(const ProviderManifest& manifest, const ProviderItem& item,
                                                const ProviderContentCheck& check);

// The directories of a ':'-separated list (JITCACHE_PROVIDERS, the C option), empty
// segments dropped.
std::vector<std::filesystem::path> split_provider_list(std::string_view list);

// The provider directories a process uses: JITCACHE_PROVIDERS (directories separated by
// ':'; empty segments ignored), then `extra` (RuntimeOptions::providers, the Python
// package's installed cache wheels), each once, in that order.
std::vector<std::filesystem::path> provider_dirs(std::span<const std::filesystem::path> extra);

// A read-only tier over one provider directory. The manifest is read at the first lookup
// (a process that never misses its local cache never opens it); a provider refused whole is
// one warning and no entries. Thread-safe.
class ProviderTier final : public cache::StorageTier {
 public:
  ProviderTier(std::filesystem::path dir, std::optional<std::string> fleet_key, ProviderContentCheck check);

  cache::Tier kind() const override { return cache::Tier::provider; }
  // "provider <dir>"
  std::string name() const override;
  Result<std::optional<cache::TierHit>> get(const cache::CacheKey& key) override;
  // The same read and checks, counting nothing (Store::locate: `jitcache coverage`); an entry
  // that fails them is refused and warned about as get() would.
  Result<std::optional<cache::TierHit>> peek(const cache::CacheKey& key) override;
  Status put(const cache::CacheKey& key, const cache::TierEntry& entry) override;
  Result<std::optional<cache::TierHit>> create(const cache::CacheKey& key, const cache::TierEntry& entry) override;
  Status remove(const cache::CacheKey& key) override;
  bool writable() const override { return false; }
  Result<std::optional<std::vector<cache::ListedEntry>>> list_entries() override;
  void count_into(cache::CountSink sink) override;

  const std::filesystem::path& dir() const { return m_dir; }
  // The manifest, read on first use; nullptr when the provider was refused.
  const ProviderManifest* manifest();

 private:
  void load();
  void count(const cache::Counters& delta);
  enum class Counting { yes, no };
  Result<std::optional<cache::TierHit>> read(const cache::CacheKey& key, Counting counting);

  std::filesystem::path m_dir;
  std::optional<std::string> m_fleet_key;
  ProviderContentCheck m_check;
  std::mutex m_mutex;
  bool m_loaded = false;
  std::optional<ProviderManifest> m_manifest;
  std::map<cache::CacheKey, std::size_t> m_index;  // key -> item
  std::set<cache::CacheKey> m_refused;             // entries whose bundle failed its checks
  std::mutex m_sink_mutex;
  cache::CountSink m_sink;
};

}  // namespace jitcache
