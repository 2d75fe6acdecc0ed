// `jitcache inspect | stats | clear | verify | gc`: look into and maintain the kernel cache.
// Parsing and printing only; the store (cache/store.hpp) does the work.
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/metrics.hpp"
#include "cache/report.hpp"
#include "cache/store.hpp"
#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/audit/audit.hpp"
#include "runtime/audit/remote_audit.hpp"
#include "runtime/compile/kernel_request.hpp"
#include "runtime/compile/open_kernel_cache.hpp"
#include "support/text.hpp"
#include "tools/cache_cli.hpp"
#include "tools/cli.hpp"
#include "tools/entry_filter.hpp"
#include "tools/remote_cli.hpp"

namespace jitcache::cli {
namespace {

using cache::EntryFilter;
using cache::EntryInfo;
using cache::Store;

// The facts shown as columns; the store itself knows no fact by meaning. The format
// column follows them (format_or_dash).
constexpr std::string_view k_column_facts[] = {k_kernel_kinds.fact, k_targets.fact, k_latent_scales.fact};
constexpr std::size_t k_key_prefix_chars = 16;

CLI::Validator hex_prefix_validator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const bool hex = !text.empty() && text.size() <= cache::k_hash_hex_chars &&
                         std::all_of(text.begin(), text.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
        return hex ? std::string() : "KEY must be 1 to 32 hex digits (a key or a unique prefix of one)";
      },
      "HEX");
}

CLI::Validator size_validator() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        auto size = cache::parse_size(text);
        return size ? std::string() : size.error().message;
      },
      "SIZE");
}

// Opens the kernel cache as every command and the runtime do; prints the error and sets
// the exit code on failure.
std::optional<OpenedKernelCache> open_cache(const Context& context, int& exit_code,
                                            cache::StoreOptions options = {}) {
  auto opened = open_command_cache(context.global, RemoteUse::off, std::move(options));  // this machine's cache only
  if (!opened) {
    // An unusable cache directory is an environment problem, whatever the cause.
    exit_code = k_exit_usage;
    std::fprintf(stderr, "jitcache: error: %s\n", opened.error().to_string().c_str());
    return std::nullopt;
  }
  return std::move(*opened);
}

// The store alone, for the commands that compile nothing.
std::unique_ptr<Store> open_store(const Context& context, int& exit_code, cache::StoreOptions options = {}) {
  auto opened = open_cache(context, exit_code, std::move(options));
  return opened ? std::move(opened->store) : nullptr;
}

std::string fact_or_dash(const EntryInfo& e, std::string_view name) {
  auto value = e.facts.get(name);
  return value && !value->empty() ? std::string(*value) : "-";
}

// The record format by name, from either spelling of the key (rope=bf16|fp8 for b12x-432
// and b12x-368, format=<name> for the others).
std::string format_or_dash(const EntryInfo& e) {
  if (auto rope = e.facts.get(k_legacy_format_fact))
    if (auto format = parse_rope_format(*rope)) return to_string(*format);
  return fact_or_dash(e, k_record_formats.fact);
}

void print_table(const std::vector<EntryInfo>& entries) {
  std::vector<std::vector<std::string>> rows;
  rows.push_back({"KEY", "KERNEL", "TARGET", "LATENT_SCALE", "FORMAT", "SIZE", "CREATED", "LAST USED", "HITS"});
  for (const EntryInfo& e : entries) {
    std::vector<std::string> row{e.key.to_hex().substr(0, k_key_prefix_chars)};
    for (std::string_view name : k_column_facts) row.push_back(fact_or_dash(e, name));
    row.push_back(format_or_dash(e));
    // A kernel from outside has no kernel fact of jitcache's own: its family names it, and
    // a spec record (what lookups by spec read) says so.
    if (is_request_facts(e.facts))
      row[1] = fact_or_dash(e, "family") +
               (e.facts.get("record") == k_record_spec_index ? " (spec record)" : ":" + fact_or_dash(e, "entry"));
    row.push_back(cache::format_size(e.size));
    row.push_back(cache::format_time(e.created_ms, cache::TimeFormat::human));
    row.push_back(cache::format_time(e.last_used_ms, cache::TimeFormat::human));
    row.push_back(std::to_string(e.hits));
    rows.push_back(std::move(row));
  }
  std::vector<std::size_t> widths(rows[0].size(), 0);
  for (const auto& row : rows)
    for (std::size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  for (const auto& row : rows) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(widths[i] - row[i].size() + 2, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

void print_entry(const Store& store, const EntryInfo& e) {
  auto row = [](const char* name, const std::string& value) { std::printf("%-12s %s\n", name, value.c_str()); };
  row("key", e.key.to_hex());
  row("digest", e.digest.to_hex());
  row("blob", store.blob_path(e.digest).string());
  row("size", cache::format_size(e.size) + " (" + std::to_string(e.size) + " bytes)");
  row("created", cache::format_time(e.created_ms, cache::TimeFormat::human) + " UTC");
  row("last used", cache::format_time(e.last_used_ms, cache::TimeFormat::human) + " UTC");
  row("hits", std::to_string(e.hits));
  char ms[32];
  std::snprintf(ms, sizeof ms, "%.1f ms", e.compile_ms);
  row("compile", ms);
  row("key schema", std::to_string(e.key_schema));
  std::printf("facts\n");
  if (e.facts.empty()) std::printf("  (unreadable: %s)\n", e.facts_json.c_str());
  std::size_t width = 0;
  for (const auto& [name, value] : e.facts.fields()) width = std::max(width, name.size());
  for (const auto& [name, value] : e.facts.fields())
    std::printf("  %-*s  %s\n", static_cast<int>(width), name.c_str(), value.c_str());
}

struct InspectArgs {
  FilterArgs filter;
  bool json = false;
};

int run_inspect(const Context& context, const InspectArgs& args) {
  int exit_code = k_exit_ok;
  auto store = open_store(context, exit_code);
  if (!store) return exit_code;
  auto entries = store->list(args.filter.filter());
  if (!entries) return report(entries.error());
  if (!args.filter.key.empty() && entries->size() != 1) {
    const std::string what = entries->empty() ? "no entry matches" : std::to_string(entries->size()) + " entries match";
    std::fprintf(stderr, "jitcache: error: %s: %s key prefix %s%s\n", store->index_path().c_str(), what.c_str(),
                 args.filter.key.c_str(), entries->empty() ? "" : "; give more digits");
    return k_exit_findings;
  }
  if (args.json) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const EntryInfo& e : *entries) list.push_back(cache::to_json(e));
    std::cout << nlohmann::ordered_json{{"cache_dir", store->root().string()}, {"entries", list}}.dump(2) << "\n";
    return k_exit_ok;
  }
  if (!args.filter.key.empty()) {
    print_entry(*store, entries->front());
    return k_exit_ok;
  }
  if (entries->empty()) {
    std::printf("no entries%s in %s\n", args.filter.any() ? " match" : "", store->root().c_str());
    return k_exit_ok;
  }
  print_table(*entries);
  return k_exit_ok;
}

// `stats --format`: what the cache's figures are printed as.
constexpr const char* k_stats_formats[] = {"text", "json", "prometheus"};
constexpr const char* k_stats_format_choices = "text, json or prometheus";

CLI::Validator stats_format_validator() {
  return CLI::Validator(
      [](std::string& given) -> std::string {
        for (const char* format : k_stats_formats)
          if (given == format) return {};
        return "expected " + std::string(k_stats_format_choices) + ", got '" + text::escape_control(given) + "'";
      },
      "FORMAT");
}

struct StatsArgs {
  bool json = false;
  std::string format = "text";
};

int run_stats(const Context& context, StatsArgs args) {
  if (args.json) {
    if (args.format != "text" && args.format != "json") {
      std::fprintf(stderr, "jitcache: error: stats: --json is --format json; it cannot be combined with --format %s\n",
                   args.format.c_str());
      return k_exit_usage;
    }
    args.format = "json";
  }
  int exit_code = k_exit_ok;
  auto store = open_store(context, exit_code);
  if (!store) return exit_code;
  auto stats = store->stats();
  if (!stats) return report(stats.error());
  if (args.format == "prometheus") {
    // The index's counters: every process that used this directory (scope="cache").
    const std::string dir = store->root().string();
    std::vector<cache::MetricFamily> families = cache::counter_metrics(stats->totals, cache::CounterScope::cache, dir);
    for (cache::MetricFamily& gauge : cache::size_metrics(*stats, dir)) families.push_back(std::move(gauge));
    std::cout << cache::prometheus_text(families);
    return k_exit_ok;
  }
  if (args.format == "json") {
    nlohmann::ordered_json doc{{"cache_dir", store->root().string()}};
    doc.update(cache::to_json(*stats));
    std::cout << doc.dump(2) << "\n";
    return k_exit_ok;
  }
  auto row = [](const char* name, const std::string& value) { std::printf("%-16s %s\n", name, value.c_str()); };
  row("cache directory", store->root().string());
  row("entries", std::to_string(stats->entries));
  row("size", cache::format_size(stats->bytes) + " of " + cache::format_size(stats->max_bytes));
  for (const auto& [name, value] : cache::counter_text_rows(stats->totals)) row(name.c_str(), value);
  return k_exit_ok;
}

struct ClearArgs {
  FilterArgs filter;
  bool all = false;
  bool stale = false;
  bool dry_run = false;
  bool remote = false;
  bool foreign = false;
  bool json = false;
};

// --stale: exactly what `jitcache audit` flags (stale identity kernels, legacy keys, fact
// mismatches, corrupt entries, rows without blobs, orphan blobs).
int run_clear_stale(const Context& context, const ClearArgs& args) {
  int exit_code = k_exit_ok;
  auto opened = open_cache(context, exit_code);
  if (!opened) return exit_code;
  Store& store = *opened->store;
  auto audit = audit_cache(store, *opened->compiler);
  if (!audit) return report(audit.error());
  auto lines = clear_flagged(store, *audit, args.dry_run ? cache::DryRun::yes : cache::DryRun::no);
  if (!lines) return report(lines.error());
  for (const std::string& line : *lines) std::printf("%s\n", line.c_str());
  std::printf("%s %zu flagged item(s) of %zu entries\n", args.dry_run ? "would remove" : "removed", lines->size(),
              audit->entries);
  return k_exit_ok;
}

// "it held 3 entries" / "its entries could not be counted".
std::string held_entries(const cache::IndexRecovery& recovery) {
  return recovery.entries ? "it held " + std::to_string(*recovery.entries) + " entries"
                          : "its entries could not be counted";
}

// `clear --all` succeeds on any index: one that cannot be used is moved to quarantine.
int run_clear_all(const Context& context) {
  int exit_code = k_exit_ok;
  cache::StoreOptions options;
  options.damaged_index = cache::DamagedIndex::quarantine;
  auto store = open_store(context, exit_code, std::move(options));
  if (!store) return exit_code;
  auto cleared = store->clear_all();
  if (!cleared) return report(cleared.error());
  for (const cache::IndexRecovery& q : store->index_recoveries())
    std::printf("index %s was not usable (%s); moved to quarantine: %s (%s)\n", store->index_path().c_str(),
                q.problem.c_str(), q.moved_to.c_str(), held_entries(q).c_str());
  std::uint64_t bytes = 0;
  for (const EntryInfo& e : cleared->removed) bytes += e.size;
  std::printf("removed %zu entries (%s)", cleared->removed.size(), cache::format_size(bytes).c_str());
  if (cleared->blob_files > 0)
    std::printf(" and %llu blob files of the quarantined index",
                static_cast<unsigned long long>(cleared->blob_files));
  std::printf("\n");
  return k_exit_ok;
}

// --remote: the shared tier only; this machine's cache is left as it is. Both modes audit
// first: only names of the prefix's grammar are touched, and foreign values only with
// --foreign.
int run_clear_remote(const Context& context, const ClearArgs& args) {
  if (int(args.all) + int(args.stale) != 1 || args.filter.any()) {
    std::fprintf(stderr, "jitcache: error: clear --remote: give exactly one of --all or --stale\n");
    return k_exit_usage;
  }
  auto tier = open_remote_tier(context.global, "clear --remote");
  if (!tier) return k_exit_usage;
  const cache::DryRun dry_run = args.dry_run ? cache::DryRun::yes : cache::DryRun::no;
  const ForeignValues foreign = args.foreign ? ForeignValues::remove : ForeignValues::keep;
  const char* verb = args.dry_run ? "would remove" : "removed";
  auto audit = audit_remote(*tier);
  if (!audit) return report(audit.error());
  auto cleared = args.stale ? clear_remote_flagged(*tier, *audit, dry_run, foreign)
                            : clear_remote_all(*tier, *audit, dry_run, foreign);
  if (!cleared) return report(cleared.error());
  auto finding_json = [](const RemoteFinding& f) {
    return nlohmann::ordered_json{
        {"name", f.name}, {"kind", to_string(f.kind)}, {"reason", f.reason}, {"explanation", f.explanation}};
  };
  if (args.json) {
    nlohmann::ordered_json removed = nlohmann::ordered_json::array(), kept = nlohmann::ordered_json::array();
    if (args.stale)
      for (const RemoteFinding& f : cleared->removed_findings) removed.push_back(finding_json(f));
    else
      for (const std::string& name : cleared->removed) removed.push_back({{"name", name}});
    for (const RemoteFinding& f : cleared->kept) kept.push_back(finding_json(f));
    std::cout << nlohmann::ordered_json{{"remote", tier->client().display()},
                                        {"prefix", tier->options().prefix},
                                        {"mode", args.stale ? "stale" : "all"},
                                        {"dry_run", args.dry_run},
                                        {"foreign", args.foreign},
                                        {"removed", removed},
                                        {"kept", kept},
                                        {"other_names", audit->other_names}}
                     .dump(2)
              << "\n";
    return k_exit_ok;
  }
  if (args.stale) {
    for (const RemoteFinding& f : cleared->removed_findings)
      std::printf("%s %s %s (%s, %s): %s\n", verb, to_string(f.kind), f.name.c_str(), f.kernel.c_str(),
                  f.target.c_str(), f.explanation.c_str());
  } else if (args.dry_run) {
    for (const std::string& name : cleared->removed) std::printf("would remove %s\n", name.c_str());
  }
  for (const RemoteFinding& f : cleared->kept)
    std::printf("kept %s %s: %s\n", to_string(f.kind), f.name.c_str(), f.explanation.c_str());
  if (args.stale)
    std::printf("%s %zu flagged name(s) of %zu remote entries from %s", verb, cleared->removed_findings.size(),
                audit->entries, tier->client().display().c_str());
  else
    std::printf("%s %zu name(s) under %s from %s", verb, cleared->removed.size(), tier->options().prefix.c_str(),
                tier->client().display().c_str());
  if (!cleared->kept.empty()) std::printf("; kept %zu foreign (--foreign removes them)", cleared->kept.size());
  if (audit->other_names > 0)
    std::printf("; left %zu name(s) of other prefixes or software alone", audit->other_names);
  std::printf("\n");
  return k_exit_ok;
}

int run_clear(const Context& context, const ClearArgs& args) {
  if (args.remote) return run_clear_remote(context, args);
  if (args.json || args.foreign) {
    std::fprintf(stderr, "jitcache: error: clear: %s is for clear --remote\n", args.json ? "--json" : "--foreign");
    return k_exit_usage;
  }
  if (int(args.all) + int(args.stale) + int(args.filter.any()) != 1) {
    std::fprintf(stderr, "jitcache: error: clear: give exactly one of --all, --stale or filters (KEY, --kernel, "
                         "--arch, --latent-scale, --format)\n");
    return k_exit_usage;
  }
  if (args.all && !args.dry_run) return run_clear_all(context);
  if (args.stale) return run_clear_stale(context, args);
  int exit_code = k_exit_ok;
  auto store = open_store(context, exit_code);
  if (!store) return exit_code;
  auto removed = store->remove(args.all ? EntryFilter{} : args.filter.filter(),
                               args.dry_run ? cache::DryRun::yes : cache::DryRun::no);
  if (!removed) return report(removed.error());
  std::uint64_t bytes = 0;
  for (const EntryInfo& e : *removed) bytes += e.size;
  if (args.dry_run) {
    if (!removed->empty()) print_table(*removed);
    std::printf("would remove %zu entries (%s)\n", removed->size(), cache::format_size(bytes).c_str());
  } else {
    std::printf("removed %zu entries (%s)\n", removed->size(), cache::format_size(bytes).c_str());
  }
  return k_exit_ok;
}

struct VerifyArgs {
  bool json = false;
};

int run_verify(const Context& context, const VerifyArgs& args) {
  int exit_code = k_exit_ok;
  auto store = open_store(context, exit_code);
  if (!store) return exit_code;
  auto verified = store->verify();
  if (!verified) return report(verified.error());
  const int code = verified->clean() ? k_exit_ok : k_exit_findings;
  if (args.json) {
    nlohmann::ordered_json doc{{"cache_dir", store->root().string()}};
    doc.update(cache::to_json(*verified));
    std::cout << doc.dump(2) << "\n";
    return code;
  }
  for (const cache::VerifyFinding& f : verified->bad)
    std::printf("bad  %s  %s (quarantined)\n", f.key.to_hex().substr(0, k_key_prefix_chars).c_str(), f.problem.c_str());
  for (const std::string& problem : verified->integrity_problems) std::printf("index  %s\n", problem.c_str());
  for (const cache::IndexRecovery& q : verified->index_quarantined)
    std::printf("index  %s was not usable (%s); moved to quarantine: %s (%s); %s\n",
                store->index_path().c_str(), q.problem.c_str(), q.moved_to.c_str(), held_entries(q).c_str(),
                cache::k_after_index_quarantine);
  const char* index_state = !verified->index_quarantined.empty()    ? ", index QUARANTINED"
                            : !verified->integrity_problems.empty() ? ", index DAMAGED"
                                                                    : ", index ok";
  std::printf("checked %llu entries: %zu bad%s", static_cast<unsigned long long>(verified->checked),
              verified->bad.size(), index_state);
  if (verified->orphan_blobs > 0)
    std::printf("; %llu orphan blob files (run jitcache gc)", static_cast<unsigned long long>(verified->orphan_blobs));
  std::printf("\n");
  return code;
}

struct GcArgs {
  std::string max_size;
};

int run_gc(const Context& context, const GcArgs& args) {
  int exit_code = k_exit_ok;
  auto opened = open_cache(context, exit_code);
  if (!opened) return exit_code;
  Store* store = opened->store.get();
  // First what can never be served: entries keyed with a compiler build nothing here
  // vouches for (superseded ones among them), whatever the size.
  auto unservable = remove_unservable(*store, *opened->compiler, cache::DryRun::no);
  if (!unservable) return report(unservable.error());
  for (const std::string& line : *unservable) std::printf("%s\n", line.c_str());
  cache::GcOptions options;
  if (!args.max_size.empty()) {
    auto size = cache::parse_size(args.max_size);
    if (!size) return report(size.error());
    options.max_bytes = *size;
  }
  auto collected = store->gc(options);
  if (!collected) return report(collected.error());
  std::printf("evicted %llu entries (%s); removed %llu orphan blobs, %llu temporary files, %llu lock files, "
              "%llu quarantined files; cache now %s of %s\n",
              static_cast<unsigned long long>(collected->evicted_entries), cache::format_size(collected->evicted_bytes).c_str(),
              static_cast<unsigned long long>(collected->orphan_blobs), static_cast<unsigned long long>(collected->temp_files),
              static_cast<unsigned long long>(collected->lock_files),
              static_cast<unsigned long long>(collected->quarantine_files), cache::format_size(collected->bytes_after).c_str(),
              cache::format_size(collected->max_bytes).c_str());
  return k_exit_ok;
}

void register_cache(CLI::App& root, Context& context) {
  auto inspect_args = std::make_shared<InspectArgs>();
  CLI::App* inspect = root.add_subcommand("inspect", "List cache entries, or show every fact of one");
  inspect->add_option("KEY", inspect_args->filter.key, "A key or a unique prefix of one: show all its facts")
      ->check(hex_prefix_validator());
  add_filter_options(inspect, inspect_args->filter);
  add_json_flag(inspect, inspect_args->json);
  context.bind(inspect, [&context, inspect_args] { return run_inspect(context, *inspect_args); });

  auto stats_args = std::make_shared<StatsArgs>();
  CLI::App* stats = root.add_subcommand("stats", "Entries, size, hits by tier, misses, compiles, time spent and saved");
  stats->add_flag("--json", stats_args->json, "One JSON document on stdout (--format json)");
  stats->add_option("--format", stats_args->format,
                    "Output: text (default), json (as --json) or prometheus (Prometheus' text exposition format, "
                    "the cache's cumulative counters: docs/metrics.md)")
      ->check(stats_format_validator());
  context.bind(stats, [&context, stats_args] { return run_stats(context, *stats_args); });

  auto clear_args = std::make_shared<ClearArgs>();
  CLI::App* clear =
      root.add_subcommand("clear", "Remove every entry (--all), what the audit flags (--stale) or matching entries; "
                                 "with --remote, from the shared remote tier");
  clear->add_option("KEY", clear_args->filter.key, "A key or a key prefix")->check(hex_prefix_validator());
  clear->add_flag("--all", clear_args->all, "Remove every entry");
  clear->add_flag("--stale", clear_args->stale, "Remove exactly what `jitcache audit` flags");
  add_filter_options(clear, clear_args->filter);
  clear->add_flag("--dry-run", clear_args->dry_run, "Show what would be removed; remove nothing");
  clear->add_flag("--remote", clear_args->remote,
                  "Clear the shared remote tier instead (with --all: every name of jitcache's prefix, leases "
                  "included; with --stale: what `jitcache audit --remote` flags); this machine's cache is untouched; "
                  "names of other prefixes are never touched");
  clear->add_flag("--foreign", clear_args->foreign,
                  "With --remote: also remove values this fleet cannot prove are its own (another fleet key's or "
                  "format's under the same prefix); kept otherwise");
  clear->add_flag("--json", clear_args->json, "One JSON document on stdout (with --remote)");
  context.bind(clear, [&context, clear_args] { return run_clear(context, *clear_args); });

  auto verify_args = std::make_shared<VerifyArgs>();
  CLI::App* verify = root.add_subcommand(
      "verify", "Re-hash every blob and check the index; quarantine bad entries (exit 1 if any)");
  add_json_flag(verify, verify_args->json);
  context.bind(verify, [&context, verify_args] { return run_verify(context, *verify_args); });

  auto gc_args = std::make_shared<GcArgs>();
  CLI::App* gc = root.add_subcommand(
      "gc", "Evict least recently used entries down to the size cap; remove leftovers of crashed writers");
  gc->add_option("--max-size", gc_args->max_size, "Size cap such as 500M or 2G (default 2G)")->check(size_validator());
  context.bind(gc, [&context, gc_args] { return run_gc(context, *gc_args); });
}

const Registrar k_registrar(20, register_cache);

}  // namespace
}  // namespace jitcache::cli
