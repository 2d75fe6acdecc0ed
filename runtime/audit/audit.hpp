// The cache audit: finds, in any existing cache (written by an older key schema,
// imported, or tampered with), every entry that must not be served:
//
//   stale-identity  an artifact built for identity (by its embedded facts; without them,
//                   by the PTX evidence that the restore multiply is absent) whose index
//                   entry says dynamic or does not say (legacy schema) — the field failure
//   legacy-key      an entry written under an older key schema (facts missing)
//   fact-mismatch   the index's facts differ from the artifact's embedded facts
//   corrupt         a blob whose digest or size is wrong, or that is not a kernel artifact
//   missing-blob    an index row whose blob file is gone
//   orphan-blob     a blob file no index row refers to, older than the publish grace
//                   (15 min, as gc): younger ones may be a publish in flight
//
// Source cache entries (kernels from outside, runtime/compile/source_cache.hpp: facts with
// a `record` fact) are held to their own rules, never to the latent-scale ones above:
//
//   bad-source-entry      a source bundle that does not parse, whose facts or entry are not
//                         its key's, or whose cubin does not hold its entry; a spec record
//                         that is not well formed, or that disagrees with the bundle it names
//                         (another spec, another source_xxh3 or headers)
//   incomplete-spec       two or more source bundles of one spec key (family, spec facts,
//                         target, tools): the family's spec does not determine its source
//   dangling-spec-record  (warning) a spec record whose bundle is gone: eviction removes a
//                         bundle apart from its record, and the record still guards the spec
//
// Every entry, of either kind, is also held to the compilers it was keyed with: a compiler
// is what its bytes are (runtime/compile/toolkit_trust.hpp), and a key's fingerprint that
// no compiler file this cache has digested (nor an import, nor this process's compiler)
// vouches for was made by an earlier jitcache's derivation or by a library no longer
// trusted. No lookup keyed by a compiler's bytes reaches such an entry:
//
//   superseded        such an entry, when the same kernel keyed with a known build is in
//                     the cache too (superseded_by names it): an entry an earlier jitcache
//                     carried over, or compiled again after an upgrade
//   unknown-compiler  such an entry with no such twin
//
// gc removes both kinds first (remove_unservable).
//
// Every kind is an error except dangling-spec-record, a warning: reported, but the cache is
// still clean and clear_flagged() keeps it.
//
// With a checkpoint and a device's compute capability (AuditOptions::device), the plan is
// also held to NVIDIA's rule of which cubins run where (kernel_spec.hpp: cubin_runs_on):
//
//   wrong-device  a variant the checkpoint needs for the target, whose cubin cannot run on
//                 that device (an sm_120a cubin bound to a 12.1 device); one per variant,
//                 cached or not. The entry itself is sound: clear_flagged() keeps it
//
// With a checkpoint it also reports, per layer, which variant the layer needs, whether a
// valid entry exists for it, and whether anything a calibrated layer would be bound to is
// an identity kernel. The audit changes nothing; clear_flagged() removes what it flagged.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cache/store.hpp"
#include "jitcache/error.hpp"
#include "jitcache/scales.hpp"
#include "kernel_templates/variant_plan.hpp"
#include "runtime/compile/compiler.hpp"

namespace jitcache {

enum class FindingKind {
  stale_identity,
  legacy_key,
  fact_mismatch,
  corrupt,
  missing_blob,
  orphan_blob,
  bad_source_entry,
  incomplete_spec,
  dangling_spec_record,
  superseded,
  unknown_compiler,
  wrong_device,
};
const char* to_string(FindingKind kind);  // "stale-identity", "legacy-key", ...

enum class Severity { error, warning };
const char* to_string(Severity severity);  // "error", "warning"
Severity severity_of(FindingKind kind);

// A source bundle an incomplete-spec finding names.
struct SourceEntryRef {
  std::string key;
  std::string source_xxh3;
};

struct Finding {
  FindingKind kind = FindingKind::corrupt;
  std::string key;     // the entry's key (empty for an orphan blob; the spec key for incomplete-spec)
  std::string digest;  // the blob's digest (empty for incomplete-spec, which is about several)
  std::string kernel;  // from the entry's or the artifact's facts (a source entry's: its family); "?" when unknown
  std::string target;
  std::string explanation;  // one line
  // incomplete-spec only: the spec facts (spec.<name> -> value) and the bundles built for them.
  std::map<std::string, std::string> spec;
  std::vector<SourceEntryRef> entries;
  // superseded only: the key of the entry of the same kernel from a known compiler build.
  std::string superseded_by;
  Severity severity() const { return severity_of(kind); }
};

// Per layer, with a checkpoint.
struct LayerAudit {
  int layer = 0;
  float scale = 1.0f;
  ScaleMode mode = ScaleMode::identity;
  ScaleSource source = ScaleSource::identity_default;
  std::string writer_key;  // the keys this build would look up for the layer's variants
  std::string gather_key;
  bool writer_cached = false;  // a valid (unflagged) entry exists under that key
  bool gather_cached = false;
  bool bound_to_identity = false;  // a calibrated layer's key holds an identity kernel
};

struct VariantAudit {
  std::string label;  // e.g. "writer/dynamic/b12x-432/sm_100a"
  std::string key;
  bool cached = false;
  std::size_t layers = 0;  // how many layers need it
};

struct CheckpointAudit {
  std::string checkpoint;
  std::string target;
  std::string device;  // the device's compute capability, "12.1"; empty when none was given
  std::string format;  // the record format's name
  LatentPolicy latent_policy = LatentPolicy::per_layer;
  ScaleProvenance provenance;
  std::vector<VariantAudit> variants;
  std::vector<LayerAudit> layers;
  std::size_t dynamic_layers = 0;
  std::size_t identity_layers = 0;
};

struct AuditReport {
  std::size_t entries = 0;
  std::size_t blobs_checked = 0;
  std::vector<Finding> findings;
  std::optional<CheckpointAudit> checkpoint;
  std::size_t count(Severity severity) const {
    std::size_t n = 0;
    for (const Finding& f : findings) n += f.severity() == severity ? 1 : 0;
    return n;
  }
  // Warnings alone leave a cache clean.
  bool clean() const {
    if (count(Severity::error) > 0) return false;
    if (!checkpoint) return true;
    for (const auto& l : checkpoint->layers)
      if (l.bound_to_identity) return false;
    return true;
  }
};

struct AuditOptions {
  // With a checkpoint: the per-layer binding report for this target, record format and
  // latent-scale policy (per layer from the scales, or per-token).
  std::optional<std::filesystem::path> checkpoint;
  std::optional<std::filesystem::path> scales_override;
  std::string target;
  RecordFormat format = RecordFormat::b12x_432;
  LatentPolicy policy = LatentPolicy::per_layer;
  // With a checkpoint: the compute capability (major, minor) of the device the plan is for;
  // each needed variant whose target's cubin cannot run there is a wrong-device finding.
  std::optional<std::pair<int, int>> device;
  // A blob no row refers to is an orphan-blob finding only once it is this old: a younger
  // one may be a concurrent publish between its rename and its row commit.
  std::chrono::milliseconds orphan_grace = cache::k_publish_grace;
  // Whether a source bundle's cubin must be an ELF image holding its entry, as SourceCache
  // checks on read. Off only for tests whose compile step is a fake.
  bool check_cubin = true;
};

Result<AuditReport> audit_cache(cache::Store& store, const Compiler& compiler, const AuditOptions& options = {});

// The rules above for one artifact and the facts and key it is stored under, wherever it
// comes from (a local blob, a remote value): the finding, or std::nullopt when it may be
// served. The finding's digest is left for the caller. A source cache entry gets the
// rules of one entry (legacy-key, fact-mismatch, bad-source-entry); those that compare
// entries (incomplete-spec, a spec record against its bundle) need the whole cache.
std::optional<Finding> audit_artifact(const cache::CacheKey& key, std::uint32_t key_schema, const cache::Facts& facts,
                                      std::span<const std::byte> bytes, bool check_cubin = true);

// Removes exactly the entries and blobs `report` flagged as errors (or, dry run, says what
// it would remove); warnings are kept, and so are wrong-device entries (sound, only planned
// for the wrong device). For incomplete-spec: the spec record and every
// bundle of the spec, so that the next compile records the spec afresh. Returns one line
// per removal.
Result<std::vector<std::string>> clear_flagged(cache::Store& store, const AuditReport& report,
                                               cache::DryRun dry_run);

// Removes (or, dry run, names) the entries the audit finds superseded or keyed with an
// unknown compiler: they can never be served. One line per removal.
Result<std::vector<std::string>> remove_unservable(cache::Store& store, const Compiler& compiler,
                                                   cache::DryRun dry_run);

}  // namespace jitcache
