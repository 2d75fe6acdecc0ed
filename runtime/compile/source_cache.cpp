#include "runtime/compile/source_cache.hpp"

#include <set>

#include <nlohmann/json.hpp>

#include "jitcache/log.hpp"
#include "runtime/compile/artifact_bundle.hpp"
#include "runtime/compile/cubin_elf.hpp"
#include "runtime/compile/kernel_cache.hpp"

namespace jitcache {
namespace {

// The header.<name> facts (the headers' digests) of a request's or a bundle's facts.
std::map<std::string, std::string> header_digests(const cache::Facts& facts) {
  std::map<std::string, std::string> headers;
  for (const auto& [name, value] : facts.fields())
    if (name.starts_with("header.")) headers[name] = value;
  return headers;
}

std::string label_of(const KernelRequest& request) {
  return request.family + describe_spec(request.spec) + " " + request.entry + " for " + request.target;
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

// Normalised options (one per line) as "[a, b]" for a one-line message.
std::string options_list(std::string_view normalized) {
  std::string out = "[";
  for (char c : normalized) out += c == '\n' ? std::string(", ") : std::string(1, c);
  return out + "]";
}

// A decoded, checked entry kept beside its bundle in the store's memory tier.
struct DecodedSource final : cache::Decoded {
  explicit DecodedSource(SourceResult r) : result(std::move(r)) {}
  SourceResult result;
};

// A parsed spec record kept beside its JSON in the memory tier: a warm lookup parses nothing.
struct DecodedRecord final : cache::Decoded {
  explicit DecodedRecord(SpecRecord r) : record(std::move(r)) {}
  SpecRecord record;
};

}  // namespace

std::vector<RecordDifference> record_differences(const SpecRecord& record, const cache::Facts& facts) {
  std::vector<RecordDifference> out;
  auto compare = [&](const std::string& what, const std::string& recorded, const std::string& found) {
    if (recorded != found) out.push_back(RecordDifference{what, recorded, found});
  };
  auto fact = [&](std::string_view name) { return std::string(facts.get(name).value_or("(absent)")); };
  compare("source_xxh3", record.source_xxh3, fact("source_xxh3"));
  compare("entry", record.entry, fact("entry"));
  compare("options", options_list(record.options), options_list(fact("options")));
  const auto headers = header_digests(facts);
  std::set<std::string> names;
  for (const auto& [name, digest] : record.headers) names.insert(name);
  for (const auto& [name, digest] : headers) names.insert(name);
  for (const auto& name : names) {
    const auto was = record.headers.find(name);
    const auto now = headers.find(name);
    compare(name, was == record.headers.end() ? "(absent)" : was->second,
            now == headers.end() ? "(absent)" : now->second);
  }
  return out;
}

Result<SpecRecord> parse_spec_record(std::span<const std::byte> bytes) {
  const auto json = nlohmann::json::parse(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                                          nullptr, false);
  const std::string what = "spec record";
  if (!json.is_object()) return make_error(ErrorCode::invalid_input, what + ": not a JSON object");
  // Field by field, never value(): a foreign writer's types must not throw.
  if (!json.contains("format") || !json["format"].is_number_integer() ||
      json["format"].get<std::int64_t>() != k_spec_record_format)
    return make_error(ErrorCode::invalid_input,
                      what + ": field 'format' is not " + std::to_string(k_spec_record_format));
  SpecRecord record;
  for (auto [name, field] : {std::pair{"key", &record.key}, std::pair{"source_xxh3", &record.source_xxh3},
                             std::pair{"entry", &record.entry}, std::pair{"options", &record.options}}) {
    if (!json.contains(name) || !json[name].is_string())
      return make_error(ErrorCode::invalid_input, what + ": field '" + name + "' is missing or not a string");
    *field = json[name].get<std::string>();
  }
  if (record.key.size() != 32 || record.entry.empty())
    return make_error(ErrorCode::invalid_input, what + ": field 'key' or 'entry' is malformed");
  if (!json.contains("headers") || !json["headers"].is_object())
    return make_error(ErrorCode::invalid_input, what + ": field 'headers' is missing or not an object");
  for (const auto& [name, value] : json["headers"].items()) {
    if (!name.starts_with("header.") || !value.is_string())
      return make_error(ErrorCode::invalid_input, what + ": field 'headers." + name + "' is malformed");
    record.headers[name] = value.get<std::string>();
  }
  return record;
}

Status check_source_content(const cache::Facts& facts, std::span<const std::byte> bytes) {
  const auto record = facts.get("record");
  if (record == k_record_source_bundle) {
    const CompiledArtifact artifact = JC_TRY(parse_source_bundle(bytes, BundleText::skip));
    return check_source_artifact(facts, artifact, "source bundle");
  }
  if (record == k_record_spec_index) {
    JC_TRY(parse_spec_record(bytes));
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
  if (!m_options.tools) m_options.tools = [](SourceKind kind) { return probe_tools(kind); };
}

const SpecRegistry& SourceCache::registry() const {
  return m_options.registry ? *m_options.registry : SpecRegistry::global();
}

Result<ToolFacts> SourceCache::tools(SourceKind kind) const {
  {
    std::lock_guard lock(m_tools_mutex);
    if (auto it = m_tools.find(kind); it != m_tools.end()) return it->second;
  }
  ToolFacts tools = JC_TRY(m_options.tools(kind));
  std::lock_guard lock(m_tools_mutex);
  return m_tools.try_emplace(kind, std::move(tools)).first->second;
}

Result<std::optional<SpecRecord>> SourceCache::read_record(const cache::Facts& spec) {
  auto hit = JC_TRY(m_store.get(spec.key(), cache::CountMiss::no));
  if (!hit) return std::optional<SpecRecord>();
  if (auto done = std::dynamic_pointer_cast<const DecodedRecord>(hit->decoded))
    return std::optional<SpecRecord>(done->record);
  auto record = parse_spec_record(std::span<const std::byte>(*hit->bytes));
  if (!record) {
    // Verified against its digest but not a spec record (a foreign or buggy writer): it
    // cannot vouch for anything, so drop it; the next compile records the spec again.
    log_warning("source cache: dropping unusable spec record " + spec.key().to_hex() + ": " + record.error().message);
    if (m_store.mode() == cache::StoreMode::read_write) {
      cache::EntryFilter only;
      only.key_prefix = spec.key().to_hex();
      JC_TRY(m_store.remove(only, cache::DryRun::no));
    }
    return std::optional<SpecRecord>();
  }
  m_store.attach(spec.key(), hit->bytes, std::make_shared<const DecodedRecord>(*record));
  return std::optional<SpecRecord>(std::move(*record));
}

Status SourceCache::check_record(const KernelRequest& request, const cache::Facts& facts,
                                 const SpecRecord& record) const {
  const auto differences = record_differences(record, facts);
  if (differences.empty()) return {};
  std::string message = "the spec of kernel family " + request.family + " is incomplete: spec " +
                        describe_spec(request.spec) + " (" + to_string(request.kind) + " for " + request.target +
                        ") does not determine its kernel: ";
  for (std::size_t i = 0; i < differences.size(); ++i) {
    const RecordDifference& d = differences[i];
    message += (i ? "; " : "") + d.what + " " + d.recorded + " was cached, this request has " + d.found;
  }
  message += ". Some input that changes the code is not a spec fact; the cached entry is not served.";
  return make_error(ErrorCode::invalid_input, message);
}

namespace {

// A spec record's JSON for the entry of `facts`.
std::string record_text(const cache::Facts& facts) {
  nlohmann::json json;
  json["format"] = k_spec_record_format;
  json["key"] = facts.key().to_hex();
  json["source_xxh3"] = std::string(*facts.get("source_xxh3"));
  json["headers"] = header_digests(facts);
  json["entry"] = std::string(*facts.get("entry"));
  json["options"] = std::string(*facts.get("options"));
  return json.dump();
}

}  // namespace

void SourceCache::write_record(const cache::Facts& spec, const cache::Facts& facts) {
  if (m_store.mode() != cache::StoreMode::read_write) return;
  const std::string text = record_text(facts);
  if (auto put = m_store.put(spec.key(), spec, as_bytes(text), 0); !put)
    log_warning("source cache: could not record spec " + spec.key().to_hex() + ": " + put.error().message);
}

std::optional<SpecRecord> SourceCache::record_first(const cache::Facts& spec, const cache::Facts& facts) {
  if (m_store.mode() != cache::StoreMode::read_write) return std::nullopt;
  const std::string text = record_text(facts);
  auto first = m_store.put_if_absent(spec.key(), spec, as_bytes(text), 0);
  if (!first) {
    log_warning("source cache: could not record spec " + spec.key().to_hex() + ": " + first.error().message);
    return std::nullopt;
  }
  if (first->ours) return std::nullopt;
  auto record = parse_spec_record(std::span<const std::byte>(*first->bytes));
  if (!record) {
    // Verified but no record (a foreign or buggy writer): it vouches for nothing, as in
    // read_record; this request's record replaces it.
    log_warning("source cache: replacing unusable spec record " + spec.key().to_hex() + ": " +
                record.error().message);
    write_record(spec, facts);
    return std::nullopt;
  }
  m_store.attach(spec.key(), first->bytes, std::make_shared<const DecodedRecord>(*record));
  return std::move(*record);
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
  std::optional<SpecRecord> now = record;
  if (!now) {
    // The first record of a spec is written create-only, in every tier that decides
    // (Store::put_if_absent): when another request recorded the spec while this one
    // compiled (both found no record on a cold cache, in one directory or on two nodes of
    // a fleet), exactly one record wins, and a request of another source learns it here
    // and reports the incomplete spec. Its own bundle stays stored under its own key;
    // the spec names the winner's.
    now = record_first(spec, facts);
    if (now) JC_TRY(check_record(request, facts, *now));
  }
  // A record that agrees with the request on everything but names another key was damaged
  // (the key is a function of what it compared): it is rewritten.
  if (now && now->key != facts.key().to_hex()) write_record(spec, facts);
  fetched->verified = now.has_value();
  return fetched;
}

Result<SourceResult> SourceCache::fetch(const KernelRequest& request, const cache::Facts& facts) {
  const SourceCompileFn& compile_fn = m_options.compile;
  const cache::Producer producer = [&]() -> Result<cache::Produced> {
    const SourceOutput out = JC_TRY(compile_fn(source_input(request, request.family + "." + request.entry)));
    if (m_options.loaded_tools) {
      const ToolFacts loaded = JC_TRY(m_options.loaded_tools(request.kind));
      for (const auto& [tool, fact] : loaded)
        if (facts.get("tool." + tool + ".fingerprint") != fact.fingerprint)
          return make_error(ErrorCode::unavailable,
                            "the " + tool + " this process loaded to compile " + label_of(request) + " (" +
                                fact.version + ", fingerprint " + fact.fingerprint + ") is not the one its key was "
                                "made with (fingerprint " +
                                std::string(facts.get("tool." + tool + ".fingerprint").value_or("(absent)")) +
                                "): was the toolkit replaced while this process ran? Nothing was stored");
    }
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
  cache::Fetched fetched;
  if (m_options.no_compile == NoCompile::yes) {
    auto hit = JC_TRY(m_store.get(facts.key()));
    if (!hit)
      return std::unexpected(no_compile_miss(
          "kernel " + label_of(request) + " (family " + request.family + ", spec " + describe_spec(request.spec) +
              ", kind " + to_string(request.kind) + ", target " + request.target + ", key " + facts.key().to_hex() +
              ") is in no tier",
          m_store));
    fetched = cache::Fetched{std::move(hit->bytes), cache::source_of(hit->tier), std::move(hit->decoded)};
  } else {
    fetched = JC_TRY(m_store.get_or_create(facts.key(), facts, producer, label_of(request)));
  }
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
  result.entry = artifact->entry;
  // check_source_artifact held the bundle to the key's facts, whose kind request_facts wrote.
  result.kind = parse_source_kind(facts.get("kind").value_or("")).value_or(SourceKind::cuda);
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
                                                        const std::string& target) {
  const auto schema = JC_TRY(registry().validate(family, spec_values));
  KernelRequest request;
  request.family = family;
  request.spec = spec_values;
  request.kind = schema->kind;
  request.target = target;
  const ToolFacts tools = JC_TRY(this->tools(schema->kind));
  const cache::Facts spec = JC_TRY(spec_facts(request, tools));
  const auto record = JC_TRY(read_record(spec));
  if (!record) return std::optional<SourceResult>();
  // The entry's facts: the spec's, with what the record says the spec was built from.
  cache::Facts facts;
  for (const auto& [name, value] : spec.fields())
    if (name != "record") facts.set(name, value);
  facts.set("record", std::string(k_record_source_bundle));
  facts.set("entry", record->entry);
  facts.set("options", record->options);
  facts.set("source_xxh3", record->source_xxh3);
  for (const auto& [name, value] : record->headers) facts.set(name, value);
  if (auto valid = facts.validate(); !valid || facts.key().to_hex() != record->key) {
    // Not this spec's record (a damaged or foreign value that parsed): it names nothing usable.
    log_warning("source cache: spec record " + spec.key().to_hex() + " of family " + family + " names key " +
                record->key + ", but its facts hash to " + (valid ? facts.key().to_hex() : valid.error().message) +
                "; treating the spec as uncached (the next compile rewrites the record)");
    return std::optional<SourceResult>();
  }
  auto hit = JC_TRY(m_store.get(facts.key(), cache::CountMiss::no));
  if (!hit) return std::optional<SourceResult>();
  if (auto done = std::dynamic_pointer_cast<const DecodedSource>(hit->decoded)) {
    SourceResult result = done->result;
    result.source = cache::source_of(hit->tier);
    result.from_cache = true;
    return std::optional<SourceResult>(std::move(result));
  }
  auto result = decode(facts, hit->bytes, cache::source_of(hit->tier));
  if (result) m_store.attach(facts.key(), hit->bytes, std::make_shared<const DecodedSource>(*result));
  if (!result) {
    // Not this spec's bundle: say nothing is there (compile() will replace it).
    log_warning("source cache: unusable entry " + facts.key().to_hex() + ": " + result.error().message);
    return std::optional<SourceResult>();
  }
  return std::optional<SourceResult>(std::move(*result));
}

}  // namespace jitcache
