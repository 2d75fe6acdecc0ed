// The audit of a shared remote tier (`jitcache audit --remote`, `clear --remote`): every
// name of jitcache's grammar under the prefix (remote/remote_names.hpp: never another
// prefix's, even a longer one like "jitcache:b:") is read and checked the way a node
// checks what it loads, then held to the local audit's rules (runtime/audit/audit.hpp).
// Findings:
//
//   rejected        a node would refuse it, and no fleet could have written it: not a
//                   jitcache value, truncated, not a Redis string, or verified under this
//                   fleet's key but with facts of another key, a digest mismatch, or
//                   content that is not the kernel its facts name (check_bundle_facts)
//   foreign         a value this fleet cannot prove is its own: signed with another key
//                   (another fleet sharing the prefix, or an altered value), of another
//                   format version, or larger than this node reads; also a name of
//                   another format version. Reported, and kept unless asked (--foreign)
//   stale-identity  an identity kernel stored under a key that says dynamic (or does not
//                   say): the field failure, carried to a whole fleet
//   unknown-schema  a bundle format this build does not know in a verified value; or a
//                   v1 name this build does not write
//   fact-mismatch   the artifact's embedded facts differ from the value's facts
//   corrupt         verified bytes that are not a kernel artifact
//   broken-lease    a compile lease with no expiry: no node holds it (nodes ignore it)
//
// Live leases are counted, never flagged. The audit changes nothing; clear_remote_flagged()
// removes what it flagged, clear_remote_all() every name of the prefix's grammar; both
// keep foreign values and names unless told otherwise, and never touch other names.
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

enum class RemoteFindingKind {
  rejected,
  foreign,
  stale_identity,
  unknown_schema,
  fact_mismatch,
  corrupt,
  broken_lease,
};
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
  std::size_t names = 0;        // Redis keys of the prefix's grammar
  std::size_t other_names = 0;  // keys that start with the prefix but are not its (never touched)
  std::size_t entries = 0;      // entry values read
  std::size_t leases = 0;       // compile leases held now
  std::size_t verified = 0;     // entries a node would load, with no finding
  std::vector<RemoteFinding> findings;
  std::vector<std::string> verified_names;  // for clear --all
  std::vector<std::string> held_names;      // live leases and status probes, for clear --all
  bool clean() const { return findings.empty(); }
};

// Whether a cleanup removes values and names it cannot prove are this fleet's.
enum class ForeignValues { keep, remove };

// The bytes of a local entry that may go to the fleet (`jitcache remote push`), read and
// verified; or why it may not: its blob is missing or altered, the local audit flags it
// (legacy key, stale identity kernel, fact mismatch), or it fails the check every node
// runs on a remote value before loading it.
std::expected<cache::SharedBytes, std::string> fleet_ready_bytes(cache::Store& store, const cache::EntryInfo& entry);

// Reads every name of the tier's prefix. Needs the fleet key (a value cannot be verified
// without it); the tier should have no content check of its own (a stale identity kernel
// would be refused as bad content before the audit could name it). An error only when
// the remote cannot be listed or read.
Result<RemoteAuditReport> audit_remote(remote::RemoteTier& tier);

// What a cleanup removed (dry run: would remove), and the foreign findings it kept.
struct RemoteCleared {
  std::vector<std::string> removed;            // names
  std::vector<RemoteFinding> removed_findings;  // the flagged ones among them
  std::vector<RemoteFinding> kept;              // foreign, kept (ForeignValues::keep)
};

// Removes the names `report` flagged, foreign ones only with ForeignValues::remove (dry
// run: what it would remove, removing nothing).
Result<RemoteCleared> clear_remote_flagged(remote::RemoteTier& tier, const RemoteAuditReport& report,
                                           cache::DryRun dry_run, ForeignValues foreign = ForeignValues::keep);

// Removes every name of the prefix's grammar that `report` saw: verified entries, leases,
// probes and flagged names, foreign ones only with ForeignValues::remove. Names of other
// prefixes and of other software are never removed.
Result<RemoteCleared> clear_remote_all(remote::RemoteTier& tier, const RemoteAuditReport& report,
                                       cache::DryRun dry_run, ForeignValues foreign = ForeignValues::keep);

}  // namespace jitcache
