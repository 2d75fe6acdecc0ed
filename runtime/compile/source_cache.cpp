#include "runtime/compile/source_cache.hpp"

#include <nlohmann/json.hpp>

#include "jitcache/log.hpp"
#include "runtime/compile/artifact_bundle.hpp"
#include "runtime/compile/cubin_elf.hpp"
#include "runtime/compile/kernel_cache.hpp"

namespace jitcache {
namespace {

std::string describe_spec(const KernelRequest& request) {
  std::string out = "{";
  bool first = true;
  for (const auto& [name, value] : request.spec) {
    out += (first ? "" : ", ") + name + "=" + value;
    first = false;
  }
  return out + "}";
}

std::string label_of(const KernelRequest& request) {
  return request.family + describe_spec(request) + " " + request.entry + " for " + request.target;
}

std::span<const std::byte> as_bytes(const std::string& text) {
  return std::as_bytes(std::span(text.data(), text.size()));
}

// Every fact of the key, and nothing else, is the bundle's; so is its entry.
Status check_source_artifact(const cache::Facts& facts, const CompiledArtifact& artifact, const std::string& what) {
  for (const auto& [name, value] : facts.fields()) {
    auto it = artifact.facts.find(name);
    const std::string found = it == artifact.facts.end() ? "(absent)" : it->second;
    if (found != value)
      return make_error(ErrorCode::invalid_input, what + " has fact " + name + "=" + found + ", expected " + value);
  }
  if (artifact.facts.size() != facts.size())
    return make_error(ErrorCode::invalid_input, what + " records facts its key does not have");
  const auto entry = facts.get("entry");
  if (!entry || artifact.entry != *entry)
    return make_error(ErrorCode::invalid_input, what + " holds entry " + artifact.entry);
  return {};
}

// A decoded, checked entry kept beside its bundle in the store's memory tier.
struct DecodedSource final : cache::Decoded {
  explicit DecodedSource(SourceResult r) : result(std::move(r)) {}
  SourceResult result;
};

}  // namespace

Status check_source_content(const cache::Facts& facts, std::span<const std::byte> bytes) {
  const auto record = facts.get("record");
  if (record == k_record_source_bundle) {
    const CompiledArtifact artifact = JC_TRY(parse_source_bundle(bytes, BundleText::skip));
    return check_source_artifact(facts, artifact, "source bundle");
  }
  if (record == k_record_spec_index) {
    const auto json = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                                            nullptr, false);
    // Field by field, never value(): a foreign writer's types must not throw.
    auto has = [&](const char* name, bool (nlohmann::json::*is)() const noexcept) {
      return json.contains(name) && (json[name].*is)();
    };
    if (!json.is_object() || !has("format", &nlohmann::json::is_number_integer) ||
        json["format"].get<std::int64_t>() != k_spec_record_format || !has("key", &nlohmann::json::is_string) ||
        !has("source_xxh3", &nlohmann::json::is_string) || !has("headers", &nlohmann::json::is_object))
      return make_error(ErrorCode::invalid_input,
                        "not a spec record of format " + std::to_string(k_spec_record_format));
    for (const auto& [name, value] : json["headers"].items())
      if (!value.is_string())
        return make_error(ErrorCode::invalid_input, "spec record: header digest " + name + " is not a string");
    return {};
  }
  return make_error(ErrorCode::invalid_input, "not a source cache entry (no record fact)");
}

Status check_stored_content(const cache::Facts& facts, std::span<const std::byte> bytes) {
  return is_request_facts(facts) ? check_source_content(facts, bytes) : check_bundle_facts(facts, bytes);
}

SourceCache::SourceCache(cache::Store& store, SourceCacheOptions options)
    : m_store(store), m_options(std::move(options)) {
  if (!m_options.compile) m_options.compile = compile_source;
  if (!m_options.tools) m_options.tools = probe_tools;
}

const SpecRegistry& SourceCache::registry() const {
  return m_options.registry ? *m_options.registry : SpecRegistry::global();
}

Result<ToolFacts> SourceCache::tools(SourceKind kind) const { return m_options.tools(kind); }

Result<std::optional<SourceCache::SpecRecord>> SourceCache::read_record(const cache::Facts& spec) {
  auto hit = JC_TRY(m_store.get(spec.key(), cache::CountMiss::no));
  if (!hit) return std::optional<SpecRecord>();
  const std::span<const std::byte> bytes(*hit->bytes);
  if (auto usable = check_source_content(spec, bytes); !usable) {
    // Verified against its digest but not a spec record (a foreign or buggy writer): it
    // cannot vouch for anything, so drop it; the next compile records the spec again.
    log_warning("source cache: dropping unusable spec record " + spec.key().to_hex() + ": " + usable.error().message);
    if (m_store.mode() == cache::StoreMode::read_write) {
      cache::EntryFilter only;
      only.key_prefix = spec.key().to_hex();
      JC_TRY(m_store.remove(only, cache::DryRun::no));
    }
    return std::optional<SpecRecord>();
  }
  const auto json = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  SpecRecord record;
  record.key = json["key"].get<std::string>();
  record.source_xxh3 = json["source_xxh3"].get<std::string>();
  for (const auto& [name, value] : json["headers"].items()) record.headers[name] = value.get<std::string>();
  return std::optional<SpecRecord>(std::move(record));
}

Status SourceCache::check_record(const KernelRequest& request, const cache::Facts& facts,
                                 const SpecRecord& record) const {
  const std::string source(*facts.get("source_xxh3"));
  std::map<std::string, std::string> headers;
  for (const auto& [name, value] : facts.fields())
    if (name.starts_with("header.")) headers[name] = value;
  if (source == record.source_xxh3 && headers == record.headers) return {};
  std::string message = "the spec of kernel family " + request.family + " is incomplete: spec " +
                        describe_spec(request) + " (" + to_string(request.kind) + " " + request.entry + " for " +
                        request.target + ") was cached from source_xxh3 " + record.source_xxh3 +
                        ", this request's source has source_xxh3 " + source;
  if (headers != record.headers) message += ", and its headers differ";
  message += "; some input that changes the code is not a spec fact. The cached entry is not served.";
  return make_error(ErrorCode::invalid_input, message);
}

void SourceCache::write_record(const cache::Facts& spec, const cache::Facts& facts) {
  nlohmann::json json;
  json["format"] = k_spec_record_format;
  json["key"] = facts.key().to_hex();
  json["source_xxh3"] = std::string(*facts.get("source_xxh3"));
  json["headers"] = nlohmann::json::object();
  for (const auto& [name, value] : facts.fields())
    if (name.starts_with("header.")) json["headers"][name] = value;
  const std::string text = json.dump();
  if (m_store.mode() != cache::StoreMode::read_write) return;
  if (auto put = m_store.put(spec.key(), spec, as_bytes(text), 0); !put)
    log_warning("source cache: could not record spec " + spec.key().to_hex() + ": " + put.error().message);
}

Result<SourceCache::Checked> SourceCache::check(const KernelRequest& request) {
  JC_TRY(registry().validate(request));
  const ToolFacts tools = JC_TRY(this->tools(request.kind));
  Checked checked{JC_TRY(request_facts(request, tools)), JC_TRY(spec_facts(request, tools)), std::nullopt};
  checked.record = JC_TRY(read_record(checked.spec));
  if (checked.record) JC_TRY(check_record(request, checked.facts, *checked.record));
  return checked;
}

Status SourceCache::verify_spec(const KernelRequest& request) {
  JC_TRY(check(request));
  return {};
}

Result<SourceResult> SourceCache::compile(const KernelRequest& request) {
  const Checked checked = JC_TRY(check(request));
  const cache::Facts& facts = checked.facts;
  const cache::Facts& spec = checked.spec;
  const std::optional<SpecRecord>& record = checked.record;

  auto fetched = fetch(request, facts);
  if (!fetched && fetched.error().code == ErrorCode::invalid_input) {
    // The blob verified against its digest but is not this request's bundle: drop it and compile once more.
    log_warning("source cache: dropping unusable entry " + facts.key().to_hex() + ": " + fetched.error().message);
    cache::EntryFilter only;
    only.key_prefix = facts.key().to_hex();
    if (m_store.mode() == cache::StoreMode::read_write) JC_TRY(m_store.remove(only, cache::DryRun::no));
    fetched = fetch(request, facts);
  }
  if (!fetched) return fetched;
  if (!record) write_record(spec, facts);
  return fetched;
}

Result<SourceResult> SourceCache::fetch(const KernelRequest& request, const cache::Facts& facts) {
  const SourceCompileFn& compile_fn = m_options.compile;
  const cache::Producer producer = [&]() -> Result<cache::Produced> {
    SourceInput input{request.kind, request.text, request.headers, request.entry, request.target, request.options,
                      request.family + "." + request.entry};
    const SourceOutput out = JC_TRY(compile_fn(input));
    CompiledArtifact artifact;
    artifact.entry = request.entry;
    artifact.cubin = out.cubin;
    artifact.ptx = out.ptx;
    artifact.log = out.log;
    artifact.options = out.effective_options;
    artifact.usage = out.usage;
    artifact.compile_ms = out.compile_ms;
    for (const auto& [name, value] : facts.fields()) artifact.facts[name] = value;
    log_debug("compiled " + label_of(request) + " in " + std::to_string(out.compile_ms) + " ms");
    return cache::Produced{serialize_bundle(artifact), out.compile_ms};
  };
  cache::Fetched fetched = JC_TRY(m_store.get_or_create(facts.key(), facts, producer, label_of(request)));
  // Decoded and checked already by an earlier fetch of this memory entry (same key, so same facts).
  if (auto done = std::dynamic_pointer_cast<const DecodedSource>(fetched.decoded)) {
    SourceResult result = done->result;
    result.source = fetched.source;
    result.from_cache = fetched.source != cache::Source::produced;
    return result;
  }
  auto result = decode(facts, fetched.bytes, fetched.source);
  if (result) m_store.attach(facts.key(), fetched.bytes, std::make_shared<const DecodedSource>(*result));
  return result;
}

Result<SourceResult> SourceCache::decode(const cache::Facts& facts, const cache::SharedBytes& bytes,
                                         cache::Source source) const {
  const std::string key = facts.key().to_hex();
  auto artifact = parse_source_bundle(*bytes);
  if (!artifact)
    return make_error(ErrorCode::invalid_input, "source cache entry " + key + ": " + artifact.error().message);
  JC_TRY(check_source_artifact(facts, *artifact, "source cache entry " + key));
  if (m_options.check_cubin) {
    auto info = read_cubin_info(artifact->cubin);
    if (!info) return make_error(ErrorCode::invalid_input, "source cache entry " + key + ": " + info.error().message);
    if (auto has = check_entry(*info, artifact->entry, "source cache entry " + key); !has)
      return make_error(ErrorCode::invalid_input, has.error().message);
  }
  SourceResult result;
  result.cubin = std::move(artifact->cubin);
  result.ptx = std::move(artifact->ptx);
  result.usage = artifact->usage;
  result.log = std::move(artifact->log);
  result.key = facts.key();
  result.source = source;
  result.from_cache = source != cache::Source::produced;
  return result;
}

Result<std::optional<SourceResult>> SourceCache::lookup(const std::string& family,
                                                        const std::map<std::string, std::string>& spec_values,
                                                        SourceKind kind, const std::string& entry,
                                                        const std::string& target,
                                                        const std::vector<std::string>& options) {
  KernelRequest request;
  request.family = family;
  request.spec = spec_values;
  request.kind = kind;
  request.entry = entry;
  request.target = target;
  request.options = options;
  JC_TRY(registry().validate(request));
  const ToolFacts tools = JC_TRY(this->tools(kind));
  const cache::Facts spec = JC_TRY(spec_facts(request, tools));
  const auto record = JC_TRY(read_record(spec));
  if (!record) return std::optional<SourceResult>();
  // The entry's facts: the spec's, with the recorded source and header digests.
  cache::Facts facts;
  for (const auto& [name, value] : spec.fields())
    if (name != "record") facts.set(name, value);
  facts.set("record", std::string(k_record_source_bundle));
  facts.set("source_xxh3", record->source_xxh3);
  for (const auto& [name, value] : record->headers) facts.set(name, value);
  JC_TRY(facts.validate());
  if (facts.key().to_hex() != record->key)
    return make_error(ErrorCode::invalid_input, "spec record " + spec.key().to_hex() + " of family " + family +
                                                    " names key " + record->key + ", its facts hash to " +
                                                    facts.key().to_hex());
  auto hit = JC_TRY(m_store.get(facts.key(), cache::CountMiss::no));
  if (!hit) return std::optional<SourceResult>();
  auto result = decode(facts, hit->bytes, cache::source_of(hit->tier));
  if (!result) {
    // Not this spec's bundle: say nothing is there (compile() will replace it).
    log_warning("source cache: unusable entry " + facts.key().to_hex() + ": " + result.error().message);
    return std::optional<SourceResult>();
  }
  return std::optional<SourceResult>(std::move(*result));
}

}  // namespace jitcache
