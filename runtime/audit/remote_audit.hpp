// The audit of a shared remote tier (`jitcache audit --remote`, `clear --remote`): every
// value under jitcache's prefix is read and checked the way a node checks what it loads,
// then held to the local audit's rules (runtime/audit/audit.hpp). Findings:
//
//   rejected        a node would refuse it: not a signed jitcache value, truncated,
//                   oversized, a bad signature (altered, moved, or signed with another
//                   fleet key), facts of another key, a digest mismatch, or content that
//                   is not the kernel its facts name (check_bundle_facts)
//   stale-identity  an identity kernel stored under a key that says dynamic (or does not
//                   say): the field failure, carried to a whole fleet
//   unknown-schema  a value format, key schema, facts schema or bundle format this build
//                   does not know; or a name under the prefix it does not write
//   fact-mismatch   the artifact's embedded facts differ from the value's facts
//   corrupt         verified bytes that are not a kernel artifact
//
// Leases are counted, never flagged. The audit changes nothing; clear_remote_flagged()
// removes exactly what it flagged, clear_remote_all() everything under the prefix.
#pragma once

#include <cstddef>
#include <expected>
#include <optional>
#include <string>
#include <vector>

#include "cache/store.hpp"
#include "jitcache/error.hpp"
#include "remote/remote_tier.hpp"

namespace jitcache {

enum class RemoteFindingKind { rejected, stale_identity, unknown_schema, fact_mismatch, corrupt };
const char* to_string(RemoteFindingKind kind);  // "rejected", "stale-identity", ...

struct RemoteFinding {
  RemoteFindingKind kind = RemoteFindingKind::rejected;
  std::string name;    // the Redis key
  std::string key;     // the cache key; empty for a name that is not an entry's
  std::string reason;  // the rejection ("bad signature", ...) or the local audit's kind
  std::string kernel = "?";
  std::string target = "?";
  std::string explanation;  // one line
};

struct RemoteAuditReport {
  std::string remote;  // the server, without its password
  std::string prefix;
  std::size_t names = 0;     // Redis keys under the prefix
  std::size_t entries = 0;   // of them, entry values read
  std::size_t leases = 0;    // compile leases held now
  std::size_t verified = 0;  // entries a node would load, with no finding
  std::vector<RemoteFinding> findings;
  bool clean() const { return findings.empty(); }
};

// Reads every name under the tier's prefix. Needs the fleet key (a value cannot be
// verified without it); the tier should have no content check of its own (a stale
// identity kernel would be refused as bad content before the audit could name it). An
// error only when the remote cannot be listed or read.
// The bytes of a local entry that may go to the fleet (`jitcache remote push`), read and
// verified; or why it may not: its blob is missing or altered, the local audit flags it
// (legacy key, stale identity kernel, fact mismatch), or it fails the check every node
// runs on a remote value before loading it.
std::expected<cache::SharedBytes, std::string> fleet_ready_bytes(cache::Store& store, const cache::EntryInfo& entry);

Result<RemoteAuditReport> audit_remote(remote::RemoteTier& tier);

// Removes exactly the names `report` flagged; returns the findings whose names it removed
// (dry run: every finding, removing nothing).
Result<std::vector<RemoteFinding>> clear_remote_flagged(remote::RemoteTier& tier, const RemoteAuditReport& report,
                                                        cache::DryRun dry_run);

// Removes every name under the prefix: entries, leases and names this build does not
// know; returns the names removed (dry run: the names there, removing nothing).
Result<std::vector<std::string>> clear_remote_all(remote::RemoteTier& tier, cache::DryRun dry_run);

}  // namespace jitcache
