// What the tests of shipping kernels off a machine share (export files, cache_archive.hpp;
// provider directories, cache_provider.hpp): fleet keys, and real variants compiled into
// entries as an export gathers them. Real ones: the readers check each bundle's cubin for
// its embedded facts, which only a real compile produces.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kernel_templates/generator.hpp"
#include "runtime/compile/artifact_bundle.hpp"
#include "runtime/compile/compiler.hpp"
#include "runtime/compile/export_entry.hpp"
#include "runtime/compile/kernel_cache.hpp"

namespace jitcache::testing::shipping {

inline const std::optional<std::string> k_key = std::string(32, 'k') + "-fleet";
inline const std::optional<std::string> k_other_key = std::string(32, 'o') + "-other";
inline const std::optional<std::string> k_no_key;

inline const KernelSpec k_identity{KernelKind::writer, LatentScale::identity, RecordFormat::b12x_432,
                                   Target{"sm_90"}};
inline const KernelSpec k_dynamic{KernelKind::writer, LatentScale::dynamic, RecordFormat::b12x_432, Target{"sm_90"}};

// Each of `specs` compiled by `compiler`, with its facts, as an export gathers it. A spec
// that does not compile fails the test and ends the list.
inline std::vector<ExportEntry> compile_entries(const Compiler& compiler, std::initializer_list<KernelSpec> specs) {
  std::vector<ExportEntry> entries;
  for (const KernelSpec& spec : specs) {
    auto artifact = compiler.compile(generate(spec));
    auto facts = kernel_facts(generate(spec), compiler);
    if (!artifact || !facts) {
      ADD_FAILURE() << spec.label() << ": " << (!artifact ? artifact.error() : facts.error()).to_string();
      break;
    }
    entries.push_back(ExportEntry{.label = spec.label(),
                                  .key = facts->key(),
                                  .facts = *facts,
                                  .bytes = std::make_shared<const cache::Bytes>(serialize_bundle(*artifact)),
                                  .compile_ms = artifact->compile_ms});
  }
  return entries;
}

}  // namespace jitcache::testing::shipping
