// The entry filters of the commands that select local cache entries (inspect, clear,
// remote push): a key prefix and the facts that pick a variant.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "cache/entry.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "kernel_templates/variant_dimensions.hpp"
#include "tools/format_options.hpp"

namespace jitcache::cli {

struct FilterArgs {
  std::string key;
  std::string kernel;
  std::string arch;
  std::string latent_scale;
  FormatArgs format;  // --format NAME or --rope bf16|fp8; neither: any format

  bool format_given() const { return !format.format.empty() || !format.rope.empty(); }
  bool any() const {
    return !key.empty() || !kernel.empty() || !arch.empty() || !latent_scale.empty() || format_given();
  }
  cache::EntryFilter filter() const {
    cache::EntryFilter f;
    if (!key.empty()) f.key_prefix = key;
    if (!kernel.empty()) f.facts.emplace_back(k_kernel_kinds.fact, kernel);
    if (!arch.empty()) f.facts.emplace_back(k_targets.fact, arch);
    if (!latent_scale.empty()) f.facts.emplace_back(k_latent_scales.fact, latent_scale);
    // Keys spell b12x-432 and b12x-368 as rope=bf16|fp8 and the others as format=<name>;
    // format_fact gives the one spelling a key of that format has, whichever name was typed.
    if (format_given()) f.facts.push_back(format_fact(format.record_format()));
    return f;
  }
};

// A target the kernels are built for (kernel_templates/variant_dimensions.hpp), as warm and
// compile take it: a filter on any other can only match nothing, so it is a usage error.
inline CLI::Validator supported_target() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        auto target = parse_target(text);
        return target ? std::string() : target.error().message;
      },
      "TARGET");
}

inline void add_filter_options(CLI::App* command, FilterArgs& args) {
  command->add_option("--kernel", args.kernel, "Only entries whose fact 'kernel' is K");
  command->add_option("--arch", args.arch, "Only entries whose fact 'target' is A (exact: sm_120a != sm_120)")
      ->check(supported_target());
  command->add_option("--latent-scale", args.latent_scale, "Only entries built for this latent-scale mode: " +
                                                               k_latent_scales.joined(", "))
      ->check(CLI::IsMember(k_latent_scales.names()));
  add_format_options(command, args.format, /*latent=*/false);
  // The help of --format/--rope as filters, not as the format to build.
  command->get_option("--format")->description("Only entries of this record format: " + format_help());
  command->get_option("--rope")->description("Only entries of b12x-432 (bf16) or b12x-368 (fp8): the older "
                                             "name of --format");
}

}  // namespace jitcache::cli
