// The record-format options every command that plans kernels shares: --format NAME (a
// row of k_record_formats), --rope bf16|fp8 (the older spelling of the first two formats)
// and --latent-scale per-token. One place, so warm, audit, export and the kv tools accept
// and refuse the same things.
#pragma once

#include <optional>
#include <string>

#include <CLI/CLI.hpp>

#include "jitcache/error.hpp"
#include "kernel_templates/variant_dimensions.hpp"
#include "kernel_templates/variant_plan.hpp"

namespace jitcache::cli {

struct FormatArgs {
  std::string format;        // empty: from --rope, else b12x-432
  std::string rope;          // empty: not given
  std::string latent_scale;  // empty: per layer (or the format's only mode)

  // The format named by either option.
  RecordFormat record_format() const {
    if (!format.empty()) return *parse_record_format(format);  // CLI11 checked the name
    if (!rope.empty()) return *parse_rope_format(rope);
    return RecordFormat::b12x_432;
  }
  // The latent policy: per-token when asked for or when the format takes nothing else.
  LatentPolicy policy() const {
    return latent_scale == "per-token" ? LatentPolicy::per_token : default_policy(record_format());
  }
  // The name as printed: "b12x-368".
  std::string name() const { return to_string(record_format()); }
};

inline std::string format_help() {
  return k_record_formats.alternatives([](const RecordFormatRow& row) {
    return std::string(row.name) + " (" + std::to_string(row.record_bytes) + " bytes: " + row.reader + ")";
  });
}

// Adds --format, --rope and, with `latent`, --latent-scale to `cmd`.
inline void add_format_options(CLI::App* cmd, FormatArgs& args, bool latent = true) {
  std::vector<std::string> names = k_record_formats.names();
  for (const RecordFormatRow& row : k_record_formats.rows)
    if (row.rope_alias != nullptr) names.emplace_back(row.rope_alias);
  CLI::Option* format = cmd->add_option("--format", args.format, "KV record format: " + format_help())
                            ->check(CLI::IsMember(names));
  std::vector<std::string> ropes;
  for (const RecordFormatRow& row : k_record_formats.rows)
    if (row.rope_alias != nullptr) ropes.emplace_back(row.rope_alias);
  cmd->add_option("--rope", args.rope, "RoPE layout, the older name of --format b12x-432 (bf16) / b12x-368 (fp8)")
      ->check(CLI::IsMember(ropes))
      ->excludes(format);
  if (latent)
    cmd->add_option("--latent-scale", args.latent_scale,
                    "per-token: every layer per-token (each token's scale in its record; the checkpoint's "
                    "per-layer scales are not applied). Default: each layer's own scale")
        ->check(CLI::IsMember({"per-token"}));
}

}  // namespace jitcache::cli
