#include "runtime/compile/cache_provider.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include <nlohmann/json.hpp>

#include "cache/entry.hpp"
#include "jitcache/log.hpp"
#include "runtime/compile/manifest_fields.hpp"
#include "runtime/compile/toolkit_trust.hpp"
#include "support/atomic_file.hpp"
#include "support/enum_names.hpp"
#include "support/env.hpp"
#include "support/hmac.hpp"
#include "support/regular_file.hpp"
#include "support/sha256.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;

std::string_view as_text(std::span<const std::byte> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

std::string bundle_name(const cache::CacheKey& key) { return key.to_hex() + ".bundle"; }

// One manifest entry, or why it is refused.
Result<ProviderItem> read_item(const nlohmann::json& e, const std::string& where) {
  if (!e.is_object()) return make_error(ErrorCode::invalid_input, where + ": not an object");
  // Refused here without the file's name: the caller lists it under the manifest's.
  const ManifestFields f{e, where + ": ",
                         [](const std::string& why) { return make_error(ErrorCode::invalid_input, why); }};
  ProviderItem item;
  const std::string key_hex = JC_TRY(f.string("key"));
  auto key = cache::CacheKey::from_hex(key_hex);
  if (!key) return make_error(ErrorCode::invalid_input, where + ": key: " + key.error().message);
  item.key = *key;
  item.label = JC_TRY(f.string("label"));
  const auto facts = e.find("facts");
  if (facts == e.end() || !facts->is_object())
    return make_error(ErrorCode::invalid_input, where + ": facts: missing or not an object");
  auto parsed = cache::Facts::from_json(facts->dump());
  if (!parsed) return make_error(ErrorCode::invalid_input, where + ": facts: " + parsed.error().message);
  item.facts = std::move(*parsed);
  if (item.facts.key() != item.key)
    return make_error(ErrorCode::invalid_input, where + ": facts: they hash to key " + item.facts.key().to_hex() +
                                                    ", not to the entry's key " + key_hex);
  auto digest = cache::BlobDigest::from_hex(JC_TRY(f.string("digest")));
  if (!digest) return make_error(ErrorCode::invalid_input, where + ": digest: " + digest.error().message);
  item.digest = *digest;
  item.sha256 = JC_TRY(f.string("sha256"));
  if (!is_sha256_hex(item.sha256))
    return make_error(ErrorCode::invalid_input, where + ": sha256: \"" + item.sha256 + "\" is not 64 hex digits");
  std::transform(item.sha256.begin(), item.sha256.end(), item.sha256.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  const auto size = e.find("size");
  if (size == e.end() || !size->is_number_unsigned())
    return make_error(ErrorCode::invalid_input, where + ": size: missing or not a non-negative integer");
  item.size = size->get<std::uint64_t>();
  if (item.size > k_max_provider_bundle_bytes)
    return make_error(ErrorCode::invalid_input, where + ": size: " + std::to_string(item.size) +
                                                    " bytes exceed the limit of " +
                                                    std::to_string(k_max_provider_bundle_bytes));
  const auto compile_ms = e.find("compile_ms");
  if (compile_ms == e.end() || !compile_ms->is_number())
    return make_error(ErrorCode::invalid_input, where + ": compile_ms: missing or not a number");
  item.compile_ms = compile_ms->get<double>();
  if (auto ok = cache::check_incoming_fields({item.size, item.compile_ms, {}}); !ok)
    return make_error(ErrorCode::invalid_input, where + ": " + ok.error().message);
  return item;
}

}  // namespace

const char* to_string(ProviderSignature signature) {
  return enum_name(signature, {"verified", "unsigned", "unchecked"});
}

std::string encode_provider_manifest(const ProviderInfo& info, std::span<const ExportEntry> entries) {
  nlohmann::ordered_json builds = nlohmann::ordered_json::object();
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (const ExportEntry& e : entries) {
    if (const auto fp = e.facts.get("compiler_fingerprint")) {
      auto& count = builds[std::string(*fp)];
      count = count.is_null() ? 1 : count.get<int>() + 1;
    }
    list.push_back(manifest_entry_json(e, WithSha256::yes));
  }
  const nlohmann::ordered_json manifest = {{"format", k_provider_format},
                                           {"version", k_provider_version},
                                           {"producer", info.producer},
                                           {"created", info.created},
                                           {"name", info.name},
                                           {"checkpoint", info.checkpoint},
                                           {"record_format", info.record_format},
                                           {"targets", info.targets},
                                           {"compiler_builds", builds},
                                           {"entries", list}};
  return manifest.dump(1) + "\n";
}

std::string sign_provider_manifest(std::string_view manifest, std::string_view fleet_key) {
  return to_hex(hmac_sha256(fleet_key, {k_provider_mac_domain, manifest})) + "\n";
}

Result<std::uint64_t> write_provider(const fs::path& dir, const ProviderInfo& info,
                                     std::span<const ExportEntry> entries,
                                     const std::optional<std::string>& fleet_key) {
  std::error_code ec;
  if (fs::exists(fs::symlink_status(dir, ec))) {
    if (!fs::is_directory(fs::symlink_status(dir, ec)) || !fs::is_empty(dir, ec))
      return make_error(ErrorCode::invalid_argument,
                        dir.string() + ": exists and is not an empty directory; a provider is written into a new one");
  }
  fs::create_directories(dir / k_provider_bundles_dir, ec);
  if (ec) return make_error(ErrorCode::io, "creating " + (dir / k_provider_bundles_dir).string() + ": " + ec.message());
  std::uint64_t written = 0;
  std::set<cache::CacheKey> seen;
  for (const ExportEntry& e : entries) {
    if (e.facts.key() != e.key)
      return make_error(ErrorCode::invalid_argument, "provider entry " + e.label + ": its facts do not hash to its key");
    if (!seen.insert(e.key).second) continue;
    const fs::path path = dir / k_provider_bundles_dir / bundle_name(e.key);
    JC_TRY(write_text_atomic(path, as_text(*e.bytes)));
    written += e.bytes->size();
  }
  const std::string manifest = encode_provider_manifest(info, entries);
  JC_TRY(write_text_atomic(dir / k_provider_manifest_name, manifest));
  written += manifest.size();
  if (fleet_key) {
    const std::string mac = sign_provider_manifest(manifest, *fleet_key);
    JC_TRY(write_text_atomic(dir / k_provider_signature_name, mac));
    written += mac.size();
  }
  return written;
}

Result<ProviderManifest> read_provider_manifest(const fs::path& dir, const std::optional<std::string>& fleet_key) {
  ProviderManifest out;
  out.dir = dir;
  const auto refuse = [&](const std::string& why) {
    return make_error(ErrorCode::invalid_input, (dir / k_provider_manifest_name).string() + ": " + why);
  };
  // Anything another user could replace here is code they could make this process load.
  for (const fs::path& part : {dir, dir / k_provider_bundles_dir}) {
    if (auto why = replaceable_by_another_user(part))
      return make_error(ErrorCode::unsafe, "cache provider " + dir.string() + ": " + *why);
  }
  const std::string manifest_path = (dir / k_provider_manifest_name).string();
  auto text = read_regular_file(dir / k_provider_manifest_name, k_max_provider_manifest_bytes, manifest_path,
                                FollowSymlinks::no);
  if (!text) return std::unexpected(std::move(text.error()));
  if (auto why = replaceable_by_another_user(dir / k_provider_manifest_name))
    return make_error(ErrorCode::unsafe, "cache provider " + dir.string() + ": " + *why);

  // The signature, before a byte of the manifest is believed.
  const fs::path sig_path = dir / k_provider_signature_name;
  std::error_code ec;
  const bool signed_file = fs::exists(fs::symlink_status(sig_path, ec));
  if (signed_file) {
    auto sig = read_regular_file(sig_path, 256, sig_path.string(), FollowSymlinks::no);
    if (!sig) return std::unexpected(std::move(sig.error()));
    std::string hex = *sig;
    while (!hex.empty() && (hex.back() == '\n' || hex.back() == '\r' || hex.back() == ' ')) hex.pop_back();
    if (!is_sha256_hex(hex))
      return make_error(ErrorCode::invalid_input, sig_path.string() + ": not 64 hex digits");
    if (fleet_key) {
      if (sign_provider_manifest(*text, *fleet_key) != hex + "\n")
        return make_error(ErrorCode::invalid_input,
                          sig_path.string() + ": bad signature: the manifest was not signed with this node's fleet key "
                                              "(or was altered after signing)");
      out.signature = ProviderSignature::verified;
    } else {
      out.signature = ProviderSignature::unchecked;
    }
  } else if (fleet_key) {
    return make_error(ErrorCode::invalid_input,
                      "cache provider " + dir.string() + ": unsigned, and a fleet key is configured (" +
                          std::string(env::jitcache_remote_key_file.name) + "): only signed providers are used");
  }

  const nlohmann::json manifest = nlohmann::json::parse(*text, nullptr, false);
  if (manifest.is_discarded() || !manifest.is_object()) return refuse("not a JSON object");
  const ManifestFields f{manifest, "", refuse};
  const std::string format = JC_TRY(f.string("format"));
  if (format != k_provider_format)
    return refuse("format: \"" + format + "\" is not \"" + std::string(k_provider_format) + "\"");
  const auto version = manifest.find("version");
  if (version == manifest.end() || !version->is_number_integer())
    return refuse("version: missing or not an integer");
  if (version->get<std::int64_t>() != k_provider_version)
    return refuse("version " + std::to_string(version->get<std::int64_t>()) + ": this jitcache reads version " +
                  std::to_string(k_provider_version) + " (the provider was packed by another jitcache)");
  out.info.producer = JC_TRY(f.string("producer"));
  out.info.created = JC_TRY(f.string("created"));
  out.info.name = JC_TRY(f.string("name"));
  out.info.checkpoint = JC_TRY(f.string("checkpoint"));
  out.info.record_format = JC_TRY(f.string("record_format"));
  out.info.targets = JC_TRY(f.strings("targets"));
  const nlohmann::json* entries = JC_TRY(f.array("entries", k_max_provider_entries));
  std::set<cache::CacheKey> seen;
  for (std::size_t i = 0; i < entries->size(); ++i) {
    auto item = read_item((*entries)[i], "entry " + std::to_string(i));
    if (!item) {
      out.refused_entries.push_back(item.error().message);
      continue;
    }
    if (!seen.insert(item->key).second) {
      out.refused_entries.push_back("entry " + std::to_string(i) + ": key " + item->key.to_hex() + " listed twice");
      continue;
    }
    if (const auto fp = item->facts.get("compiler_fingerprint")) ++out.compiler_builds[std::string(*fp)];
    out.items.push_back(std::move(*item));
  }
  return out;
}

Result<cache::SharedBytes> read_provider_bundle(const ProviderManifest& manifest, const ProviderItem& item,
                                                const ProviderContentCheck& check) {
  const fs::path path = manifest.dir / k_provider_bundles_dir / bundle_name(item.key);
  const std::string shown = path.string();
  auto file = RegularFile::open(path, FollowSymlinks::no, shown);
  if (!file) return std::unexpected(std::move(file.error()));
  if (file->size() != item.size)
    return make_error(ErrorCode::invalid_input, shown + ": " + std::to_string(file->size()) +
                                                    " bytes, the manifest says " + std::to_string(item.size));
  auto bytes = file->read_all_bytes(static_cast<std::size_t>(item.size));
  if (!bytes) return std::unexpected(std::move(bytes.error()));
  if (bytes->size() != item.size)
    return make_error(ErrorCode::invalid_input, shown + ": " + std::to_string(bytes->size()) +
                                                    " bytes read, the manifest says " + std::to_string(item.size));
  const std::string_view view(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  if (cache::BlobDigest::of(view) != item.digest)
    return make_error(ErrorCode::invalid_input, shown + ": its XXH3-128 is " + cache::BlobDigest::of(view).to_hex() +
                                                    ", the manifest says " + item.digest.to_hex());
  if (sha256_hex(view) != item.sha256)
    return make_error(ErrorCode::invalid_input, shown + ": its SHA-256 differs from the manifest's");
  auto shared = std::make_shared<cache::Bytes>(reinterpret_cast<const std::byte*>(bytes->data()),
                                               reinterpret_cast<const std::byte*>(bytes->data()) + bytes->size());
  if (check) {
    if (auto ok = check(item.facts, *shared); !ok)
      return make_error(ErrorCode::invalid_input, shown + ": " + ok.error().message);
  }
  return cache::SharedBytes(std::move(shared));
}

std::vector<fs::path> split_provider_list(std::string_view list) {
  std::vector<fs::path> dirs;
  while (!list.empty()) {
    const auto colon = list.find(':');
    if (colon != 0) dirs.emplace_back(std::string(list.substr(0, colon)));
    if (colon == std::string_view::npos) break;
    list.remove_prefix(colon + 1);
  }
  return dirs;
}

std::vector<fs::path> provider_dirs(std::span<const fs::path> extra) {
  std::vector<fs::path> dirs;
  auto add = [&](const fs::path& dir) {
    if (dir.empty()) return;
    fs::path normal = dir.lexically_normal();
    if (!normal.has_filename() && normal != normal.root_path()) normal = normal.parent_path();  // "/b/" is "/b"
    if (std::find(dirs.begin(), dirs.end(), normal) == dirs.end()) dirs.push_back(normal);
  };
  if (const auto listed = env::get(env::jitcache_providers))
    for (const fs::path& dir : split_provider_list(*listed)) add(dir);
  for (const fs::path& dir : extra) add(dir);
  return dirs;
}

// ---- the tier ------------------------------------------------------------------------------

ProviderTier::ProviderTier(fs::path dir, std::optional<std::string> fleet_key, ProviderContentCheck check)
    : m_dir(std::move(dir)), m_fleet_key(std::move(fleet_key)), m_check(std::move(check)) {}

std::string ProviderTier::name() const { return "provider " + m_dir.string(); }

void ProviderTier::count_into(cache::CountSink sink) {
  std::lock_guard lock(m_sink_mutex);
  m_sink = std::move(sink);
}

void ProviderTier::count(const cache::Counters& delta) {
  std::lock_guard lock(m_sink_mutex);
  if (m_sink) m_sink(delta);
}

void ProviderTier::load() {
  if (m_loaded) return;
  m_loaded = true;
  auto manifest = read_provider_manifest(m_dir, m_fleet_key);
  if (!manifest) {
    log_warning("cache provider " + m_dir.string() + " not used: " + manifest.error().to_string());
    cache::Counters delta;
    delta.provider_rejects = 1;
    count(delta);
    return;
  }
  for (const std::string& why : manifest->refused_entries)
    log_warning("cache provider " + m_dir.string() + ": skipping " + why);
  if (manifest->signature == ProviderSignature::unchecked)
    log_info("cache provider " + m_dir.string() + " is signed, but no fleet key is configured here (" +
             std::string(env::jitcache_remote_key_file.name) + "): its signature is not checked");
  else if (manifest->signature == ProviderSignature::absent)
    log_debug("cache provider " + m_dir.string() +
              " is unsigned: its entries are checked for integrity (digests, facts, ELF), not for who made them");
  for (std::size_t i = 0; i < manifest->items.size(); ++i) m_index.emplace(manifest->items[i].key, i);
  log_debug("cache provider " + m_dir.string() + " (" + manifest->info.name + "): " +
            std::to_string(manifest->items.size()) + " entries");
  m_manifest = std::move(*manifest);
}

const ProviderManifest* ProviderTier::manifest() {
  std::lock_guard lock(m_mutex);
  load();
  return m_manifest ? &*m_manifest : nullptr;
}

Result<std::optional<cache::TierHit>> ProviderTier::get(const cache::CacheKey& key) {
  return read(key, Counting::yes);
}

Result<std::optional<cache::TierHit>> ProviderTier::peek(const cache::CacheKey& key) {
  return read(key, Counting::no);
}

Result<std::optional<cache::TierHit>> ProviderTier::read(const cache::CacheKey& key, Counting counting) {
  const ProviderItem* item = nullptr;
  {
    std::lock_guard lock(m_mutex);
    load();
    if (!m_manifest || m_refused.contains(key)) return std::optional<cache::TierHit>();
    const auto it = m_index.find(key);
    if (it == m_index.end()) return std::optional<cache::TierHit>();
    item = &m_manifest->items[it->second];
  }
  // The manifest is never changed once loaded: the item outlives the lock.
  auto bytes = read_provider_bundle(*m_manifest, *item, m_check);
  if (!bytes) {
    log_warning("cache provider " + m_dir.string() + ": skipping entry " + item->label + " (key " + key.to_hex() +
                "): " + bytes.error().to_string());
    {
      std::lock_guard lock(m_mutex);
      m_refused.insert(key);
    }
    cache::Counters delta;
    delta.provider_rejects = 1;
    if (counting == Counting::yes) count(delta);
    return std::optional<cache::TierHit>();
  }
  cache::Counters delta;
  delta.provider_hits = 1;
  if (counting == Counting::yes) count(delta);
  cache::TierHit hit;
  hit.bytes = std::move(*bytes);
  hit.compile_ms = item->compile_ms;
  hit.facts = item->facts;
  return std::optional<cache::TierHit>(std::move(hit));
}

Status ProviderTier::put(const cache::CacheKey& key, const cache::TierEntry&) {
  return make_error(ErrorCode::invalid_argument, name() + " is read-only: not storing " + key.to_hex());
}

Result<std::optional<cache::TierHit>> ProviderTier::create(const cache::CacheKey& key, const cache::TierEntry&) {
  return make_error(ErrorCode::invalid_argument, name() + " is read-only: not storing " + key.to_hex());
}

Status ProviderTier::remove(const cache::CacheKey& key) {
  return make_error(ErrorCode::invalid_argument, name() + " is read-only: not removing " + key.to_hex());
}

Result<std::optional<std::vector<cache::ListedEntry>>> ProviderTier::list_entries() {
  std::lock_guard lock(m_mutex);
  load();
  std::vector<cache::ListedEntry> listed;
  if (m_manifest)
    for (const ProviderItem& item : m_manifest->items) listed.push_back(cache::ListedEntry{item.key, item.facts});
  return std::optional<std::vector<cache::ListedEntry>>(std::move(listed));
}

}  // namespace jitcache
