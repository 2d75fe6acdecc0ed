// `jitcache export` and `jitcache import`: the variants a checkpoint needs, carried in one
// signed file to machines that reach no remote cache (air-gapped images), and checked
// whole there before anything is published (runtime/compile/cache_archive.hpp).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/files.hpp"
#include "cache/report.hpp"
#include "cache/size.hpp"
#include "jitcache/scales.hpp"
#include "kernel_templates/variant_dimensions.hpp"
#include "kernel_templates/variant_plan.hpp"
#include "remote/remote_config.hpp"
#include "runtime/compile/cache_archive.hpp"
#include "runtime/compile/open_kernel_cache.hpp"
#include "runtime/scales/checkpoint_files.hpp"
#include "support/env.hpp"
#include "support/regular_file.hpp"
#include "tools/checkpoint_plan.hpp"
#include "tools/cache_cli.hpp"
#include "tools/cli.hpp"
#include "tools/format_options.hpp"
#include "tools/subcommand.hpp"

namespace jitcache::cli {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

struct ExportArgs : CheckpointArgs {
  std::string out;
  unsigned jobs = 0;
  bool json = false;
};

struct ImportArgs {
  std::string file;
  bool verify_only = false;
  bool json = false;
};

std::string key_file_name() { return std::string(env::jitcache_remote_key_file.name); }

int run_export(const ExportArgs& args, const GlobalOptions& global) {
  const auto started = Clock::now();
  // The output rule of every command, before anything is read: not a special file, none of
  // the files the export reads (the checkpoint's config.json and scales, the override, the
  // fleet key), nor the sidecar the checkpoint pins by sha256.
  std::optional<std::filesystem::path> override_file;
  if (!args.scales.empty()) override_file = args.scales;
  const scales::CheckpointFiles files = scales::checkpoint_files(args.checkpoint, override_file, EnvOverride::read);
  std::vector<std::filesystem::path> inputs = files.inputs;
  for (auto& path : environment_inputs()) inputs.push_back(std::move(path));
  if (auto ok = check_output_target(args.out, inputs, files.pinned); !ok) return report_data(ok.error());
  auto key = remote::load_fleet_key();
  if (!key) return report(key.error());
  auto planned = plan_checkpoint(args);
  if (!planned) return report_data(planned.error());
  const auto& targets = planned->targets;
  const auto& specs = planned->specs;

  auto opened = open_command_cache(global);
  if (!opened) return report(opened.error(), k_exit_usage);  // an unusable cache directory: environment
  auto entries = gather_export_entries(*opened->kernels, *opened->compiler, specs, args.jobs,
                                       gather_progress(args.json));
  if (!entries) return report(entries.error());

  ArchiveInfo info;
  info.producer = std::string("jitcache ") + JITCACHE_VERSION_STRING;
  info.created = cache::format_time(cache::unix_now_ms(), cache::TimeFormat::iso);
  info.checkpoint = checkpoint_name(args.checkpoint);
  info.rope = args.format.name();  // the manifest's "rope" names the record format
  info.targets = targets;
  if (!*key)
    std::fprintf(stderr,
                 "jitcache: warning: no fleet key (%s): %s is not signed; an importer can check that it is "
                 "intact, not who wrote it, and one with a key configured refuses it\n",
                 key_file_name().c_str(), args.out.c_str());
  auto written = write_archive(args.out, info, *entries, *key);
  if (!written) return report(written.error());

  std::size_t compiled = 0;
  for (const ExportEntry& e : *entries) compiled += e.compiled_now ? 1 : 0;
  const double wall_ms = ms_since(started);
  if (args.json) {
    nlohmann::ordered_json variants = nlohmann::ordered_json::array();
    for (const ExportEntry& e : *entries)
      variants.push_back({{"label", e.label},
                          {"key", e.key.to_hex()},
                          {"digest", cache::BlobDigest::of(*e.bytes).to_hex()},
                          {"size", e.bytes->size()},
                          {"compiled", e.compiled_now}});
    const nlohmann::ordered_json out = {{"out", args.out},
                                        {"checkpoint", info.checkpoint},
                                        {"targets", targets},
                                        {"format", args.format.name()},
                                        {"entries", entries->size()},
                                        {"compiled", compiled},
                                        {"cached", entries->size() - compiled},
                                        {"bytes", *written},
                                        {"signed", key->has_value()},
                                        {"wall_ms", wall_ms},
                                        {"variants", variants}};
    std::printf("%s\n", out.dump(2).c_str());
    return k_exit_ok;
  }
  std::string target_list;
  for (const std::string& t : targets) target_list += (target_list.empty() ? "" : ", ") + t;
  std::printf("exported %zu variants of %s for %s (%s) to %s: %s, %s\n", entries->size(),
              info.checkpoint.c_str(), target_list.c_str(), args.format.name().c_str(), args.out.c_str(),
              cache::format_size(*written).c_str(), *key ? "signed with the fleet key" : "unsigned");
  std::printf("compiled %zu, already cached %zu, wall time %.1f ms\n", compiled, entries->size() - compiled, wall_ms);
  return k_exit_ok;
}

// What importing `file` says about its signature; empty: nothing (it is verified).
std::string signature_warning(ArchiveSignature signature, const std::string& file) {
  switch (signature) {
    case ArchiveSignature::verified:
      return {};
    case ArchiveSignature::absent:
      return file + " is not signed: it is intact, but nothing says who wrote it (configure the fleet key, " +
             key_file_name() + ", to accept signed files only)";
    case ArchiveSignature::unchecked:
      return file + " is signed, but no fleet key is configured here (" + key_file_name() +
             "): the signature was not checked";
  }
  return {};
}

int run_import(const ImportArgs& args, const GlobalOptions& global) {
  const auto started = Clock::now();
  auto key = remote::load_fleet_key();
  if (!key) return report(key.error());
  // Everything is checked before the cache is even opened: a refused file touches nothing.
  auto archive = read_archive(args.file, *key);
  if (!archive) return report(archive.error());
  if (const std::string warning = signature_warning(archive->signature, args.file); !warning.empty())
    std::fprintf(stderr, "jitcache: warning: %s\n", warning.c_str());

  std::optional<ImportReport> imported;
  std::filesystem::path cache_dir;
  std::unique_ptr<Compiler> compiler;  // this machine's NVRTC, for its fingerprint
  if (!args.verify_only) {
    auto opened = open_command_cache(global, RemoteUse::off);  // an import fills this machine's cache only
    if (!opened) return report(opened.error(), k_exit_usage);
    cache_dir = opened->dir;
    auto done = import_archive(*opened->store, *archive);
    if (!done) {
      report(done.error());
      return k_exit_usage;
    }
    imported = std::move(*done);
    compiler = std::move(opened->compiler);  // remembers its fingerprint in the cache
  } else {
    compiler = make_nvrtc_compiler();
  }
  // Entries keyed for another NVRTC build import fine and are never hit here: say so.
  const auto local_fingerprint = compiler->fingerprint();
  std::vector<const ArchiveItem*> other_build;
  if (local_fingerprint) {
    other_build = keyed_for_other_build(*archive, *local_fingerprint);
  } else {
    std::fprintf(stderr,
                 "jitcache: warning: cannot tell which entries are keyed for this machine's NVRTC build: %s\n",
                 local_fingerprint.error().to_string().c_str());
  }
  const double wall_ms = ms_since(started);

  auto status_of = [&](const ArchiveItem& item) -> std::string {
    if (!imported) return "verified";
    for (const ArchiveItem* a : imported->added)
      if (a == &item) return "added";
    return "present";
  };
  auto is_other_build = [&](const ArchiveItem& item) {
    return std::find(other_build.begin(), other_build.end(), &item) != other_build.end();
  };
  if (args.json) {
    nlohmann::ordered_json list = nlohmann::ordered_json::array();
    for (const ArchiveItem& item : archive->items)
      list.push_back({{"label", item.label},
                      {"key", item.key.to_hex()},
                      {"size", item.size},
                      {"status", status_of(item)},
                      {"other_build", is_other_build(item)}});
    nlohmann::ordered_json out = {{"file", args.file},
                                  {"format_version", archive->version},
                                  {"producer", archive->info.producer},
                                  {"created", archive->info.created},
                                  {"checkpoint", archive->info.checkpoint},
                                  {"targets", archive->info.targets},
                                  {"rope", archive->info.rope},
                                  {"signature", to_string(archive->signature)},
                                  {"verify_only", args.verify_only},
                                  {"entries", archive->items.size()},
                                  {"added", imported ? imported->added.size() : 0},
                                  {"already_present", imported ? imported->present.size() : 0},
                                  {"other_build", local_fingerprint ? nlohmann::ordered_json(other_build.size())
                                                                    : nlohmann::ordered_json(nullptr)},
                                  {"other_build_fingerprints", other_build_fingerprints(other_build)},
                                  {"local_fingerprint", local_fingerprint ? nlohmann::ordered_json(*local_fingerprint)
                                                                          : nlohmann::ordered_json(nullptr)},
                                  {"cache_dir", cache_dir.string()},
                                  {"wall_ms", wall_ms},
                                  {"items", list}};
    std::printf("%s\n", out.dump(2).c_str());
    return k_exit_ok;
  }
  std::printf("%s: %zu entries of %s for", args.file.c_str(), archive->items.size(),
              archive->info.checkpoint.c_str());
  for (const std::string& t : archive->info.targets) std::printf(" %s", t.c_str());
  std::printf(" verified (signature: %s, written by %s on %s)\n", to_string(archive->signature),
              archive->info.producer.c_str(), archive->info.created.c_str());
  auto say_other_build = [&] {
    if (other_build.empty()) return;
    std::string theirs;
    for (const std::string& f : other_build_fingerprints(other_build)) theirs += (theirs.empty() ? "" : ", ") + f;
    std::printf("%zu of them %s keyed for another NVRTC build (fingerprint %s; this machine's is %s) and will not "
                "be hit here: compile them here (jitcache warm) or import a file exported with this build\n",
                other_build.size(), other_build.size() == 1 ? "is" : "are", theirs.c_str(),
                local_fingerprint->c_str());
  };
  if (!imported) {
    say_other_build();
    std::printf("nothing imported (--verify-only), wall time %.1f ms\n", wall_ms);
    return k_exit_ok;
  }
  for (const ArchiveItem& item : archive->items)
    std::printf("  %-8s %s  %s%s\n", status_of(item).c_str(), item.key.to_hex().c_str(), item.label.c_str(),
                is_other_build(item) ? "  (another NVRTC build)" : "");
  std::printf("added %zu, already present %zu, into %s, wall time %.1f ms\n", imported->added.size(),
              imported->present.size(), cache_dir.string().c_str(), wall_ms);
  say_other_build();
  return k_exit_ok;
}

void register_export(CLI::App& root, Context& context) {
  auto [cmd, args] = add_subcommand(root, context, "export",
                                    "Write the variants a checkpoint needs into one signed file", run_export);
  add_checkpoint_options(cmd, args);
  cmd->add_option("--out", args.out, "The export file to write")->required();
  add_jobs_option(cmd, args.jobs);
  add_json_flag(cmd, args.json);

  auto [imp, import_args] = add_subcommand(
      root, context, "import", "Check an export file whole, then add its entries to the cache", run_import);
  imp->add_option("FILE", import_args.file, "The export file")->required();
  imp->add_flag("--verify-only", import_args.verify_only, "Check everything, publish nothing");
  add_json_flag(imp, import_args.json);
}

const Registrar k_registrar(25, register_export);

}  // namespace
}  // namespace jitcache::cli
