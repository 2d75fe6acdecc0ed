#include "runtime/compile/kernel_cache.hpp"

#include <algorithm>
#include <atomic>
#include <thread>
#include <vector>

#include "jitcache/log.hpp"
#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/compile/artifact_bundle.hpp"
#include "runtime/compile/artifact_facts.hpp"
#include "support/env.hpp"

namespace jitcache {
namespace {

std::string hash_hex(std::string_view text) { return cache::BlobDigest::of(text).to_hex(); }

// Fact names allow [A-Za-z0-9_.-]; include names may hold '/'.
std::string header_fact_name(std::string_view include_name) {
  std::string name = "header.";
  for (char c : include_name) name += (c == '/') ? '.' : c;
  return name;
}

// A stored artifact must be the one asked for: its own facts (from the bundle, written
// by the compile that produced it) agree with every generator fact of the request.
Status check_artifact_facts(const CompiledArtifact& artifact, const GeneratedSource& source) {
  for (const auto& [name, value] : source.facts) {
    auto it = artifact.facts.find(name);
    const std::string found = it == artifact.facts.end() ? "(absent)" : it->second;
    if (found != value)
      return make_error(ErrorCode::invalid_input, "cached artifact for " + source.spec.label() +
                                                      " has fact " + name + "=" + found +
                                                      ", expected " + value);
  }
  return {};
}

// A parsed, checked artifact kept beside its bundle in the store's memory tier.
struct ParsedArtifact final : cache::Decoded {
  ParsedArtifact(std::shared_ptr<const CompiledArtifact> a, BundleText t) : artifact(std::move(a)), text(t) {}
  std::shared_ptr<const CompiledArtifact> artifact;
  BundleText text;  // a skipped text cannot serve a caller that needs it
};

}  // namespace

Status check_bundle_facts(const cache::Facts& facts, std::span<const std::byte> bytes) {
  const CompiledArtifact artifact = JC_TRY(parse_bundle(bytes, BundleText::skip));
  auto compare = [&](const auto& recorded, std::string_view where) -> Status {
    for (const auto& [name, value] : recorded) {
      const auto expected = facts.get(name);
      if (expected && *expected != value)
        return make_error(ErrorCode::invalid_input, "the bundle's " + std::string(where) + " say " + name + "=" +
                                                        value + ", its key says " + std::string(*expected));
    }
    return {};
  };
  JC_TRY(compare(artifact.facts, "facts"));
  const FactMap embedded = JC_TRY(facts_from_cubin(artifact.cubin));
  JC_TRY(compare(embedded, "cubin's embedded facts"));
  // The facts that pick a variant must be there to compare, in the key and the bundle.
  for (std::string_view name : {k_kernel_kinds.fact, k_latent_scales.fact, k_targets.fact}) {
    if (!facts.get(name)) return make_error(ErrorCode::invalid_input, "the key has no " + std::string(name) + " fact");
    if (!artifact.facts.contains(std::string(name)))
      return make_error(ErrorCode::invalid_input, "the bundle records no " + std::string(name) + " fact");
  }
  // The format, in either of its spellings (format=<name>, or rope=bf16|fp8 for the first two).
  const bool key_names_format = facts.get(k_record_formats.fact) || facts.get(k_legacy_format_fact);
  if (!key_names_format) return make_error(ErrorCode::invalid_input, "the key has no format (or rope) fact");
  if (!format_from_facts(artifact.facts))
    return make_error(ErrorCode::invalid_input, "the bundle records no format (or rope) fact");
  return {};
}

Result<cache::Facts> kernel_facts(const GeneratedSource& source, const Compiler& compiler) {
  cache::Facts facts;
  facts.set("facts_schema", std::to_string(k_kernel_facts_schema));
  for (const auto& [name, value] : source.facts) facts.set(name, value);
  facts.set("source_xxh3", hash_hex(source.source));
  for (const auto& header : source.headers)
    facts.set(header_fact_name(header.include_name), hash_hex(header.text));
  facts.set("compiler", compiler.name());
  facts.set("compiler_version", compiler.version());
  facts.set("compiler_fingerprint", JC_TRY(compiler.fingerprint()));
  std::string options;
  for (const auto& o : compiler.options(source.spec)) options += (options.empty() ? "" : " ") + o;
  facts.set("options", options);
  for (const env::EnvVar* var : env::registry()) {
    if (!var->affects_compilation) continue;
    // Unset and set-to-default must hash the same: record the effective value.
    facts.set("env." + std::string(var->name), env::get(*var).value_or(std::string(var->default_value)));
  }
  facts.set("bundle_format", std::to_string(k_bundle_format_version));
  JC_TRY(facts.validate());
  return facts;
}

std::string describe_tiers(const cache::Store& store) {
  std::string text;
  for (const cache::TierInfo& tier : store.tiers()) {
    if (!text.empty()) text += ", ";
    text += tier.name;
    if (tier.kind == cache::Tier::disk && !store.root().empty()) text += " (" + store.root().string() + ")";
  }
  return text;
}

Error no_compile_miss(const std::string& what, const cache::Store& store) {
  return Error{ErrorCode::unavailable,
               "no-compile mode (JITCACHE_NO_COMPILE, or the no_compile option): " + what +
                   "; looked up in " + describe_tiers(store) + "; nothing was compiled",
               {}};
}

namespace {

std::string describe_variant(const KernelSpec& spec, const std::string& key) {
  return spec.label() + " (kernel " + to_string(spec.kernel) + ", format " + to_string(spec.format) +
         ", latent_scale " + to_string(spec.latent_scale) + ", target " + spec.target.name + ", key " + key + ")";
}

}  // namespace

Result<cache::Facts> KernelCache::facts_of(const KernelSpec& spec) const {
  return kernel_facts(generate(spec), m_compiler);
}

Error KernelCache::missing(std::span<const KernelSpec> specs) const {
  std::string what;
  for (const KernelSpec& spec : specs) {
    auto facts = facts_of(spec);
    const std::string key = facts ? facts->key().to_hex() : "unknown: " + facts.error().message;
    what += (what.empty() ? "" : "; ") + describe_variant(spec, key);
  }
  const std::string head = specs.size() == 1 ? "kernel " : std::to_string(specs.size()) + " kernels are missing: ";
  return no_compile_miss(head + what + (specs.size() == 1 ? " is in no tier" : ""), m_store);
}

Result<KernelFetch> KernelCache::get(const KernelSpec& spec, BundleText text) {
  auto fetched = lookup(spec, text, OnMiss::compile);
  if (!fetched) return std::unexpected(std::move(fetched.error()));
  if (!*fetched)  // compiling never yields "absent"; say so rather than trust it
    return make_error(ErrorCode::internal, "kernel cache: fetching " + spec.label() + " produced nothing");
  return std::move(**fetched);
}

Result<std::optional<KernelFetch>> KernelCache::find(const KernelSpec& spec, BundleText text) {
  return lookup(spec, text, OnMiss::report);
}

Result<std::optional<KernelFetch>> KernelCache::lookup(const KernelSpec& spec, BundleText text,
                                                       OnMiss on_miss) {
  const GeneratedSource source = generate(spec);
  const cache::Facts facts = JC_TRY(kernel_facts(source, m_compiler));
  auto fetched = fetch(source, facts, text, OnMiss::report);
  if (fetched && !*fetched && on_miss == OnMiss::compile) {
    if (no_compile()) return std::unexpected(missing(std::span<const KernelSpec>(&spec, 1)));
    fetched = fetch(source, facts, text, on_miss);
  }
  if (fetched || fetched.error().code != ErrorCode::invalid_input) return fetched;
  // The blob verified against its digest but is not a usable artifact (a foreign or
  // buggy writer): drop the entry and compile once more.
  log_warning("dropping unusable cache entry " + facts.key().to_hex() + ": " + fetched.error().message);
  cache::EntryFilter only;
  only.key_prefix = facts.key().to_hex();
  JC_TRY(m_store.remove(only, cache::DryRun::no));
  if (no_compile() && on_miss == OnMiss::compile) {
    auto again = fetch(source, facts, text, OnMiss::report);
    if (again && !*again) return std::unexpected(missing(std::span<const KernelSpec>(&spec, 1)));
    return again;
  }
  return fetch(source, facts, text, on_miss);
}

Result<std::optional<KernelFetch>> KernelCache::fetch(const GeneratedSource& source,
                                                      const cache::Facts& facts, BundleText text,
                                                      OnMiss on_miss) {
  const KernelSpec& spec = source.spec;
  const cache::CacheKey key = facts.key();
  cache::SharedBytes bytes;
  cache::SharedDecoded decoded;
  cache::Source source_tier = cache::Source::produced;
  if (on_miss == OnMiss::report) {
    // A probe: the get() that follows a miss counts it when it compiles (once per lookup).
    auto hit = JC_TRY(m_store.get(key, cache::CountMiss::no));
    if (!hit) return std::optional<KernelFetch>();
    bytes = std::move(hit->bytes);
    decoded = std::move(hit->decoded);
    source_tier = cache::source_of(hit->tier);
  } else {
    const Compiler& compiler = m_compiler;
    const cache::Producer producer = [&]() -> Result<cache::Produced> {
      const CompiledArtifact artifact = JC_TRY(compiler.compile(source));
      log_debug("compiled " + spec.label() + " in " + std::to_string(artifact.compile_ms) + " ms");
      return cache::Produced{serialize_bundle(artifact), artifact.compile_ms};
    };
    cache::Fetched fetched = JC_TRY(m_store.get_or_create(key, facts, producer, spec.label()));
    bytes = std::move(fetched.bytes);
    decoded = std::move(fetched.decoded);
    source_tier = fetched.source;
  }
  // Parsed and checked already by an earlier fetch of this memory entry.
  if (auto parsed = std::dynamic_pointer_cast<const ParsedArtifact>(decoded);
      parsed && (parsed->text == BundleText::load || text == BundleText::skip))
    return KernelFetch{parsed->artifact, key, source_tier, bytes};
  auto artifact = parse_bundle(*bytes, text);
  if (!artifact)
    return make_error(ErrorCode::invalid_input, "entry " + key.to_hex() + " of " + spec.label() +
                                                    ": " + artifact.error().message);
  JC_TRY(check_artifact_facts(*artifact, source));
  auto shared = std::make_shared<const CompiledArtifact>(std::move(*artifact));
  m_store.attach(key, bytes, std::make_shared<const ParsedArtifact>(shared, text));
  return KernelFetch{shared, key, source_tier, std::move(bytes)};
}

Status fetch_each(KernelCache& kernels, std::span<const KernelSpec> specs, unsigned jobs, BundleText text,
                  const OnFetched& on_fetched) {
  std::vector<std::size_t> misses;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const auto started = std::chrono::steady_clock::now();
    const auto found = JC_TRY(kernels.find(specs[i], text));
    if (found) JC_TRY(on_fetched(i, *found, started));
    else misses.push_back(i);
  }
  if (kernels.no_compile() && !misses.empty()) {
    std::vector<KernelSpec> missing;
    for (std::size_t i : misses) missing.push_back(specs[i]);
    return std::unexpected(kernels.missing(missing));
  }
  std::vector<std::optional<Error>> errors(misses.size());
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t m; (m = next.fetch_add(1)) < misses.size();) {
      const auto started = std::chrono::steady_clock::now();
      auto fetched = kernels.get(specs[misses[m]], text);
      if (!fetched) errors[m] = std::move(fetched.error());
      else if (auto used = on_fetched(misses[m], *fetched, started); !used) errors[m] = std::move(used.error());
    }
  };
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::size_t threads_wanted = std::min<std::size_t>(jobs ? jobs : cores, misses.size());
  std::vector<std::thread> threads;
  for (std::size_t t = 1; t < threads_wanted; ++t) threads.emplace_back(work);
  work();
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) return std::unexpected(std::move(*e));
  return {};
}

}  // namespace jitcache
