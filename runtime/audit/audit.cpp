#include "runtime/audit/audit.hpp"

#include <cstring>
#include <map>
#include <set>

#include "kernel_templates/variant_dimensions.hpp"
#include "kernel_templates/variant_plan.hpp"
#include "runtime/compile/artifact_bundle.hpp"
#include "runtime/compile/artifact_facts.hpp"
#include "runtime/compile/cubin_elf.hpp"
#include "runtime/compile/fingerprint_memo.hpp"
#include "runtime/compile/kernel_cache.hpp"
#include "runtime/compile/kernel_request.hpp"
#include "runtime/compile/ptx_analysis.hpp"
#include "runtime/compile/source_cache.hpp"
#include "support/enum_names.hpp"

namespace jitcache {
namespace {

// What an entry's blob says about itself.
struct ArtifactView {
  std::optional<FactMap> embedded;  // jc_artifact_facts, from the cubin or the PTX
  std::string ptx;                  // when the blob holds PTX
  std::string form;                 // "bundle", "cubin", "ptx"
};

enum class BuiltFor { identity, dynamic, per_token, unknown };

bool starts_with(std::span<const std::byte> bytes, std::string_view prefix) {
  return bytes.size() >= prefix.size() && std::memcmp(bytes.data(), prefix.data(), prefix.size()) == 0;
}

// Accepts the current bundle, and the raw cubin or PTX blobs older writers stored.
std::optional<ArtifactView> view_artifact(std::span<const std::byte> bytes) {
  ArtifactView view;
  if (auto bundle = parse_bundle(bytes)) {
    view.form = "bundle";
    view.ptx = bundle->ptx;
    if (auto facts = facts_from_cubin(bundle->cubin)) view.embedded = *facts;
    else if (auto from_ptx = facts_from_ptx(bundle->ptx)) view.embedded = *from_ptx;
    return view;
  }
  if (starts_with(bytes, "\x7f" "ELF")) {
    view.form = "cubin";
    const std::span<const std::uint8_t> image(reinterpret_cast<const std::uint8_t*>(bytes.data()), bytes.size());
    if (auto facts = facts_from_cubin(image)) view.embedded = *facts;
    return view;
  }
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (text.find(".entry ") != std::string_view::npos && text.find(".version") != std::string_view::npos) {
    view.form = "ptx";
    view.ptx = std::string(text);
    if (auto facts = facts_from_ptx(text)) view.embedded = *facts;
    return view;
  }
  return std::nullopt;
}

// From the embedded facts; else from the PTX: a kernel that never computes with its
// latent-scale parameter was built for identity.
std::pair<BuiltFor, std::string> built_for(const ArtifactView& view) {
  if (view.embedded) {
    auto it = view.embedded->find(std::string(k_latent_scales.fact));
    // A value no table has says nothing: the PTX may still tell.
    if (const auto mode = it == view.embedded->end() ? std::nullopt : parse_latent_scale(it->second)) {
      switch (*mode) {
        case LatentScale::identity: return {BuiltFor::identity, "its embedded facts"};
        case LatentScale::dynamic: return {BuiltFor::dynamic, "its embedded facts"};
        case LatentScale::per_token: return {BuiltFor::per_token, "its embedded facts"};
      }
    }
  }
  if (!view.ptx.empty()) {
    for (const KernelKindRow& kind : k_kernel_kinds.rows) {
      auto use = analyze_param_use(view.ptx, kind.entry, 1);
      if (!use) continue;
      if (use->arithmetic.empty()) return {BuiltFor::identity, "its PTX: no arithmetic on the latent scale"};
      return {BuiltFor::dynamic, "its PTX: the latent scale is applied"};
    }
  }
  return {BuiltFor::unknown, ""};
}

std::string fact_or(const cache::Facts& facts, std::string_view name, std::string fallback) {
  auto v = facts.get(name);
  return v ? std::string(*v) : fallback;
}

bool is_legacy(std::uint32_t key_schema, const cache::Facts& facts, std::string& why) {
  if (key_schema != cache::k_key_schema_version) {
    why = "written under key schema " + std::to_string(key_schema) + " (this build: " +
          std::to_string(cache::k_key_schema_version) + ")";
    return true;
  }
  const auto schema = facts.get("facts_schema");
  if (!schema) {
    why = "its facts have no facts_schema (written before kernel facts were versioned)";
    return true;
  }
  if (*schema != std::to_string(k_kernel_facts_schema)) {
    why = "kernel facts schema " + std::string(*schema) + " (this build: " + std::to_string(k_kernel_facts_schema) + ")";
    return true;
  }
  if (!facts.get(k_latent_scales.fact)) {
    why = "its facts do not record latent_scale";
    return true;
  }
  return false;
}

// Checks one entry; its bytes when it has no finding (the cross-entry checks of source
// cache entries read spec records from them).
std::optional<cache::SharedBytes> audit_entry(cache::Store& store, const cache::EntryInfo& e, bool check_cubin,
                                              AuditReport& report) {
  auto add = [&](FindingKind kind, std::string explanation) {
    Finding f;
    f.kind = kind;
    f.key = e.key.to_hex();
    f.digest = e.digest.to_hex();
    const bool source = is_request_facts(e.facts);
    f.kernel = fact_or(e.facts, source ? "family" : k_kernel_kinds.fact, "?");
    f.target = fact_or(e.facts, source ? "target" : k_targets.fact, "?");
    f.explanation = std::move(explanation);
    report.findings.push_back(std::move(f));
  };
  auto read = store.read_blob(e.digest, e.size);
  ++report.blobs_checked;
  if (!read) {
    add(FindingKind::corrupt, read.error().message);
    return std::nullopt;
  }
  if (!*read) {
    const cache::BlobFailure& failure = read->error();
    add(failure.problem == cache::BlobProblem::missing ? FindingKind::missing_blob : FindingKind::corrupt,
        failure.detail);
    return std::nullopt;
  }
  if (auto found = audit_artifact(e.key, e.key_schema, e.facts, ***read, check_cubin)) {
    found->digest = e.digest.to_hex();
    report.findings.push_back(std::move(*found));
    return std::nullopt;
  }
  return **read;
}

// The one-entry rules of a source cache entry (audit.hpp): never the latent-scale ones,
// which are about jitcache's own kernels.
std::optional<Finding> audit_source_entry(const cache::CacheKey& key, std::uint32_t key_schema,
                                          const cache::Facts& facts, std::span<const std::byte> bytes,
                                          bool check_cubin) {
  Finding f;
  f.key = key.to_hex();
  f.kernel = fact_or(facts, "family", "?");
  f.target = fact_or(facts, "target", "?");
  auto found = [&](FindingKind kind, std::string explanation) {
    f.kind = kind;
    f.explanation = std::move(explanation);
    return std::optional<Finding>(std::move(f));
  };
  const std::string what = facts.get("record") == k_record_spec_index ? "spec record" : "source bundle";
  if (key_schema != cache::k_key_schema_version)
    return found(FindingKind::legacy_key, what + " written under key schema " + std::to_string(key_schema) +
                                              " (this build: " + std::to_string(cache::k_key_schema_version) +
                                              "); never served");
  const auto schema = facts.get("facts_schema");
  if (schema != std::to_string(k_request_facts_schema))
    return found(FindingKind::legacy_key, what + " of request facts schema " +
                                              std::string(schema.value_or("(absent)")) + " (this build: " +
                                              std::to_string(k_request_facts_schema) + "); never served");
  if (facts.key() != key)
    return found(FindingKind::fact_mismatch,
                 "the index's facts hash to " + facts.key().to_hex() + ", not to the entry's key");
  if (auto usable = check_source_content(facts, bytes); !usable)
    return found(FindingKind::bad_source_entry, what + ": " + usable.error().message);
  if (check_cubin && facts.get("record") == k_record_source_bundle) {
    // check_source_content parsed it already; the cubin is what SourceCache checks on read.
    const auto artifact = parse_source_bundle(bytes, BundleText::skip);
    if (!artifact) return found(FindingKind::bad_source_entry, what + ": " + artifact.error().message);
    const auto info = read_cubin_info(artifact->cubin);
    if (!info) return found(FindingKind::bad_source_entry, what + ": " + info.error().message);
    if (auto has = check_entry(*info, artifact->entry, what + " " + key.to_hex()); !has)
      return found(FindingKind::bad_source_entry, has.error().message);
  }
  return std::nullopt;
}

// The checks that compare source cache entries, over the entries with no finding of their
// own (a bad one is reported once, as itself): bundles of one spec key built from
// different sources, and each spec record against the bundle it names.
void audit_source_entries(const std::vector<cache::EntryInfo>& entries,
                          const std::map<std::string, cache::SharedBytes>& clean, AuditReport& report) {
  std::map<std::string, const cache::EntryInfo*> by_key;
  for (const cache::EntryInfo& e : entries) by_key[e.key.to_hex()] = &e;
  // Bundles by spec key, in key order (a stable report).
  std::map<std::string, std::vector<const cache::EntryInfo*>> groups;
  for (const auto& [key, bytes] : clean) {
    const cache::EntryInfo& e = *by_key.at(key);
    if (e.facts.get("record") != k_record_source_bundle) continue;
    if (auto spec = spec_facts_of(e.facts)) groups[spec->key().to_hex()].push_back(&e);
  }
  for (const auto& [spec_key, bundles] : groups) {
    if (bundles.size() < 2) continue;
    const cache::Facts& first = bundles.front()->facts;
    Finding f;
    f.kind = FindingKind::incomplete_spec;
    f.key = spec_key;
    f.kernel = fact_or(first, "family", "?");
    f.target = fact_or(first, "target", "?");
    for (const auto& [name, value] : first.fields())
      if (name.starts_with("spec.")) f.spec[name] = value;
    // The facts in which the bundles differ: what the spec failed to capture.
    std::set<std::string> names;
    for (const auto* b : bundles)
      for (const auto& [name, value] : b->facts.fields()) names.insert(name);
    std::string differ;
    for (const std::string& name : names) {
      std::set<std::string> values;
      for (const auto* b : bundles) values.insert(std::string(b->facts.get(name).value_or("(absent)")));
      if (values.size() > 1) differ += (differ.empty() ? "" : ", ") + name;
    }
    std::string listed;
    for (const auto* b : bundles) {
      SourceEntryRef ref{b->key.to_hex(), fact_or(b->facts, "source_xxh3", "?")};
      listed += (listed.empty() ? "" : "; ") + ref.key + " (source_xxh3 " + ref.source_xxh3 + ")";
      f.entries.push_back(std::move(ref));
    }
    std::map<std::string, std::string> spec;
    for (const auto& [name, value] : f.spec) spec[name.substr(std::string_view("spec.").size())] = value;
    f.explanation = "the spec of kernel family " + f.kernel + " is incomplete: spec " + describe_spec(spec) +
                    " for " + f.target + " has " + std::to_string(bundles.size()) + " entries, differing in " +
                    differ + ": " + listed + "; some input that changes the code is not a spec fact";
    report.findings.push_back(std::move(f));
  }

  for (const auto& [key, bytes] : clean) {
    const cache::EntryInfo& e = *by_key.at(key);
    if (e.facts.get("record") != k_record_spec_index) continue;
    Finding f;
    f.key = key;
    f.digest = e.digest.to_hex();
    f.kernel = fact_or(e.facts, "family", "?");
    f.target = fact_or(e.facts, "target", "?");
    auto add = [&](FindingKind kind, std::string explanation) {
      f.kind = kind;
      f.explanation = std::move(explanation);
      report.findings.push_back(f);
    };
    const auto record = parse_spec_record(std::span<const std::byte>(*bytes));
    if (!record) {
      add(FindingKind::bad_source_entry, record.error().message);
      continue;
    }
    const auto named = by_key.find(record->key);
    if (named == by_key.end()) {
      add(FindingKind::dangling_spec_record,
          "spec record names " + record->key + ", which is not in the cache (evicted or removed); the next "
          "compile of the spec stores it again, and until then the record still verifies the spec");
      continue;
    }
    const cache::Facts& bundle = named->second->facts;
    if (!clean.contains(record->key)) continue;  // the bundle has a finding of its own
    const auto spec = spec_facts_of(bundle);
    if (!spec) {
      add(FindingKind::bad_source_entry, "spec record names " + record->key + ", which is not a source bundle");
      continue;
    }
    if (spec->key().to_hex() != key) {
      add(FindingKind::bad_source_entry, "spec record names " + record->key + ", a bundle of spec key " +
                                             spec->key().to_hex() + ", not this record's");
      continue;
    }
    const auto differences = record_differences(*record, bundle);
    if (differences.empty()) continue;
    std::string listed;
    for (const RecordDifference& d : differences)
      listed += (listed.empty() ? "" : "; ") + d.what + " " + d.recorded + " in the record, " + d.found +
                " in the bundle";
    add(FindingKind::bad_source_entry,
        "spec record disagrees with the bundle " + record->key + " it names: " + listed);
  }
}

}  // namespace

std::optional<Finding> audit_artifact(const cache::CacheKey& key, std::uint32_t key_schema, const cache::Facts& facts,
                                      std::span<const std::byte> bytes, bool check_cubin) {
  if (is_request_facts(facts)) return audit_source_entry(key, key_schema, facts, bytes, check_cubin);
  Finding f;
  f.key = key.to_hex();
  f.kernel = fact_or(facts, k_kernel_kinds.fact, "?");
  f.target = fact_or(facts, k_targets.fact, "?");
  auto found = [&](FindingKind kind, std::string explanation) {
    f.kind = kind;
    f.explanation = std::move(explanation);
    return std::optional<Finding>(std::move(f));
  };

  const auto view = view_artifact(bytes);
  if (!view) return found(FindingKind::corrupt, "the blob is not a kernel artifact (neither a bundle, a cubin nor PTX)");
  if (view->embedded) {
    auto embedded = [&](std::string_view name) {
      const auto it = view->embedded->find(std::string(name));
      return it == view->embedded->end() ? std::string("?") : it->second;
    };
    if (f.kernel == "?") f.kernel = embedded(k_kernel_kinds.fact);
    if (f.target == "?") f.target = embedded(k_targets.fact);
  }

  std::string legacy_why;
  const bool legacy = is_legacy(key_schema, facts, legacy_why);
  const auto [built, evidence] = built_for(*view);
  const auto indexed = facts.get(k_latent_scales.fact);
  if (built == BuiltFor::identity && (!indexed || parse_latent_scale(*indexed) != LatentScale::identity))
    return found(FindingKind::stale_identity,
                 "identity kernel (by " + evidence + ") indexed as " +
                     (indexed ? "latent_scale=" + std::string(*indexed) : "no latent_scale (" + legacy_why + ")") +
                     ": serving it to a calibrated layer skips the restore multiply");
  // A per-token kernel reads each token's scale from its record and takes no outer scale; a
  // static one takes the layer's. Indexed as the other, it would be bound to layers whose
  // records it misreads: named here before the general fact comparison below.
  const auto indexed_mode = indexed ? parse_latent_scale(*indexed) : std::nullopt;
  if ((built == BuiltFor::per_token) != (indexed_mode == LatentScale::per_token) && built != BuiltFor::unknown &&
      indexed_mode)
    return found(FindingKind::fact_mismatch,
                 std::string(built == BuiltFor::per_token ? "per-token" : "static") + " kernel (by " + evidence +
                     ") indexed as latent_scale=" + std::string(*indexed) +
                     ": it would be bound to layers whose records it reads with the wrong scale");
  if (legacy) return found(FindingKind::legacy_key, legacy_why + "; never served");
  if (facts.key() != key)
    return found(FindingKind::fact_mismatch, "the index's facts hash to " + facts.key().to_hex() + ", not to the entry's key");
  if (!view->embedded)
    return found(FindingKind::fact_mismatch,
                 "the artifact (" + view->form + ") carries no embedded facts to check the index against");
  for (const auto& [name, value] : *view->embedded) {
    const auto in_index = facts.get(name);
    if (!in_index || *in_index != value)
      return found(FindingKind::fact_mismatch, "index says " + name + "=" +
                                                   (in_index ? std::string(*in_index) : "(absent)") +
                                                   ", the artifact says " + value);
  }
  return std::nullopt;
}

const char* to_string(FindingKind kind) {
  return enum_name(kind, {"stale-identity", "legacy-key", "fact-mismatch", "corrupt", "missing-blob",
                          "orphan-blob", "bad-source-entry", "incomplete-spec", "dangling-spec-record",
                          "superseded", "unknown-compiler", "wrong-device"});
}

const char* to_string(Severity severity) { return severity == Severity::warning ? "warning" : "error"; }

Severity severity_of(FindingKind kind) {
  return kind == FindingKind::dangling_spec_record ? Severity::warning : Severity::error;
}

namespace {

// What is left of an entry's facts without the compiler builds: the same kernel from
// another build has the same.
std::string facts_without_builds(const cache::Facts& facts) {
  std::string text;
  for (const auto& [name, value] : facts.fields()) {
    if (name == "compiler_fingerprint" || name == "compiler_version") continue;
    if (name.starts_with("tool.") && (name.ends_with(".fingerprint") || name.ends_with(".version"))) continue;
    text += name + "=" + value + "\n";
  }
  return text;
}

// The compiler-build rules (audit.hpp) for every entry without another finding.
void audit_compiler_builds(cache::Store& store, const Compiler& compiler, const std::vector<cache::EntryInfo>& entries,
                           AuditReport& report) {
  MemoContents memo;
  if (!store.root().empty()) memo = read_memo_contents(store.root() / k_fingerprint_memo_name);
  std::map<std::string, std::set<std::string>> known;
  for (const char* tool : {"nvrtc", "libnvvm", "nvjitlink"}) known[tool] = known_builds(memo, tool);
  if (compiler.name() == "nvrtc")
    if (const auto fingerprint = compiler.fingerprint()) known["nvrtc"].insert(*fingerprint);
  std::set<std::string> flagged;
  for (const Finding& f : report.findings) flagged.insert(f.key);
  std::map<std::string, std::string> trusted;  // facts without builds -> key
  std::vector<std::pair<const cache::EntryInfo*, std::string>> unknown;  // entry, why
  for (const cache::EntryInfo& e : entries) {
    if (flagged.contains(e.key.to_hex())) continue;
    std::string why;
    for (const ImportedBuild& build : compiler_builds_of(e.facts))
      if (!known[build.tool].contains(build.value.fingerprint))
        why += std::string(why.empty() ? "" : "; ") + build.tool + " " + build.value.version + " fingerprint " +
               build.value.fingerprint;
    if (why.empty()) trusted.emplace(facts_without_builds(e.facts), e.key.to_hex());
    else unknown.emplace_back(&e, std::move(why));
  }
  for (const auto& [e, why] : unknown) {
    Finding f;
    f.key = e->key.to_hex();
    f.digest = e->digest.to_hex();
    const bool source = is_request_facts(e->facts);
    f.kernel = fact_or(e->facts, source ? "family" : k_kernel_kinds.fact, "?");
    f.target = fact_or(e->facts, source ? "target" : k_targets.fact, "?");
    const std::string built = "keyed with a compiler build no compiler file this cache has digested vouches for (" +
                              why + "): an earlier jitcache's fingerprint, or a library no longer trusted; never served";
    if (const auto twin = trusted.find(facts_without_builds(e->facts)); twin != trusted.end()) {
      f.kind = FindingKind::superseded;
      f.superseded_by = twin->second;
      f.explanation = built + "; superseded by " + twin->second + ", the same kernel from a known build";
    } else {
      f.kind = FindingKind::unknown_compiler;
      f.explanation = built;
    }
    report.findings.push_back(std::move(f));
  }
}

}  // namespace

Result<std::vector<std::string>> remove_unservable(cache::Store& store, const Compiler& compiler,
                                                   cache::DryRun dry_run) {
  // From the index's facts alone: gc reads no blob (an entry whose blob is bad is the
  // audit's to report, and a lookup's to drop).
  AuditReport report;
  const auto entries = JC_TRY(store.list());
  report.entries = entries.size();
  audit_compiler_builds(store, compiler, entries, report);
  return clear_flagged(store, report, dry_run);
}

Result<AuditReport> audit_cache(cache::Store& store, const Compiler& compiler, const AuditOptions& options) {
  AuditReport report;
  const auto entries = JC_TRY(store.list());
  report.entries = entries.size();
  std::map<std::string, cache::SharedBytes> clean_source;  // source cache entries with no finding
  for (const cache::EntryInfo& e : entries) {
    auto bytes = audit_entry(store, e, options.check_cubin, report);
    if (bytes && is_request_facts(e.facts)) clean_source.emplace(e.key.to_hex(), std::move(*bytes));
  }
  audit_source_entries(entries, clean_source, report);
  audit_compiler_builds(store, compiler, entries, report);
  for (const cache::StoredBlob& blob : JC_TRY(store.orphan_blobs(options.orphan_grace))) {
    Finding f;
    f.kind = FindingKind::orphan_blob;
    f.digest = blob.digest.to_hex();
    f.kernel = "?";
    f.target = "?";
    f.explanation = store.blob_path(blob.digest).string() + ": no index row refers to this blob";
    report.findings.push_back(std::move(f));
  }
  if (!options.checkpoint) return report;

  // The per-layer binding report.
  ResolveOptions resolve;
  resolve.checkpoint_dir = *options.checkpoint;
  resolve.override_file = options.scales_override;
  const ResolvedScales scales = JC_TRY(resolve_scales(resolve));
  const Target target = JC_TRY(parse_target(options.target));
  CheckpointAudit audit;
  audit.checkpoint = options.checkpoint->string();
  audit.target = target.name;
  if (options.device) audit.device = capability_text(options.device->first, options.device->second);
  audit.format = to_string(options.format);
  audit.latent_policy = options.policy;
  audit.provenance = scales.provenance;

  std::map<std::string, const Finding*> flagged;
  for (const Finding& f : report.findings)
    if (!f.key.empty() && f.severity() == Severity::error) flagged[f.key] = &f;
  std::set<std::string> present;
  for (const cache::EntryInfo& e : entries) present.insert(e.key.to_hex());

  // The report lists the variants in the order the layers first need them.
  const VariantPlan plan = JC_TRY(plan_variants(scales, options.format, target, options.policy));
  std::vector<std::optional<std::size_t>> reported(plan.variants.size());
  // Added to the findings after the layers: `flagged` points into them.
  std::vector<Finding> wrong_device;
  auto variant = [&](std::size_t planned) -> Result<std::size_t> {
    if (reported[planned]) return *reported[planned];
    const KernelSpec& spec = plan.variants[planned];
    const cache::Facts facts = JC_TRY(kernel_facts(generate(spec), compiler));
    VariantAudit v;
    v.label = spec.label();
    v.key = facts.key().to_hex();
    v.cached = present.contains(v.key) && !flagged.contains(v.key);
    if (options.device)
      if (auto runs = check_cubin_runs_on(target.name, options.device->first, options.device->second); !runs) {
        Finding f;
        f.kind = FindingKind::wrong_device;
        f.key = v.key;
        f.kernel = to_string(spec.kernel);
        f.target = target.name;
        f.explanation = v.label + ": " + runs.error().message;
        wrong_device.push_back(std::move(f));
      }
    audit.variants.push_back(v);
    reported[planned] = audit.variants.size() - 1;
    return audit.variants.size() - 1;
  };
  for (std::size_t i = 0; i < scales.layers.size(); ++i) {
    const LayerScale& l = scales.layers[i];
    const std::size_t w = JC_TRY(variant(plan.layers[i].writer));
    const std::size_t g = JC_TRY(variant(plan.layers[i].gather));
    ++audit.variants[w].layers;
    ++audit.variants[g].layers;
    LayerAudit row;
    row.layer = l.layer;
    row.scale = l.scale;
    row.mode = l.mode;
    row.source = l.source;
    row.writer_key = audit.variants[w].key;
    row.gather_key = audit.variants[g].key;
    row.writer_cached = audit.variants[w].cached;
    row.gather_cached = audit.variants[g].cached;
    switch (l.mode) {
      case ScaleMode::dynamic:
        for (const std::string& key : {row.writer_key, row.gather_key}) {
          const auto it = flagged.find(key);
          if (it != flagged.end() && it->second->kind == FindingKind::stale_identity) row.bound_to_identity = true;
        }
        ++audit.dynamic_layers;
        break;
      case ScaleMode::identity: ++audit.identity_layers; break;
    }
    audit.layers.push_back(row);
  }
  for (Finding& f : wrong_device) report.findings.push_back(std::move(f));
  report.checkpoint = std::move(audit);
  return report;
}

Result<std::vector<std::string>> clear_flagged(cache::Store& store, const AuditReport& report, cache::DryRun dry_run) {
  std::vector<std::string> lines;
  const char* verb = dry_run == cache::DryRun::yes ? "would remove" : "removed";
  for (const Finding& f : report.findings) {
    if (f.severity() != Severity::error || f.kind == FindingKind::wrong_device) continue;
    if (f.kind == FindingKind::orphan_blob) {
      const auto digest = JC_TRY(cache::BlobDigest::from_hex(f.digest));
      if (dry_run == cache::DryRun::no && !JC_TRY(store.remove_orphan_blob(digest))) {
        lines.push_back("kept orphan blob " + f.digest + ": an entry refers to it again");
        continue;
      }
      lines.push_back(std::string(verb) + " orphan blob " + f.digest);
      continue;
    }
    std::vector<std::string> keys{f.key};  // incomplete-spec: the record (if any), then the bundles
    for (const SourceEntryRef& ref : f.entries) keys.push_back(ref.key);
    for (const std::string& key : keys) {
      cache::EntryFilter only;
      only.key_prefix = key;
      const auto removed = JC_TRY(store.remove(only, dry_run));
      for (const auto& e : removed)
        lines.push_back(std::string(verb) + " " + to_string(f.kind) + " entry " + e.key.to_hex() + " (" + f.kernel +
                        ", " + f.target + ")");
    }
  }
  return lines;
}

}  // namespace jitcache
