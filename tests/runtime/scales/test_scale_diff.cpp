// Comparing two sets of scales: per-layer values, ratio and relative change, the largest
// change, and the sides a comparison accepts (files, checkpoints) or refuses.
#include <gtest/gtest.h>

#include "runtime/scales/scale_diff.hpp"
#include "test_scale_support.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using namespace jitcache::testing;

class ScaleDiffTest : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    m_seed = test_seed("scale diff values");
  }

  fs::path write_scales(const std::string& name, const json& scales) {
    write_text(dir() / name, scales.dump());
    return dir() / name;
  }

  scales::ScaleDiff diff(const fs::path& a, const fs::path& b) {
    auto left = scales::load_scale_set(a);
    EXPECT_TRUE(left.has_value()) << left.error().to_string();
    auto right = scales::load_scale_set(b);
    EXPECT_TRUE(right.has_value()) << right.error().to_string();
    auto result = scales::diff_scale_sets(std::move(*left), std::move(*right));
    EXPECT_TRUE(result.has_value()) << result.error().to_string();
    return std::move(*result);
  }

  std::uint64_t m_seed = 0;
  ScopedEnv m_env{"VLLM_NVFP4_MLA_SCALES_FILE", std::nullopt};
};

TEST_F(ScaleDiffTest, IdenticalFilesHaveNoChange) {
  const json scales = valid_scales(m_seed);
  const scales::ScaleDiff d = diff(write_scales("a.json", scales), write_scales("b.json", scales));
  EXPECT_TRUE(d.differing.empty());
  EXPECT_FALSE(d.largest.has_value());
  EXPECT_TRUE(d.exceeding(0.0).empty());
  ASSERT_EQ(d.layers.size(), 78u);
  for (const auto& l : d.layers) {
    EXPECT_EQ(l.ratio, 1.0);
    EXPECT_EQ(l.change, 0.0);
    EXPECT_TRUE(l.max_abs_a.has_value());
  }
}

TEST_F(ScaleDiffTest, ChangedLayersWithRatioAndLargestChange) {
  const json a = valid_scales(m_seed);
  json b = a;
  b["scales"][7] = a["scales"][7].get<double>() * 1.25;
  b["scales"][40] = a["scales"][40].get<double>() * 0.5;
  b.erase("max_abs");
  const scales::ScaleDiff d = diff(write_scales("a.json", a), write_scales("b.json", b));
  EXPECT_EQ(d.differing, (std::vector<int>{7, 40}));
  ASSERT_TRUE(d.largest.has_value());
  EXPECT_EQ(*d.largest, 40);
  const auto& l7 = d.layers[7];
  EXPECT_EQ(l7.a, static_cast<float>(a["scales"][7].get<double>()));
  EXPECT_EQ(l7.b, static_cast<float>(b["scales"][7].get<double>()));
  EXPECT_NEAR(l7.ratio, 1.25, 1e-6);
  EXPECT_NEAR(l7.change, 0.25, 1e-6);
  EXPECT_NEAR(d.layers[40].change, 0.5, 1e-6);
  EXPECT_FALSE(l7.max_abs_b.has_value());
  EXPECT_EQ(d.exceeding(0.0), (std::vector<int>{7, 40}));
  EXPECT_EQ(d.exceeding(0.3), (std::vector<int>{40}));
  EXPECT_TRUE(d.exceeding(0.6).empty());

  const json doc = scales::to_json(d, 0.3);
  EXPECT_EQ(doc["layers"].size(), 78u);
  EXPECT_EQ(doc["exceeding_layers"], json({40}));
  EXPECT_EQ(doc["largest_change"]["layer"], 40);
  EXPECT_EQ(doc["within_tolerance"], false);
}

TEST_F(ScaleDiffTest, CheckpointAgainstItsOwnFileIsIdentical) {
  // Compared as the floats the kernels apply: the doubles in the file and the floats the
  // resolver gives the checkpoint are the same values.
  const fs::path example = source_dir() / "examples" / "glm5-mini";
  const scales::ScaleDiff d = diff(example, example / "nvfp4_ds_mla_outer_scales.json");
  EXPECT_TRUE(d.differing.empty());
  EXPECT_EQ(d.layers.size(), 78u) << "main layers only";
  EXPECT_EQ(d.a.kind, scales::ScaleSetKind::checkpoint);
  EXPECT_EQ(d.a.provenance.checkpoint_form, CheckpointForm::sidecar);
  EXPECT_EQ(d.b.kind, scales::ScaleSetKind::file);
}

TEST_F(ScaleDiffTest, CheckpointWithoutScalesIsIdentity) {
  write_text(dir() / "ckpt" / "config.json", glm_config().dump());
  const json scales = valid_scales(m_seed);
  const scales::ScaleDiff d = diff(dir() / "ckpt", write_scales("b.json", scales));
  EXPECT_EQ(d.differing.size(), 78u);
  EXPECT_EQ(d.layers[0].a, 1.0f);
  EXPECT_FALSE(d.layers[0].max_abs_a.has_value());
  EXPECT_EQ(d.a.provenance.source, ScaleSource::identity_default);
}

TEST_F(ScaleDiffTest, RefusesDifferentLayerCountsAndBadInput) {
  auto a = scales::load_scale_set(write_scales("a.json", valid_scales(m_seed, 78)));
  auto b = scales::load_scale_set(write_scales("b.json", valid_scales(m_seed, 61)));
  ASSERT_OK(a);
  ASSERT_OK(b);
  const auto refused = scales::diff_scale_sets(std::move(*a), std::move(*b));
  ASSERT_FALSE(refused.has_value());
  EXPECT_CONTAINS(refused.error().message, "(78 layers)");
  EXPECT_CONTAINS(refused.error().message, "(61 layers)");

  json bad = valid_scales(m_seed);
  bad["scales"][3] = nullptr;
  const auto invalid = scales::load_scale_set(write_scales("bad.json", bad));
  ASSERT_FALSE(invalid.has_value());
  EXPECT_CONTAINS(invalid.error().message, "bad.json: field 'scales[3]'");
  EXPECT_FALSE(scales::load_scale_set(dir() / "missing.json").has_value());
  EXPECT_FALSE(scales::load_scale_set(dir()).has_value()) << "a directory without config.json";
}

}  // namespace
}  // namespace jitcache
