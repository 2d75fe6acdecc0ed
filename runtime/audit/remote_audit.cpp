#include "runtime/audit/remote_audit.hpp"

#include <algorithm>

#include "remote/remote_names.hpp"

#include "runtime/audit/audit.hpp"
#include "runtime/compile/artifact_bundle.hpp"
#include "runtime/compile/kernel_cache.hpp"
#include "runtime/compile/source_cache.hpp"
#include "kernel_templates/variant_dimensions.hpp"
#include "support/enum_names.hpp"

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
    case FindingKind::superseded:            // about the local cache's compiler builds
    case FindingKind::unknown_compiler:
    case FindingKind::wrong_device:          // about a checkpoint's plan, not a value
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

// Why a rejected value may be another fleet's, or nobody's: a value that is well formed
// but does not verify under this fleet's key (or cannot be checked at all) is not
// provably ours; garbage, a truncated value or a list is no fleet's.
bool not_provably_ours(remote::Rejection why) {
  switch (why) {
    case remote::Rejection::bad_signature:
    case remote::Rejection::unknown_version:
    case remote::Rejection::oversized: return true;
    case remote::Rejection::truncated:
    case remote::Rejection::bad_magic:
    case remote::Rejection::bad_facts:
    case remote::Rejection::wrong_key:
    case remote::Rejection::bad_digest:
    case remote::Rejection::bad_content:
    case remote::Rejection::bad_field:  // checked after the signature: signed by this fleet
    case remote::Rejection::wrong_type: break;
  }
  return false;
}

constexpr std::string_view k_foreign_note =
    "not provably this fleet's (another fleet's key or format under the same prefix, or an altered value); "
    "kept unless --foreign";

Status audit_entry(remote::RemoteTier& tier, const std::string& name, const cache::CacheKey& key,
                   RemoteAuditReport& report) {
  const auto read = JC_TRY(tier.read(name));
  if (!read) return {};  // removed since the listing
  ++report.entries;
  if (read->rejected) {
    RemoteFinding f;
    const bool foreign = not_provably_ours(read->rejected->why);
    f.kind = foreign ? RemoteFindingKind::foreign : RemoteFindingKind::rejected;
    f.name = name;
    f.key = key.to_hex();
    f.reason = remote::to_string(read->rejected->why);
    f.explanation = read->rejected->to_string() + (foreign ? "; " + std::string(k_foreign_note) : "");
    report.findings.push_back(std::move(f));
    return {};
  }
  if (auto found = check_verified(name, key, *read->entry)) {
    report.findings.push_back(std::move(*found));
    return {};
  }
  ++report.verified;
  report.verified_names.push_back(name);
  return {};
}

// A lease nodes renew while they compile; one with no expiry was never a node's.
Status audit_lease(remote::RemoteTier& tier, const std::string& name, RemoteAuditReport& report) {
  const remote::Reply ttl = JC_TRY(tier.client().command({"PTTL", name}));
  if (ttl.integer == -2) return {};  // released since the listing
  if (ttl.integer != -1) {
    ++report.leases;
    report.held_names.push_back(name);
    return {};
  }
  RemoteFinding f;
  f.kind = RemoteFindingKind::broken_lease;
  f.name = name;
  f.key = name.substr(name.size() - cache::k_hash_hex_chars);
  f.reason = "no expiry";
  f.explanation = "a compile lease with no expiry: no node holds it (set by hand or by a broken client); "
                  "nodes ignore it and compile";
  report.findings.push_back(std::move(f));
  return {};
}

RemoteFinding name_finding(const std::string& name, remote::NameKind kind) {
  RemoteFinding f;
  f.name = name;
  if (kind == remote::NameKind::other_version) {
    f.kind = RemoteFindingKind::foreign;
    f.reason = "another format version";
    f.explanation = "a name of another jitcache format version, which this build cannot check; " +
                    std::string(k_foreign_note);
  } else {
    f.kind = RemoteFindingKind::unknown_schema;
    f.reason = "foreign name";
    f.explanation = "a name of format v1 that no node writes (an unknown kind, or a key that is not 32 lowercase "
                    "hex digits); no node asks for it";
  }
  return f;
}

}  // namespace

const char* to_string(RemoteFindingKind kind) {
  return enum_name(kind, {"rejected", "foreign", "stale-identity", "unknown-schema", "fact-mismatch",
                          "corrupt", "broken-lease"});
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
  const auto names = JC_TRY(tier.list_all_names());
  for (const std::string& name : names) {
    const remote::ParsedName parsed = tier.parse(name);
    if (parsed.kind == remote::NameKind::not_ours) {
      ++report.other_names;
      continue;
    }
    ++report.names;
    switch (parsed.kind) {
      case remote::NameKind::entry: JC_TRY(audit_entry(tier, name, *parsed.key, report)); break;
      case remote::NameKind::lease: JC_TRY(audit_lease(tier, name, report)); break;
      case remote::NameKind::probe: report.held_names.push_back(name); break;
      case remote::NameKind::malformed:
      case remote::NameKind::other_version: report.findings.push_back(name_finding(name, parsed.kind)); break;
      case remote::NameKind::not_ours: break;
    }
  }
  return report;
}

namespace {

bool removable(const RemoteFinding& f, ForeignValues foreign) {
  return f.kind != RemoteFindingKind::foreign || foreign == ForeignValues::remove;
}

// Removes `names` (dry run: none) and the findings among them; `kept` as given.
Result<RemoteCleared> remove_names(remote::RemoteTier& tier, std::vector<std::string> names,
                                   const RemoteAuditReport& report, cache::DryRun dry_run, ForeignValues foreign) {
  RemoteCleared cleared;
  for (const RemoteFinding& f : report.findings) {
    if (!removable(f, foreign)) cleared.kept.push_back(f);
    else names.push_back(f.name);
  }
  // Not those someone else removed first.
  cleared.removed = dry_run == cache::DryRun::yes ? names : JC_TRY(delete_names(tier, names));
  for (const RemoteFinding& f : report.findings)
    if (removable(f, foreign) && std::find(cleared.removed.begin(), cleared.removed.end(), f.name) != cleared.removed.end())
      cleared.removed_findings.push_back(f);
  return cleared;
}

}  // namespace

Result<RemoteCleared> clear_remote_flagged(remote::RemoteTier& tier, const RemoteAuditReport& report,
                                           cache::DryRun dry_run, ForeignValues foreign) {
  return remove_names(tier, {}, report, dry_run, foreign);
}

Result<RemoteCleared> clear_remote_all(remote::RemoteTier& tier, const RemoteAuditReport& report,
                                       cache::DryRun dry_run, ForeignValues foreign) {
  std::vector<std::string> names = report.verified_names;
  names.insert(names.end(), report.held_names.begin(), report.held_names.end());
  return remove_names(tier, std::move(names), report, dry_run, foreign);
}

}  // namespace jitcache
