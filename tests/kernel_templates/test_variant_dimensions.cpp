// The variant dimension tables (kernel_templates/variant_dimensions.hpp) and what is
// derived from them: names, parsing, record sizes, targets, a spec's facts both ways.
#include <set>
#include <string>

#include "kernel_templates/generator.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "kernel_templates/variant_dimensions.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

// The spellings are cache facts: changing one changes every key, so they are pinned.
TEST(VariantDimensions, NamesArePinned) {
  EXPECT_EQ(k_kernel_kinds.joined("|"), "writer|gather");
  EXPECT_EQ(k_latent_scales.joined("|"), "identity|dynamic|per-token");
  EXPECT_EQ(k_record_formats.joined("|"),
            "b12x-432|b12x-368|b12x-304|flashmla-352|flashinfer-glm-416|flashinfer-dsv4-384|flashmla-v41-288");
  EXPECT_EQ(k_targets.joined(" "), "sm_90 sm_90a sm_100 sm_100a sm_100f sm_103a sm_110a sm_120 sm_120a sm_120f sm_121a");
  EXPECT_EQ(k_kernel_kinds.fact, "kernel");
  EXPECT_EQ(k_latent_scales.fact, "latent_scale");
  EXPECT_EQ(k_record_formats.fact, "format");
  // The first two formats are keyed by their RoPE name, as before formats existed.
  EXPECT_EQ(k_legacy_format_fact, "rope");
  EXPECT_EQ(format_fact(RecordFormat::b12x_432), (std::pair<std::string, std::string>("rope", "bf16")));
  EXPECT_EQ(format_fact(RecordFormat::b12x_368), (std::pair<std::string, std::string>("rope", "fp8")));
  EXPECT_EQ(format_fact(RecordFormat::b12x_304), (std::pair<std::string, std::string>("format", "b12x-304")));
  EXPECT_EQ(format_fact(RecordFormat::flashmla_352), (std::pair<std::string, std::string>("format", "flashmla-352")));
  EXPECT_EQ(format_fact(RecordFormat::flashinfer_glm_416),
            (std::pair<std::string, std::string>("format", "flashinfer-glm-416")));
  EXPECT_EQ(std::to_underlying(RecordFormat::flashinfer_glm_416), 4);
  EXPECT_EQ(std::to_underlying(jc::fmt::Format::flashinfer_glm_416), 4);
  EXPECT_EQ(format_fact(RecordFormat::flashinfer_dsv4_384),
            (std::pair<std::string, std::string>("format", "flashinfer-dsv4-384")));
  EXPECT_EQ(format_fact(RecordFormat::flashmla_v41_288),
            (std::pair<std::string, std::string>("format", "flashmla-v41-288")));
  EXPECT_EQ(k_targets.fact, "target");
}

TEST(VariantDimensions, EveryRowParsesBackAndPrints) {
  for (const auto& row : k_kernel_kinds.rows) {
    EXPECT_EQ(parse_kernel_kind(row.name), row.value);
    EXPECT_STREQ(to_string(row.value), row.name);
  }
  for (const auto& row : k_latent_scales.rows) {
    EXPECT_EQ(parse_latent_scale(row.name), row.value);
    EXPECT_STREQ(to_string(row.value), row.name);
  }
  for (const auto& row : k_record_formats.rows) {
    EXPECT_EQ(parse_record_format(row.name), row.value);
    EXPECT_STREQ(to_string(row.value), row.name);
    if (row.rope_alias != nullptr) {
      EXPECT_EQ(parse_rope_format(row.rope_alias), row.value);
      EXPECT_EQ(parse_record_format(row.rope_alias), row.value);
    }
    EXPECT_FALSE(parse_rope_format(row.name)) << row.name;
    EXPECT_EQ(record_bytes(row.value), row.record_bytes);
  }
  for (const auto& row : k_targets.rows) {
    auto target = parse_target(row.name);
    ASSERT_OK(target);
    EXPECT_EQ(target->name, row.name);
  }
}

TEST(VariantDimensions, ParsingRefusesWhatNoRowHas) {
  for (const char* text : {"", "Writer", "writer ", "gatherer"})
    EXPECT_FALSE(parse_kernel_kind(text)) << text;
  for (const char* text : {"", "Identity", "calibrated", "dynamic\n"})
    EXPECT_FALSE(parse_latent_scale(text)) << text;
  for (const char* text : {"", "BF16", "fp4", "fp8 "}) EXPECT_FALSE(parse_rope_format(text)) << text;
  const auto target = parse_target("sm_99");
  ASSERT_FALSE(target);
  EXPECT_EQ(target.error().code, ErrorCode::invalid_argument);
  EXPECT_NE(target.error().message.find("unknown target 'sm_99' (supported: sm_90, sm_90a,"),
            std::string::npos)
      << target.error().message;
}

TEST(VariantDimensions, RecordSizesAreTheKernels) {
  EXPECT_EQ(record_bytes(RecordFormat::b12x_432), 432);
  EXPECT_EQ(record_bytes(RecordFormat::b12x_368), 368);
  EXPECT_EQ(record_bytes(RecordFormat::b12x_304), 304);
  EXPECT_EQ(record_bytes(RecordFormat::flashmla_352), 352);
  EXPECT_EQ(record_bytes(RecordFormat::flashinfer_glm_416), 416);
  for (const auto& row : k_record_formats.rows) EXPECT_EQ(row.record_bytes, jc::fmt::layout(row.device).record_bytes);
}

TEST(VariantDimensions, DefaultTargetsAreTheProductsInTableOrder) {
  std::vector<std::string_view> defaults(default_targets().begin(), default_targets().end());
  EXPECT_EQ(defaults, (std::vector<std::string_view>{"sm_90", "sm_100a", "sm_120a"}));
  std::vector<std::string_view> supported(supported_targets().begin(), supported_targets().end());
  ASSERT_EQ(supported.size(), k_targets.size());
  for (std::size_t i = 0; i < supported.size(); ++i) EXPECT_EQ(supported[i], k_targets.rows[i].name);
}

TEST(VariantDimensions, AlternativesReadAsEnglish) {
  EXPECT_EQ(k_record_formats.alternatives(),
            "b12x-432, b12x-368, b12x-304, flashmla-352, flashinfer-glm-416, flashinfer-dsv4-384 or "
            "flashmla-v41-288");
  EXPECT_EQ(k_targets.alternatives().substr(0, 16), "sm_90, sm_90a, s");
  EXPECT_TRUE(k_targets.alternatives().ends_with(", sm_120a, sm_120f or sm_121a"));
  const auto names = k_latent_scales.names();
  EXPECT_EQ(names, (std::vector<std::string>{"identity", "dynamic", "per-token"}));
}

TEST(VariantDimensions, LatentScaleFollowsTheScaleMode) {
  EXPECT_EQ(latent_scale_for(ScaleMode::identity), LatentScale::identity);
  EXPECT_EQ(latent_scale_for(ScaleMode::dynamic), LatentScale::dynamic);
}

TEST(VariantDimensions, AllVariantsIsEveryAllowedCombinationOnce) {
  const Target target{"sm_100a"};
  const auto specs = all_variants(target);
  // Per kernel: b12x-432 2 modes, b12x-368 3, b12x-304 1, flashmla-352 2, flashinfer-glm-416 2,
  // the two page-major formats 1 each.
  EXPECT_EQ(specs.size(), k_kernel_kinds.size() * 12);
  std::set<std::string> labels;
  for (const KernelSpec& spec : specs) {
    labels.insert(spec.label());
    EXPECT_TRUE(format_allows(spec.format, spec.latent_scale)) << spec.label();
  }
  EXPECT_EQ(labels.size(), specs.size());
  EXPECT_EQ(specs.front().label(), "writer/identity/b12x-432/sm_100a");
  EXPECT_EQ(specs.back().label(), "gather/per-token/b12x-304/sm_100a");
  EXPECT_TRUE(labels.contains("writer/per-token/b12x-368/sm_100a"));
  EXPECT_TRUE(labels.contains("gather/dynamic/flashmla-352/sm_100a"));
  EXPECT_FALSE(labels.contains("writer/per-token/b12x-432/sm_100a"));
  EXPECT_FALSE(labels.contains("writer/identity/b12x-304/sm_100a"));
}

TEST(VariantDimensions, TheFirstTextBuildsExactlyTheVariantsThatPredateFormats) {
  for (const KernelSpec& spec : all_variants(Target{"sm_90"})) {
    const bool old = (spec.format == RecordFormat::b12x_432 || spec.format == RecordFormat::b12x_368) &&
                     spec.latent_scale != LatentScale::per_token;
    EXPECT_EQ(built_from_first_text(spec), old) << spec.label();
    const GeneratedSource source = generate(spec);
    // Only the headers its source includes are carried (and so hashed into its key).
    std::vector<std::string_view> headers;
    for (const auto& h : source.headers) headers.push_back(h.include_name);
    if (old) {
      EXPECT_EQ(headers, std::vector<std::string_view>{"jitcache/nvfp4_mla.cuh"}) << spec.label();
      EXPECT_NE(source.source.find("#include \"jitcache/nvfp4_mla.cuh\""), std::string::npos);
    } else {
      EXPECT_EQ(headers, (std::vector<std::string_view>{"jitcache/nvfp4_mla.cuh", "jitcache/nvfp4_mla_formats.cuh"}))
          << spec.label();
      EXPECT_NE(source.source.find("#include \"jitcache/nvfp4_mla_formats.cuh\""), std::string::npos);
    }
  }
}

TEST(KernelSpecFacts, AFormatTheKeyCannotSpellIsRefused) {
  FactMap facts = KernelSpec{KernelKind::writer, LatentScale::identity, RecordFormat::b12x_432, Target{"sm_90"}}.to_facts();
  EXPECT_EQ(facts.at("rope"), "bf16");
  EXPECT_FALSE(facts.contains("format"));
  // b12x-432 is always keyed by its RoPE name: format=b12x-432 is no key of ours.
  FactMap renamed = facts;
  renamed.erase("rope");
  renamed["format"] = "b12x-432";
  EXPECT_FALSE(KernelSpec::from_facts(renamed));
  FactMap both = facts;
  both["format"] = "b12x-304";
  const auto twice = KernelSpec::from_facts(both);
  ASSERT_FALSE(twice);
  EXPECT_NE(twice.error().message.find("both name the record format"), std::string::npos);
  // A mode the format is not written with is no variant.
  FactMap per_token_432 = facts;
  per_token_432["latent_scale"] = "per-token";
  const auto refused = KernelSpec::from_facts(per_token_432);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("b12x-432 is not written with a per-token latent scale"), std::string::npos)
      << refused.error().message;
}

TEST(KernelSpecFacts, ToFactsNamesTheFourDimensions) {
  const KernelSpec spec{KernelKind::gather, LatentScale::dynamic, RecordFormat::b12x_368, Target{"sm_120a"}};
  EXPECT_EQ(
      spec.to_facts(),
      (FactMap{{"kernel", "gather"}, {"latent_scale", "dynamic"}, {"rope", "fp8"}, {"target", "sm_120a"}}));
}

TEST(KernelSpecFacts, GeneratedFactsStartFromTheSpecs) {
  for (const KernelSpec& spec : all_variants(Target{"sm_90"})) {
    const GeneratedSource source = generate(spec);
    for (const auto& [name, value] : spec.to_facts()) EXPECT_EQ(source.facts.at(name), value) << name;
    EXPECT_EQ(source.facts.at("record_bytes"), std::to_string(record_bytes(spec.format)));
    EXPECT_EQ(source.entry, k_kernel_kinds[spec.kernel].entry);
    // The first text's variants name nvfp4_mla.cuh's enumerators, every other one the formats'.
    const bool first = built_from_first_text(spec);
    EXPECT_NE(source.source.find(first ? k_record_formats[spec.format].legacy_text : k_record_formats[spec.format].device_text),
              std::string::npos);
    EXPECT_NE(source.source.find(first ? k_latent_scales[spec.latent_scale].legacy_text
                                       : k_latent_scales[spec.latent_scale].device_text),
              std::string::npos);
  }
}

TEST(KernelSpecFacts, FromFactsInvertsToFactsForEveryVariant) {
  for (std::string_view target : supported_targets())
    for (const KernelSpec& spec : all_variants(Target{std::string(target)})) {
      FactMap facts = spec.to_facts();
      facts["record_bytes"] = "432";  // other facts are ignored
      const auto back = KernelSpec::from_facts(facts);
      ASSERT_OK(back);
      EXPECT_EQ(*back, spec) << spec.label();
    }
}

TEST(KernelSpecFacts, FromFactsNamesAMissingFact) {
  const FactMap complete = KernelSpec{}.to_facts();
  for (const auto& [name, value] : complete) {
    FactMap facts = complete;
    facts.erase(name);
    const auto spec = KernelSpec::from_facts(facts);
    ASSERT_FALSE(spec) << name;
    EXPECT_EQ(spec.error().code, ErrorCode::invalid_input);
    EXPECT_EQ(spec.error().message,
              name == "rope" ? std::string("missing fact 'format' (or 'rope')") : "missing fact '" + name + "'");
  }
  EXPECT_FALSE(KernelSpec::from_facts({}));
}

TEST(KernelSpecFacts, FromFactsNamesAnUnknownValue) {
  const FactMap complete =
      KernelSpec{KernelKind::writer, LatentScale::identity, RecordFormat::b12x_432, Target{"sm_90"}}.to_facts();
  const std::pair<const char*, const char*> cases[] = {
      {"kernel", "fact 'kernel' is 'scatter', expected writer or gather"},
      {"latent_scale", "fact 'latent_scale' is 'scatter', expected identity, dynamic or per-token"},
      {"rope", "fact 'rope' is 'scatter', expected bf16 or fp8"},
      {"target",
       "fact 'target' is 'scatter', expected sm_90, sm_90a, sm_100, sm_100a, sm_100f, sm_103a, sm_110a, sm_120, "
       "sm_120a, sm_120f or sm_121a"},
  };
  for (const auto& [name, message] : cases) {
    FactMap facts = complete;
    facts[name] = "scatter";
    const auto spec = KernelSpec::from_facts(facts);
    ASSERT_FALSE(spec) << name;
    EXPECT_EQ(spec.error().code, ErrorCode::invalid_input);
    EXPECT_EQ(spec.error().message, message);
  }
  // Case matters: a fact value is a key component, spelled one way.
  FactMap upper = complete;
  upper["rope"] = "BF16";
  EXPECT_FALSE(KernelSpec::from_facts(upper));
}

}  // namespace
}  // namespace jitcache
