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
  const VariantPlan plan = plan_variants(scales, RopeFormat::fp8, Target{"sm_100a"});
  EXPECT_EQ(labels(plan),
            (std::vector<std::string>{"writer/identity/fp8/sm_100a", "writer/dynamic/fp8/sm_100a",
                                      "gather/identity/fp8/sm_100a", "gather/dynamic/fp8/sm_100a"}));
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
    const VariantPlan plan = plan_variants(scales, RopeFormat::bf16, Target{"sm_90"});
    const std::string m = to_string(latent_scale_for(mode));
    EXPECT_EQ(labels(plan),
              (std::vector<std::string>{"writer/" + m + "/bf16/sm_90", "gather/" + m + "/bf16/sm_90"}));
    for (const VariantPlan::Layer& layer : plan.layers) {
      EXPECT_EQ(layer.writer, 0u);
      EXPECT_EQ(layer.gather, 1u);
    }
  }
}

TEST(VariantPlan, EveryVariantCarriesTheRopeAndTarget) {
  const auto scales = scales_of({ScaleMode::identity, ScaleMode::dynamic});
  const VariantPlan plan = plan_variants(scales, RopeFormat::fp8, Target{"sm_120a"});
  for (const KernelSpec& spec : plan.variants) {
    EXPECT_EQ(spec.rope, RopeFormat::fp8);
    EXPECT_EQ(spec.target, Target{"sm_120a"});
  }
}

TEST(VariantPlan, TheOrderOfLayersDoesNotChangeTheVariants) {
  const auto a =
      plan_variants(scales_of({ScaleMode::identity, ScaleMode::dynamic}), RopeFormat::bf16, Target{"sm_90"});
  const auto b =
      plan_variants(scales_of({ScaleMode::dynamic, ScaleMode::identity}), RopeFormat::bf16, Target{"sm_90"});
  EXPECT_EQ(a.variants, b.variants);
  EXPECT_EQ(a.layers[0].writer, b.layers[1].writer);
  EXPECT_EQ(a.layers[1].gather, b.layers[0].gather);
}

TEST(VariantPlan, NoLayersNeedNothing) {
  const VariantPlan plan = plan_variants(ResolvedScales{}, RopeFormat::bf16, Target{"sm_90"});
  EXPECT_TRUE(plan.variants.empty());
  EXPECT_TRUE(plan.layers.empty());
}

}  // namespace
}  // namespace jitcache
