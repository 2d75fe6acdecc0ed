#include "runtime/compile/explain.hpp"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/compile/kernel_request.hpp"

namespace jitcache {
namespace {

std::string spelled(const std::optional<std::string>& value) { return value ? *value : "(none)"; }

std::optional<std::string> fact_of(const cache::Facts& facts, std::string_view name) {
  auto value = facts.get(name);
  return value ? std::optional<std::string>(std::string(*value)) : std::nullopt;
}

// The facts that say which kernel an entry is: a lookup is compared only with entries
// that agree on those it has.
constexpr std::string_view k_identity_facts[] = {"kernel_family", "kernel", "record", "family"};

// The facts of jitcache's own kernels that change with its source: another jitcache
// version, or an edited kernel header.
bool is_source_fact(std::string_view name, bool own_kernel) {
  return own_kernel && (name.starts_with("header.") || name == "source_xxh3" || name == "generator_version");
}

// The record format: format=<name>, or rope=bf16|fp8 for the first two, and its size.
bool is_format_fact(std::string_view name) { return name == "format" || name == "rope" || name == "record_bytes"; }

// A format as one value: "format=b12x-304", "rope=bf16".
std::optional<std::string> format_value(const cache::Facts& facts) {
  if (auto f = facts.get("format")) return "format=" + std::string(*f);
  if (auto r = facts.get("rope")) return "rope=" + std::string(*r);
  return std::nullopt;
}

// Whether the compiler options differ only where they name the target (--gpu-architecture=).
bool same_but_target(const cache::Facts& cached, const cache::Facts& wanted) {
  const auto c_target = cached.get("target"), w_target = wanted.get("target");
  const auto c_options = cached.get("options"), w_options = wanted.get("options");
  if (!c_target || !w_target || !c_options || !w_options || *c_target == *w_target) return false;
  std::string replaced(*c_options);
  const std::string from(*c_target), to(*w_target);
  for (std::size_t at = 0; (at = replaced.find(from, at)) != std::string::npos; at += to.size())
    replaced.replace(at, from.size(), to);
  return replaced == *w_options;
}

}  // namespace

const char* coverage_tier_name(cache::Tier tier) {
  switch (tier) {
    case cache::Tier::memory: return "memory";
    case cache::Tier::disk: return "local";
    case cache::Tier::provider: return "provider";
    case cache::Tier::remote: return "remote";
  }
  return "?";
}

std::string describe_difference(const std::string& fact, const std::optional<std::string>& cached,
                                const std::optional<std::string>& wanted, const std::string& subject) {
  const std::string has = "cache has " + spelled(cached);
  auto tool_of = [&](std::string_view suffix) {  // tool.<name>.<suffix> -> <name>
    return fact.substr(5, fact.size() - 5 - suffix.size());
  };
  if (fact == "compiler_fingerprint") return "compiler build differs: " + has + ", this node has " + spelled(wanted);
  if (fact == "compiler_version") return "compiler version differs: " + has + ", this node has " + spelled(wanted);
  if (fact == "compiler") return "compiler differs: " + has + ", this node has " + spelled(wanted);
  if (fact.starts_with("tool.") && fact.ends_with(".fingerprint"))
    return tool_of(".fingerprint") + " build differs: " + has + ", this node has " + spelled(wanted);
  if (fact.starts_with("tool.") && fact.ends_with(".version"))
    return tool_of(".version") + " version differs: " + has + ", this node has " + spelled(wanted);
  if (fact == "options") return "compiler options differ: " + has + ", this node has " + spelled(wanted);
  if (fact.starts_with("env."))
    return "environment variable " + fact.substr(4) + ": " + has + ", this process has " + spelled(wanted);
  if (fact == "source")
    return "kernel source differs (another jitcache version, or an edited kernel header): " + has + ", " + subject +
           " " + spelled(wanted);
  if (fact == "format") return "record format: " + has + ", " + subject + " " + spelled(wanted);
  if (fact == "bundle_format" || fact == "facts_schema")
    return "cache entry layout differs (another jitcache version): " + fact + ": " + has + ", this jitcache has " +
           spelled(wanted);
  if (fact.starts_with("spec.")) return "spec fact " + fact.substr(5) + ": " + has + ", " + subject + " " + spelled(wanted);
  if (fact == "source_xxh3") return "source differs: " + has + ", " + subject + " " + spelled(wanted);
  return fact + ": " + has + ", " + subject + " " + spelled(wanted);
}

std::vector<FactDifference> fact_differences(const cache::Facts& cached, const cache::Facts& wanted,
                                             const std::string& subject) {
  const bool own_kernel = !wanted.get("record");
  std::set<std::string, std::less<>> names;
  for (const auto& [name, value] : cached.fields()) names.insert(name);
  for (const auto& [name, value] : wanted.fields()) names.insert(name);
  std::vector<FactDifference> out;
  bool source_differs = false, format_differs = false;
  for (const std::string& name : names) {
    const auto c = fact_of(cached, name);
    const auto w = fact_of(wanted, name);
    if (c == w) continue;
    if (is_source_fact(name, own_kernel)) {
      source_differs = true;
    } else if (own_kernel && is_format_fact(name)) {
      format_differs = true;
    } else if (name == "options" && same_but_target(cached, wanted)) {
      continue;  // the target's flag: the target's difference says it
    } else {
      out.push_back(FactDifference{name, c, w, describe_difference(name, c, w, subject)});
    }
  }
  // The generated source (and the headers it includes) follows the variant's dimensions:
  // another latent scale, format or target changes it too, and is the difference to name.
  // With the dimensions equal, only jitcache itself changes it.
  if (source_differs) {
    bool dimension_differs = format_differs;
    for (std::string_view name : {"kernel", "latent_scale", "target"})
      dimension_differs = dimension_differs || fact_of(cached, name) != fact_of(wanted, name);
    source_differs = !dimension_differs;
  }
  if (format_differs) {
    const auto c = format_value(cached), w = format_value(wanted);
    out.push_back(FactDifference{"format", c, w, describe_difference("format", c, w, subject)});
  }
  if (source_differs) {
    const auto c = fact_of(cached, "source_xxh3"), w = fact_of(wanted, "source_xxh3");
    out.push_back(FactDifference{"source", c, w, describe_difference("source", c, w, subject)});
  }
  return out;
}

Result<KeyExplanation> explain_key(cache::Store& store, const cache::Facts& wanted, std::string what,
                                   const ExplainOptions& options) {
  JC_TRY(wanted.validate());
  KeyExplanation out;
  out.what = std::move(what);
  out.key = wanted.key().to_hex();
  for (const auto& [name, value] : wanted.fields()) out.facts.emplace_back(name, value);
  out.found = JC_TRY(store.locate(wanted.key()));
  if (out.found) return out;
  for (cache::StorageTier* tier : store.tier_objects()) {
    if (tier->kind() == cache::Tier::memory) continue;  // this process's entries: nothing another one could use
    TierNearest near;
    near.tier = coverage_tier_name(tier->kind());
    near.name = tier->name();
    auto listed = tier->list_entries();
    if (!listed) {
      near.error = listed.error().to_string();
    } else if (!*listed) {
      near.listable = false;
    } else {
      struct Ranked {
        std::size_t count;
        NearEntry entry;
      };
      std::vector<Ranked> ranked;
      for (const cache::ListedEntry& entry : **listed) {
        const bool same_kernel = std::all_of(std::begin(k_identity_facts), std::end(k_identity_facts),
                                             [&](std::string_view name) {
                                               const auto w = wanted.get(name);
                                               return !w || entry.facts.get(name) == w;
                                             });
        if (!same_kernel) continue;
        NearEntry ne{entry.key.to_hex(), fact_differences(entry.facts, wanted, options.subject)};
        ranked.push_back(Ranked{ne.differences.size(), std::move(ne)});
      }
      near.candidates = ranked.size();
      std::sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
        return a.count != b.count ? a.count < b.count : a.entry.key < b.entry.key;
      });
      for (std::size_t i = 0; i < ranked.size() && i < options.nearest; ++i)
        near.nearest.push_back(std::move(ranked[i].entry));
    }
    out.tiers.push_back(std::move(near));
  }
  return out;
}

Result<KeyExplanation> explain_spec(cache::Store& store, const Compiler& nvrtc, const std::filesystem::path& memo,
                                    const std::string& family, const std::map<std::string, std::string>& spec,
                                    SourceKind kind, const std::string& target, std::size_t nearest) {
  KernelRequest request;
  request.family = family;
  request.spec = spec;
  request.kind = kind;
  request.target = target;
  const ToolFacts tools = JC_TRY(probe_tools(kind, &nvrtc, memo));
  const cache::Facts facts = JC_TRY(spec_facts(request, tools));
  ExplainOptions options;
  options.subject = "this lookup needs";
  options.nearest = nearest;
  return explain_key(store, facts,
                     "family " + family + " spec " + describe_spec(spec) + " (" + to_string(kind) + ") for " + target,
                     options);
}

nlohmann::json to_json(const KeyExplanation& e) {
  nlohmann::json facts = nlohmann::json::object();
  for (const auto& [name, value] : e.facts) facts[name] = value;
  nlohmann::json tiers = nlohmann::json::array();
  auto optional_text = [](const std::optional<std::string>& v) { return v ? nlohmann::json(*v) : nlohmann::json(nullptr); };
  for (const TierNearest& t : e.tiers) {
    nlohmann::json nearest = nlohmann::json::array();
    for (const NearEntry& n : t.nearest) {
      nlohmann::json differences = nlohmann::json::array();
      for (const FactDifference& d : n.differences)
        differences.push_back(
            {{"fact", d.fact}, {"cached", optional_text(d.cached)}, {"wanted", optional_text(d.wanted)}, {"text", d.text}});
      nearest.push_back({{"key", n.key}, {"differences", differences}});
    }
    tiers.push_back({{"tier", t.tier},
                     {"name", t.name},
                     {"listable", t.listable},
                     {"error", optional_text(t.error)},
                     {"candidates", t.candidates},
                     {"nearest", nearest}});
  }
  return {{"what", e.what},
          {"key", e.key},
          {"facts", facts},
          {"found", e.found.has_value()},
          {"tier", e.found ? nlohmann::json(coverage_tier_name(e.found->kind)) : nlohmann::json(nullptr)},
          {"tier_name", e.found ? nlohmann::json(e.found->name) : nlohmann::json(nullptr)},
          {"tiers", tiers}};
}

std::string to_text(const KeyExplanation& e) {
  std::string text = e.what + "\n  key " + e.key + "\n  facts:\n";
  for (const auto& [name, value] : e.facts) text += "    " + name + "=" + value + "\n";
  if (e.found) {
    text += std::string("  found in tier ") + coverage_tier_name(e.found->kind) + " (" + e.found->name + ")";
    return text;
  }
  text += "  in no tier";
  for (const TierNearest& t : e.tiers) {
    text += "\n  " + t.tier + " (" + t.name + "): ";
    if (t.error) {
      text += "could not list its entries: " + *t.error;
    } else if (!t.listable) {
      text += "cannot list its entries";
    } else if (t.nearest.empty()) {
      text += "no entry of this kernel";
    } else {
      text += std::to_string(t.candidates) + " entr" + (t.candidates == 1 ? "y" : "ies") + " of this kernel; nearest:";
      for (const NearEntry& n : t.nearest) {
        text += "\n    " + n.key + ": " + std::to_string(n.differences.size()) + " difference" +
                (n.differences.size() == 1 ? "" : "s");
        for (const FactDifference& d : n.differences) text += "\n      " + d.text;
      }
    }
  }
  return text;
}

}  // namespace jitcache
