// The entry filters of the commands that select local cache entries (inspect, clear,
// remote push): a key prefix and the facts that pick a variant.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "cache/entry.hpp"
#include "kernel_templates/variant_dimensions.hpp"

namespace jitcache::cli {

struct FilterArgs {
  std::string key;
  std::string kernel;
  std::string arch;
  std::string latent_scale;
  std::string rope;

  bool any() const {
    return !key.empty() || !kernel.empty() || !arch.empty() || !latent_scale.empty() || !rope.empty();
  }
  cache::EntryFilter filter() const {
    cache::EntryFilter f;
    if (!key.empty()) f.key_prefix = key;
    if (!kernel.empty()) f.facts.emplace_back(k_kernel_kinds.fact, kernel);
    if (!arch.empty()) f.facts.emplace_back(k_targets.fact, arch);
    if (!latent_scale.empty()) f.facts.emplace_back(k_latent_scales.fact, latent_scale);
    if (!rope.empty()) f.facts.emplace_back(k_record_formats.fact, rope);
    return f;
  }
};

inline void add_filter_options(CLI::App* command, FilterArgs& args) {
  command->add_option("--kernel", args.kernel, "Only entries whose fact 'kernel' is K");
  command->add_option("--arch", args.arch, "Only entries whose fact 'target' is A (exact: sm_120a != sm_120)");
  command->add_option("--latent-scale", args.latent_scale, "Only entries built for identity or dynamic scales")
      ->check(CLI::IsMember(k_latent_scales.names()));
  command->add_option("--rope", args.rope, "Only entries whose fact 'rope' is R")
      ->check(CLI::IsMember(k_record_formats.names()));
}

}  // namespace jitcache::cli
