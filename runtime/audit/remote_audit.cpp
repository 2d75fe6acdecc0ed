#include "runtime/audit/remote_audit.hpp"

#include <algorithm>

#include "runtime/audit/audit.hpp"
#include "runtime/compile/artifact_bundle.hpp"
#include "runtime/compile/kernel_cache.hpp"
#include "runtime/compile/source_cache.hpp"
#include "kernel_templates/variant_dimensions.hpp"

namespace jitcache {
namespace {

// DELs go in pipelines of this many: one round trip each, and no reply too large.
constexpr std::size_t k_delete_batch = 256;

RemoteFindingKind remote_kind(FindingKind kind) {
  switch (kind) {
    case FindingKind::stale_identity: return RemoteFindingKind::stale_identity;
    case FindingKind::legacy_key: return RemoteFindingKind::unknown_schema;
    case FindingKind::fact_mismatch: return RemoteFindingKind::fact_mismatch;
    // A source cache value whose content is not its key's: what a node refuses on load.
    case FindingKind::bad_source_entry: return RemoteFindingKind::rejected;
    case FindingKind::incomplete_spec:       // compares entries: not a finding of one value
    case FindingKind::dangling_spec_record:  // likewise
    case FindingKind::corrupt:
    case FindingKind::missing_blob:
    case FindingKind::orphan_blob: break;
  }
  return RemoteFindingKind::corrupt;
}

std::string fact_or(const cache::Facts& facts, std::string_view name) {
  const auto value = facts.get(name);
  return value && !value->empty() ? std::string(*value) : "?";
}

// The checks of one verified value beyond the signature: the facts schemas this build
// knows, the local audit's rules, and last the content check every node runs on load.
std::optional<RemoteFinding> check_verified(const std::string& name, const cache::CacheKey& key,
                                            const remote::SignedEntry& entry) {
  RemoteFinding f;
  f.name = name;
  f.key = key.to_hex();
  f.kernel = fact_or(entry.facts, k_kernel_kinds.fact);
  f.target = fact_or(entry.facts, k_targets.fact);
  // A bundle of another format does not parse here: that is a newer or older writer, not
  // a corrupt value.
  if (const auto format = entry.facts.get("bundle_format");
      format && *format != std::to_string(k_bundle_format_version)) {
    f.kind = RemoteFindingKind::unknown_schema;
    f.reason = "bundle format";
    f.explanation = "bundle format " + std::string(*format) + " (this build: " +
                    std::to_string(k_bundle_format_version) + "); never served";
    return f;
  }
  // The value's facts hash to its key (the signature check saw to it), so the key schema
  // is this build's.
  if (auto found = audit_artifact(key, cache::k_key_schema_version, entry.facts, entry.bytes)) {
    f.kind = remote_kind(found->kind);
    f.reason = to_string(found->kind);
    if (found->kernel != "?") f.kernel = found->kernel;
    if (found->target != "?") f.target = found->target;
    f.explanation = found->explanation;
    return f;
  }
  if (auto usable = check_stored_content(entry.facts, entry.bytes); !usable) {
    f.kind = RemoteFindingKind::rejected;
    f.reason = remote::to_string(remote::Rejection::bad_content);
    f.explanation = usable.error().message;
    return f;
  }
  return std::nullopt;
}

// DEL of every name, in batches; the names that were there (DEL answered 1).
Result<std::vector<std::string>> delete_names(remote::RemoteTier& tier, const std::vector<std::string>& names) {
  std::vector<std::string> removed;
  for (std::size_t start = 0; start < names.size(); start += k_delete_batch) {
    const std::size_t end = std::min(names.size(), start + k_delete_batch);
    std::vector<remote::Args> commands;
    for (std::size_t i = start; i < end; ++i) commands.push_back({"DEL", names[i]});
    const auto replies = JC_TRY(tier.client().pipeline(commands));
    for (std::size_t i = start; i < end; ++i) {
      const remote::Reply& reply = replies[i - start];
      if (reply.type == remote::Reply::Type::error)
        return make_error(ErrorCode::io, "remote cache " + tier.client().display() + ": deleting " + names[i] + ": " +
                                             reply.str);
      if (reply.integer > 0) removed.push_back(names[i]);
    }
  }
  return removed;
}

}  // namespace

const char* to_string(RemoteFindingKind kind) {
  switch (kind) {
    case RemoteFindingKind::rejected: return "rejected";
    case RemoteFindingKind::stale_identity: return "stale-identity";
    case RemoteFindingKind::unknown_schema: return "unknown-schema";
    case RemoteFindingKind::fact_mismatch: return "fact-mismatch";
    case RemoteFindingKind::corrupt: return "corrupt";
  }
  return "?";
}

std::expected<cache::SharedBytes, std::string> fleet_ready_bytes(cache::Store& store, const cache::EntryInfo& e) {
  auto read = store.read_blob(e.digest, e.size);
  if (!read) return std::unexpected(read.error().to_string());
  if (!*read) return std::unexpected(std::string(cache::to_string(read->error().problem)) + ": " + read->error().detail);
  cache::SharedBytes bytes = **read;
  if (auto finding = audit_artifact(e.key, e.key_schema, e.facts, *bytes))
    return std::unexpected(std::string(to_string(finding->kind)) + ": " + finding->explanation);
  if (auto usable = check_stored_content(e.facts, *bytes); !usable) return std::unexpected(usable.error().message);
  return bytes;
}

Result<RemoteAuditReport> audit_remote(remote::RemoteTier& tier) {
  if (tier.options().fleet_key.empty())
    return make_error(ErrorCode::unavailable, "remote cache " + tier.client().display() +
                                                  ": no fleet key (JITCACHE_REMOTE_KEY_FILE): values cannot be verified");
  RemoteAuditReport report;
  report.remote = tier.client().display();
  report.prefix = tier.options().prefix;
  const std::string entry_prefix = tier.entry_prefix();
  const std::string lease_prefix = tier.lease_prefix();
  const auto names = JC_TRY(tier.list_all_names());
  report.names = names.size();
  for (const std::string& name : names) {
    if (name.starts_with(lease_prefix)) {
      ++report.leases;
      continue;
    }
    const auto key = tier.key_of(name);
    if (!key) {
      RemoteFinding f;
      f.kind = RemoteFindingKind::unknown_schema;
      f.name = name;
      f.reason = "foreign name";
      f.explanation = name.starts_with(entry_prefix)
                          ? "an entry name whose key is not 32 lowercase hex digits; no node asks for it"
                          : "a name this build does not write (another format version's, or not jitcache's)";
      report.findings.push_back(std::move(f));
      continue;
    }
    const auto read = JC_TRY(tier.read(name));
    if (!read) continue;  // removed since the listing
    ++report.entries;
    if (read->rejected) {
      RemoteFinding f;
      f.kind = read->rejected->why == remote::Rejection::unknown_version ? RemoteFindingKind::unknown_schema
                                                                          : RemoteFindingKind::rejected;
      f.name = name;
      f.key = key->to_hex();
      f.reason = remote::to_string(read->rejected->why);
      f.explanation = read->rejected->to_string();
      report.findings.push_back(std::move(f));
      continue;
    }
    if (auto found = check_verified(name, *key, *read->entry)) {
      report.findings.push_back(std::move(*found));
      continue;
    }
    ++report.verified;
  }
  return report;
}

Result<std::vector<RemoteFinding>> clear_remote_flagged(remote::RemoteTier& tier, const RemoteAuditReport& report,
                                                        cache::DryRun dry_run) {
  if (dry_run == cache::DryRun::yes) return report.findings;
  std::vector<std::string> names;
  for (const RemoteFinding& f : report.findings) names.push_back(f.name);
  const auto gone = JC_TRY(delete_names(tier, names));
  std::vector<RemoteFinding> removed;
  for (const RemoteFinding& f : report.findings)  // not those someone else removed first
    if (std::find(gone.begin(), gone.end(), f.name) != gone.end()) removed.push_back(f);
  return removed;
}

Result<std::vector<std::string>> clear_remote_all(remote::RemoteTier& tier, cache::DryRun dry_run) {
  const auto names = JC_TRY(tier.list_all_names());
  if (dry_run == cache::DryRun::yes) return names;
  return delete_names(tier, names);
}

}  // namespace jitcache
