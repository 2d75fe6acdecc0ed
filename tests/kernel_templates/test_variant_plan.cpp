// plan_variants: the distinct variants a model's layers need and which serves each layer.
#include <string>
#include <vector>

#include "kernel_templates/variant_plan.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

ResolvedScales scales_of(const std::vector<ScaleMode>& modes) {
  ResolvedScales scales;
  for (std::size_t i = 0; i < modes.size(); ++i) {
    const bool identity = modes[i] == ScaleMode::identity;
    scales.layers.push_back(LayerScale{static_cast<int>(i), identity ? 1.0f : 0.25f, modes[i],
                                       identity ? ScaleSource::identity_default : ScaleSource::checkpoint,
                                       std::nullopt});
  }
  return scales;
}

std::vector<std::string> labels(const VariantPlan& plan) {
  std::vector<std::string> out;
  for (const KernelSpec& spec : plan.variants) out.push_back(spec.label());
  return out;
}

TEST(VariantPlan, MixedLayersNeedFourVariantsInTableOrder) {
  // A calibrated model with an identity draft layer last, as examples/glm5-mini.
  const auto scales = scales_of({ScaleMode::dynamic, ScaleMode::dynamic, ScaleMode::identity});
  const VariantPlan plan = *plan_variants(scales, RecordFormat::b12x_368, Target{"sm_100a"});
  EXPECT_EQ(labels(plan),
            (std::vector<std::string>{"writer/identity/b12x-368/sm_100a", "writer/dynamic/b12x-368/sm_100a",
                                      "gather/identity/b12x-368/sm_100a", "gather/dynamic/b12x-368/sm_100a"}));
  ASSERT_EQ(plan.layers.size(), 3u);
  for (std::size_t i = 0; i < plan.layers.size(); ++i) {
    const KernelSpec& writer = plan.variants[plan.layers[i].writer];
    const KernelSpec& gather = plan.variants[plan.layers[i].gather];
    EXPECT_EQ(writer.kernel, KernelKind::writer) << i;
    EXPECT_EQ(gather.kernel, KernelKind::gather) << i;
    EXPECT_EQ(writer.latent_scale, latent_scale_for(scales.layers[i].mode)) << i;
    EXPECT_EQ(gather.latent_scale, latent_scale_for(scales.layers[i].mode)) << i;
  }
  EXPECT_EQ(plan.layers[0].writer, plan.layers[1].writer);
  EXPECT_NE(plan.layers[0].writer, plan.layers[2].writer);
}

TEST(VariantPlan, OneModeNeedsOneVariantPerKernel) {
  for (const ScaleMode mode : {ScaleMode::identity, ScaleMode::dynamic}) {
    const auto scales = scales_of({mode, mode, mode, mode});
    const VariantPlan plan = *plan_variants(scales, RecordFormat::b12x_432, Target{"sm_90"});
    const std::string m = to_string(latent_scale_for(mode));
    EXPECT_EQ(labels(plan),
              (std::vector<std::string>{"writer/" + m + "/b12x-432/sm_90", "gather/" + m + "/b12x-432/sm_90"}));
    for (const VariantPlan::Layer& layer : plan.layers) {
      EXPECT_EQ(layer.writer, 0u);
      EXPECT_EQ(layer.gather, 1u);
    }
  }
}

TEST(VariantPlan, EveryVariantCarriesTheRopeAndTarget) {
  const auto scales = scales_of({ScaleMode::identity, ScaleMode::dynamic});
  const VariantPlan plan = *plan_variants(scales, RecordFormat::b12x_368, Target{"sm_120a"});
  for (const KernelSpec& spec : plan.variants) {
    EXPECT_EQ(spec.format, RecordFormat::b12x_368);
    EXPECT_EQ(spec.target, Target{"sm_120a"});
  }
}

TEST(VariantPlan, TheOrderOfLayersDoesNotChangeTheVariants) {
  const auto a =
      *plan_variants(scales_of({ScaleMode::identity, ScaleMode::dynamic}), RecordFormat::b12x_432, Target{"sm_90"});
  const auto b =
      *plan_variants(scales_of({ScaleMode::dynamic, ScaleMode::identity}), RecordFormat::b12x_432, Target{"sm_90"});
  EXPECT_EQ(a.variants, b.variants);
  EXPECT_EQ(a.layers[0].writer, b.layers[1].writer);
  EXPECT_EQ(a.layers[1].gather, b.layers[0].gather);
}

TEST(VariantPlan, PerTokenBindsEveryLayerToThePerTokenPair) {
  const auto scales = scales_of({ScaleMode::dynamic, ScaleMode::identity, ScaleMode::dynamic});
  const VariantPlan plan = *plan_variants(scales, RecordFormat::b12x_368, Target{"sm_120a"}, LatentPolicy::per_token);
  EXPECT_EQ(labels(plan), (std::vector<std::string>{"writer/per-token/b12x-368/sm_120a",
                                                    "gather/per-token/b12x-368/sm_120a"}));
  for (const VariantPlan::Layer& layer : plan.layers) {
    EXPECT_EQ(layer.writer, 0u);
    EXPECT_EQ(layer.gather, 1u);
  }
}

TEST(VariantPlan, AFormatRefusesTheModesItIsNotWrittenWith) {
  const auto scales = scales_of({ScaleMode::dynamic, ScaleMode::identity});
  // b12x-432 and flashmla-352 have no per-token record; b12x-304 has only per-token.
  for (RecordFormat format : {RecordFormat::b12x_432, RecordFormat::flashmla_352}) {
    const auto plan = plan_variants(scales, format, Target{"sm_90"}, LatentPolicy::per_token);
    ASSERT_FALSE(plan) << to_string(format);
    EXPECT_NE(plan.error().message.find("is not written with a per-token latent scale"), std::string::npos)
        << plan.error().message;
  }
  const auto static_304 = plan_variants(scales, RecordFormat::b12x_304, Target{"sm_90"});
  ASSERT_FALSE(static_304);
  EXPECT_NE(static_304.error().message.find("layer 0"), std::string::npos) << static_304.error().message;
  EXPECT_NE(static_304.error().message.find("b12x-304"), std::string::npos) << static_304.error().message;
  EXPECT_EQ(default_policy(RecordFormat::b12x_304), LatentPolicy::per_token);
  EXPECT_EQ(default_policy(RecordFormat::b12x_368), LatentPolicy::per_layer);
  EXPECT_TRUE(plan_variants(scales, RecordFormat::b12x_304, Target{"sm_90"}, LatentPolicy::per_token));
}

TEST(VariantPlan, NoLayersNeedNothing) {
  const VariantPlan plan = *plan_variants(ResolvedScales{}, RecordFormat::b12x_432, Target{"sm_90"});
  EXPECT_TRUE(plan.variants.empty());
  EXPECT_TRUE(plan.layers.empty());
}

}  // namespace
}  // namespace jitcache
