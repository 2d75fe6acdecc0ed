#include <gtest/gtest.h>

#include "runtime/scales/model_config.hpp"
#include "test_scale_support.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using namespace jitcache::testing;

TEST(ModelConfig, ReadsGlmFields) {
  const auto model = parse_model_config(glm_config(), "config.json");
  ASSERT_OK(model);
  EXPECT_EQ(model->num_hidden_layers, 78);
  EXPECT_EQ(model->num_nextn_predict_layers, 1);
  EXPECT_EQ(model->kv_lora_rank, 512);
  EXPECT_EQ(model->qk_rope_head_dim, 64);
  EXPECT_EQ(model->qk_nope_head_dim, 192);
  EXPECT_EQ(model->v_head_dim, 256);
  EXPECT_EQ(model->num_attention_heads, 64);
  EXPECT_EQ(model->index_topk, 2048);
  EXPECT_EQ(model->model_type, "glm_moe_dsa");
  EXPECT_EQ(model->total_layers(), 79);
}

TEST(ModelConfig, DraftLayersDefaultToNoneAndOptionalFieldsMayBeNull) {
  json config = glm_config(61);
  config.erase("num_nextn_predict_layers");
  config["index_topk"] = nullptr;
  const auto model = parse_model_config(config, "config.json");
  ASSERT_OK(model);
  EXPECT_EQ(model->num_nextn_predict_layers, 0);
  EXPECT_EQ(model->index_topk, std::nullopt);
  EXPECT_EQ(model->total_layers(), 61);
}

TEST(ModelConfig, EachRequiredFieldIsNamedWhenMissing) {
  for (const char* field : {"num_hidden_layers", "kv_lora_rank"}) {
    json config = glm_config();
    config.erase(field);
    const auto model = parse_model_config(config, "ckpt/config.json");
    ASSERT_FALSE(model);
    EXPECT_CONTAINS(model.error().message, std::string("ckpt/config.json: field '") + field + "': missing");
  }
}

TEST(ModelConfig, WrongTypesAndRangesAreRefused) {
  const std::vector<std::pair<const char*, json>> bad = {
      {"num_hidden_layers", 0},       {"num_hidden_layers", -1},    {"num_hidden_layers", 78.5},
      {"num_hidden_layers", true},    {"kv_lora_rank", "512"},      {"num_nextn_predict_layers", -1},
      {"num_nextn_predict_layers", 5000}, {"qk_rope_head_dim", json::array()}, {"num_hidden_layers", 1e12}};
  for (const auto& [field, value] : bad) {
    json config = glm_config();
    config[field] = value;
    const auto model = parse_model_config(config, "config.json");
    ASSERT_FALSE(model) << field << " = " << value.dump();
    EXPECT_CONTAINS(model.error().message, std::string("field '") + field + "': must be an integer in [");
  }
}

TEST(ModelConfig, NullDraftLayerCountIsAnErrorNotZero) {
  // Issue 10 item 7: null read as "no draft layers" silently dropped the MTP layer.
  json config = glm_config();
  config["num_nextn_predict_layers"] = nullptr;
  const auto model = parse_model_config(config, "ckpt/config.json");
  ASSERT_FALSE(model);
  EXPECT_EQ(model.error().code, ErrorCode::invalid_input);
  EXPECT_CONTAINS(
      model.error().message,
      "ckpt/config.json: field 'num_nextn_predict_layers': must be an integer in [0, 1024], got null");
  for (const char* required : {"num_hidden_layers", "kv_lora_rank"}) {
    json c = glm_config();
    c[required] = nullptr;
    const auto m = parse_model_config(c, "ckpt/config.json");
    ASSERT_FALSE(m) << required;
    EXPECT_CONTAINS(m.error().message, std::string("field '") + required + "': must be an integer");
  }
}

TEST(ModelConfig, NearMissKeysAreFound) {
  json config = glm_config();
  EXPECT_TRUE(scales_key_near_misses(config).empty());
  config["nvfp4_ds_mla_outer_scales"] = json::object();  // the real key is not a near miss
  config["NVFP4_DS_MLA_OUTER_SCALE"] = 1;
  config["quantization_config"] = {{"nvfp4_ds_mla_outer_scales", 1}, {"quant_method", "fp8"}};
  config["model_type_x"] = 1;
  const auto misses = scales_key_near_misses(config);
  ASSERT_EQ(misses.size(), 2u);
  EXPECT_EQ(misses[0].found, "NVFP4_DS_MLA_OUTER_SCALE");
  EXPECT_EQ(misses[1].found, "quantization_config.nvfp4_ds_mla_outer_scales");
  EXPECT_EQ(misses[1].expected, "nvfp4_ds_mla_outer_scales");
}

TEST(ModelConfig, NonObjectIsRefused) {
  const auto model = parse_model_config(json::array(), "config.json");
  ASSERT_FALSE(model);
  EXPECT_CONTAINS(model.error().message, "config.json: expected a JSON object (a model config), got array");
}

class CheckpointConfigTest : public TempDirTest {};

TEST_F(CheckpointConfigTest, EmptyPathIsNamed) {
  const auto config = read_checkpoint_config("");
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error().code, ErrorCode::invalid_argument);
  EXPECT_EQ(config.error().message,
            "checkpoint directory: empty path; give the directory that holds config.json");
}

TEST_F(CheckpointConfigTest, MissingConfigIsNotFound) {
  const auto config = read_checkpoint_config(dir());
  ASSERT_FALSE(config);
  EXPECT_EQ(config.error().code, ErrorCode::not_found);
  EXPECT_CONTAINS(config.error().message, "config.json: cannot open");
}

TEST_F(CheckpointConfigTest, KeepsTheScalesFieldUnvalidated) {
  json config = glm_config();
  config["nvfp4_ds_mla_outer_scales"] = "anything";
  write_text(dir() / "config.json", config.dump());
  const auto read = read_checkpoint_config(dir());
  ASSERT_OK(read);
  ASSERT_TRUE(read->scales_field.has_value());
  EXPECT_EQ(*read->scales_field, "anything");
  EXPECT_EQ(read->sha256.size(), 64u);
}

}  // namespace
}  // namespace jitcache
