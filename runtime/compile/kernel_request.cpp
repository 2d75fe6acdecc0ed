#include "runtime/compile/kernel_request.hpp"

#include <algorithm>
#include <memory>
#include <mutex>
#include <set>

#include "cache/hash.hpp"
#include "jitcache/log.hpp"
#include "runtime/compile/compiler.hpp"
#include "runtime/compile/fingerprint_memo.hpp"
#include "runtime/compile/nvjitlink_library.hpp"
#include "runtime/compile/nvvm_library.hpp"
#include "runtime/compile/toolkit_search.hpp"
#include "runtime/compile/toolkit_trust.hpp"
#include "support/env.hpp"

namespace jitcache {
namespace {

bool valid_name(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' ||
           c == '-';
  });
}

std::string describe_domain(const FactDomain& domain) {
  if (domain.any()) return "any non-empty string";
  std::string out = "one of {";
  for (std::size_t i = 0; i < domain.allowed.size(); ++i) out += (i ? ", " : "") + domain.allowed[i];
  return out + "}";
}

std::string hash_hex(std::string_view text) { return cache::BlobDigest::of(text).to_hex(); }

// Fact names allow [A-Za-z0-9_.-]; include names may hold '/'.
std::string header_fact_name(std::string_view include_name) {
  std::string name = "header.";
  for (char c : include_name) name += (c == '/') ? '.' : c;
  return name;
}

// The facts a library knows before it generates any source: the spec key's, less its record.
Result<cache::Facts> spec_level_facts(const KernelRequest& request, const ToolFacts& tools) {
  cache::Facts facts;
  facts.set("facts_schema", std::to_string(k_request_facts_schema));
  if (request.family.empty()) return make_error(ErrorCode::invalid_argument, "kernel request: no family");
  facts.set("family", request.family);
  for (const auto& [name, value] : request.spec) facts.set("spec." + name, value);
  facts.set("kind", to_string(request.kind));
  if (request.target.empty())
    return make_error(ErrorCode::invalid_argument, "kernel request of family " + request.family + ": no target");
  facts.set("target", request.target);
  for (const std::string& tool : tools_for(request.kind)) {
    auto it = tools.find(tool);
    if (it == tools.end() || it->second.version.empty() || it->second.fingerprint.empty())
      return make_error(ErrorCode::internal, "kernel request of family " + request.family + ": no version or "
                                             "fingerprint for tool " + tool + " (a " +
                                             to_string(request.kind) + " request needs it)");
    facts.set("tool." + tool + ".version", it->second.version);
    facts.set("tool." + tool + ".fingerprint", it->second.fingerprint);
  }
  return facts;
}

// The memo's name for the file a toolkit library would be loaded from, when a path
// candidate names one (the first that exists and may be used, as the loader takes the
// first that loads): the file's device, inode, size and times, which change whenever its
// bytes do, so that the entry's fingerprint (a digest of those bytes) is computed once. A
// library found only by its soname cannot be told without loading it.
std::optional<std::string> library_identity(const std::string& tool, const std::filesystem::path& file) {
  if (const auto identity = file_stat_identity(file)) return tool + " content " + *identity;
  return std::nullopt;
}

// libNVVM's or nvJitLink's version and fingerprint, by loading the library: `file` is the
// file it was loaded from.
Result<ToolFact> loaded_toolkit_fact(bool nvvm, std::filesystem::path& file) {
  if (nvvm) {
    const NvvmLibrary* lib = JC_TRY(nvvm_library());
    file = lib->library.file;
    return ToolFact{lib->version(), JC_TRY(nvvm_fingerprint())};
  }
  const NvJitLinkLibrary* lib = JC_TRY(nvjitlink_library());
  file = lib->library.file;
  return ToolFact{lib->version(), JC_TRY(nvjitlink_fingerprint())};
}

// libNVVM's or nvJitLink's version and fingerprint: from the memo when it knows the file,
// else by loading the library (remembered in the memo when its file is the one a later
// process will find first). The memo also keeps the build this cache was last keyed with:
// when the library is found nowhere, that keys lookups (a miss fails at its compile, which
// needs the library), unless the tool's variable names a library (never stood in for).
Result<ToolFact> toolkit_fact(const std::string& tool, const std::filesystem::path& memo) {
  const bool nvvm = tool == "libnvvm";
  const ToolkitTool which = nvvm ? ToolkitTool::nvvm : ToolkitTool::nvjitlink;
  MemoContents known;
  if (!memo.empty()) known = read_memo_contents(memo);
  const auto last = known.last_keyed.find(tool);
  const auto keep_last = [&](const ToolFact& fact) {
    const MemoValue value{fact.version, fact.fingerprint};
    if (memo.empty() || (last != known.last_keyed.end() && last->second == value)) return;
    if (auto written = write_last_keyed(memo, tool, value); !written)
      log_debug("fingerprint memo not written: " + written.error().message);
  };
  std::optional<std::string> identity;
  const auto located = locate_toolkit_file(which);
  if (!memo.empty() && located) {
    identity = library_identity(tool, located->path);
    if (identity)
      if (const auto entry = known.entries.find(*identity);
          entry != known.entries.end() && !entry->second.version.empty()) {
        const ToolFact fact{entry->second.version, entry->second.fingerprint};
        keep_last(fact);
        return fact;
      }
  }
  std::filesystem::path file;
  auto fact = loaded_toolkit_fact(nvvm, file);
  if (!fact) {
    if (fact.error().code != ErrorCode::unavailable || last == known.last_keyed.end() ||
        env::get(nvvm ? env::jitcache_nvvm : env::jitcache_nvjitlink))
      return fact;
    // Once per tool and process: every kind that needs the tool asks.
    static std::once_flag warned[2];
    std::call_once(warned[nvvm ? 0 : 1],
                   [&] { log_warning(stand_in_warning(which, last->second.version, last->second.fingerprint)); });
    return ToolFact{last->second.version, last->second.fingerprint};
  }
  if (identity && file == located->path) {
    if (auto written = write_memo(memo, *identity, MemoValue{fact->version, fact->fingerprint}, tool); !written)
      log_debug("fingerprint memo not written: " + written.error().message);
  } else {
    keep_last(*fact);
  }
  return fact;
}

}  // namespace

bool operator==(const FactDomain& a, const FactDomain& b) {
  auto x = a.allowed, y = b.allowed;
  std::sort(x.begin(), x.end());
  std::sort(y.begin(), y.end());
  return x == y;
}

Status check_schema(const SpecSchema& schema) {
  if (!valid_name(schema.family))
    return make_error(ErrorCode::invalid_argument,
                      "spec schema: family name '" + schema.family + "' is not 1 to 64 of [A-Za-z0-9_.-]");
  for (const auto& [name, domain] : schema.facts) {
    if (!valid_name(name))
      return make_error(ErrorCode::invalid_argument, "spec schema of family " + schema.family + ": fact name '" +
                                                         name + "' is not 1 to 64 of [A-Za-z0-9_.-]");
    std::set<std::string> seen;
    for (const auto& value : domain.allowed) {
      if (value.empty())
        return make_error(ErrorCode::invalid_argument,
                          "spec schema of family " + schema.family + ": fact " + name + " allows an empty value");
      if (!seen.insert(value).second)
        return make_error(ErrorCode::invalid_argument, "spec schema of family " + schema.family + ": fact " + name +
                                                           " lists '" + value + "' twice");
    }
  }
  return {};
}

Status validate_spec(const SpecSchema& schema, const std::map<std::string, std::string>& spec) {
  for (const auto& [name, domain] : schema.facts) {
    auto it = spec.find(name);
    if (it == spec.end())
      return make_error(ErrorCode::invalid_argument, "spec of family " + schema.family + " is missing fact " +
                                                         name + " (" + describe_domain(domain) + ")");
    const std::string& value = it->second;
    const bool ok = domain.any() ? !value.empty()
                                 : std::find(domain.allowed.begin(), domain.allowed.end(), value) !=
                                       domain.allowed.end();
    if (!ok)
      return make_error(ErrorCode::invalid_argument, "spec of family " + schema.family + ": fact " + name + "='" +
                                                         value + "' is out of range (" + describe_domain(domain) +
                                                         ")");
  }
  for (const auto& [name, value] : spec) {
    if (schema.facts.contains(name)) continue;
    std::string known;
    for (const auto& [n, d] : schema.facts) known += (known.empty() ? "" : ", ") + n;
    return make_error(ErrorCode::invalid_argument, "spec of family " + schema.family + " has unknown fact " + name +
                                                       " (the family declares: " +
                                                       (known.empty() ? "none" : known) + ")");
  }
  return {};
}

Status SpecRegistry::add(SpecSchema schema) {
  JC_TRY(check_schema(schema));
  std::lock_guard lock(m_mutex);
  auto [it, inserted] = m_schemas.try_emplace(schema.family, std::make_shared<const SpecSchema>(schema));
  if (!inserted && !(*it->second == schema))
    return make_error(ErrorCode::invalid_argument,
                      "spec schema of family " + schema.family + " is already registered with different facts");
  return {};
}

std::shared_ptr<const SpecSchema> SpecRegistry::find(const std::string& family) const {
  std::lock_guard lock(m_mutex);
  auto it = m_schemas.find(family);
  return it == m_schemas.end() ? nullptr : it->second;
}

Result<std::shared_ptr<const SpecSchema>> SpecRegistry::validate(const std::string& family,
                                          const std::map<std::string, std::string>& spec) const {
  auto schema = find(family);
  if (!schema)
    return make_error(ErrorCode::not_found, "kernel family '" + family +
                                                "' is not declared (declare its spec schema first: "
                                                "Runtime::declare_family, jitcache_declare_family)");
  JC_TRY(validate_spec(*schema, spec));
  return schema;
}

Status SpecRegistry::validate(const KernelRequest& request) const {
  const auto schema = JC_TRY(validate(request.family, request.spec));
  if (schema->kind != request.kind)
    return make_error(ErrorCode::invalid_argument, "kernel family " + request.family + " is declared with " +
                                                       to_string(schema->kind) + " sources; this request is " +
                                                       to_string(request.kind));
  return {};
}

SpecRegistry& SpecRegistry::global() {
  static SpecRegistry registry;
  return registry;
}

std::string describe_spec(const std::map<std::string, std::string>& spec) {
  std::string out;
  for (const auto& [name, value] : spec) out += (out.empty() ? "" : ", ") + name + "=" + value;
  return "{" + out + "}";
}

SourceInput source_input(const KernelRequest& request, std::string name) {
  return SourceInput{request.kind,  request.text,    request.headers, request.entry,
                     request.target, request.options, std::move(name)};
}

std::vector<std::string> tools_for(SourceKind kind) {
  switch (kind) {
    case SourceKind::cuda: return {"nvrtc"};
    case SourceKind::nvvm: return {"libnvvm", "nvjitlink"};
    case SourceKind::ptx: return {"nvjitlink"};
  }
  return {};
}

Result<ToolFacts> probe_tools(SourceKind kind, const Compiler* nvrtc, const std::filesystem::path& memo) {
  ToolFacts tools;
  for (const std::string& tool : tools_for(kind)) {
    if (tool == "nvrtc") {
      if (nvrtc == nullptr) {
        // One compiler object per process: its fingerprint is computed once.
        static const std::unique_ptr<Compiler> process_nvrtc = make_nvrtc_compiler();
        nvrtc = process_nvrtc.get();
      }
      tools[tool] = ToolFact{nvrtc->version(), JC_TRY(nvrtc->fingerprint())};
    } else {
      tools[tool] = JC_TRY(toolkit_fact(tool, memo));
    }
  }
  return tools;
}

std::string normalized_options(const std::vector<std::string>& options) {
  std::string out;
  for (const auto& option : options) {
    const auto first = option.find_first_not_of(" \t\r\n");
    if (first == std::string::npos) continue;
    const auto last = option.find_last_not_of(" \t\r\n");
    out += (out.empty() ? "" : "\n") + option.substr(first, last - first + 1);
  }
  return out;
}

bool is_request_facts(const cache::Facts& facts) {
  const auto record = facts.get("record");
  return record && (*record == k_record_source_bundle || *record == k_record_spec_index);
}

Result<cache::Facts> request_facts(const KernelRequest& request, const ToolFacts& tools) {
  cache::Facts facts = JC_TRY(spec_level_facts(request, tools));
  facts.set("record", std::string(k_record_source_bundle));
  if (request.entry.empty())
    return make_error(ErrorCode::invalid_argument, "kernel request of family " + request.family + ": no entry");
  facts.set("entry", request.entry);
  facts.set("options", normalized_options(request.options));
  facts.set("source_xxh3", hash_hex(request.text));
  for (const auto& [name, text] : request.headers) facts.set(header_fact_name(name), hash_hex(text));
  JC_TRY(facts.validate());
  return facts;
}

Result<cache::Facts> spec_facts(const KernelRequest& request, const ToolFacts& tools) {
  cache::Facts facts = JC_TRY(spec_level_facts(request, tools));
  facts.set("record", std::string(k_record_spec_index));
  JC_TRY(facts.validate());
  return facts;
}

Result<cache::Facts> spec_facts_of(const cache::Facts& bundle_facts) {
  if (bundle_facts.get("record") != k_record_source_bundle)
    return make_error(ErrorCode::invalid_input, "not the facts of a source bundle (record=" +
                                                    std::string(bundle_facts.get("record").value_or("(absent)")) + ")");
  cache::Facts facts;
  for (const auto& [name, value] : bundle_facts.fields())
    if (name != "source_xxh3" && name != "entry" && name != "options" && !name.starts_with("header."))
      facts.set(name, value);
  facts.set("record", std::string(k_record_spec_index));
  JC_TRY(facts.validate());
  return facts;
}

}  // namespace jitcache
