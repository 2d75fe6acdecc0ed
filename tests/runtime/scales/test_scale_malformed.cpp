// A table of malformed scales metadata, each a single mutation of a valid checkpoint. Every
// row must fail with its own specific error (file and field named), never crash, never
// fall back to identity.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <functional>

#include "jitcache/scales.hpp"
#include "support/sha256.hpp"
#include "test_scale_support.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using namespace jitcache::testing;

// What a row may change before the checkpoint is written.
struct Checkpoint {
  fs::path root;           // the temporary directory (outside the checkpoint)
  fs::path dir;            // the checkpoint directory
  json config = glm_config();
  json scales;             // the v1 object
  bool inline_object = false;
  std::optional<std::string> scales_text;  // raw sidecar bytes instead of scales.dump()
  std::optional<std::string> config_text;  // raw config.json bytes
  json reference;          // the sidecar reference; filled with file + sha256 unless set
  std::optional<std::string> checkpoint_revision;
  std::function<void(Checkpoint&)> after_write;  // symlinks, FIFOs, ...

  fs::path sidecar() const { return dir / "nvfp4_ds_mla_outer_scales.json"; }
};

struct Row {
  const char* name;
  std::function<void(Checkpoint&)> mutate;
  ErrorCode code;
  std::vector<std::string> expected;  // substrings of the message; "<sidecar>" / "<config>" expand
};

// Replaces the first occurrence of `from` in the sidecar text.
std::function<void(Checkpoint&)> edit_text(std::string from, std::string to) {
  return [from, to](Checkpoint& c) {
    std::string text = c.scales.dump(2);
    const auto at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    c.scales_text = text;
  };
}

std::string first_scale_text(const json& scales) {
  return json(scales["scales"][0]).dump();
}

const std::vector<Row>& rows() {
  static const std::vector<Row> table = {
      // --- element types and values ------------------------------------------------------
      {"scale_is_string", [](Checkpoint& c) { c.scales["scales"][3] = "0.001"; },
       ErrorCode::invalid_input, {"<sidecar>: field 'scales[3]': must be a number, got string \"0.001\""}},
      {"scale_is_boolean", [](Checkpoint& c) { c.scales["scales"][5] = true; },
       ErrorCode::invalid_input, {"<sidecar>: field 'scales[5]': must be a number, got boolean true"}},
      {"scale_is_null", [](Checkpoint& c) { c.scales["scales"][0] = nullptr; },
       ErrorCode::invalid_input, {"<sidecar>: field 'scales[0]': must be a number, got null"}},
      {"scale_is_array", [](Checkpoint& c) { c.scales["scales"][1] = json::array({0.1}); },
       ErrorCode::invalid_input, {"<sidecar>: field 'scales[1]': must be a number, got array"}},
      {"scale_is_zero", [](Checkpoint& c) { c.scales["scales"][7] = 0.0; },
       ErrorCode::invalid_input, {"<sidecar>: field 'scales[7]': must be > 0, got 0"}},
      {"scale_is_negative", [](Checkpoint& c) { c.scales["scales"][77] = -0.001; c.scales.erase("max_abs"); },
       ErrorCode::invalid_input, {"<sidecar>: field 'scales[77]': must be > 0, got -0.001"}},
      {"scale_underflows_float", [](Checkpoint& c) { c.scales["scales"][2] = 1e-50; c.scales.erase("max_abs"); },
       ErrorCode::invalid_input, {"<sidecar>: field 'scales[2]': is outside the normal float32 range"}},
      {"scale_overflows_float", [](Checkpoint& c) { c.scales["scales"][2] = 1e300; c.scales.erase("max_abs"); },
       ErrorCode::invalid_input, {"<sidecar>: field 'scales[2]': is outside the normal float32 range"}},
      {"scale_is_nan_token",
       [](Checkpoint& c) { edit_text(first_scale_text(c.scales), "NaN")(c); },
       ErrorCode::invalid_input, {"<sidecar>: not valid JSON", "NaN and Infinity are not JSON numbers"}},
      {"scale_is_infinity_token",
       [](Checkpoint& c) { edit_text(first_scale_text(c.scales), "Infinity")(c); },
       ErrorCode::invalid_input, {"<sidecar>: not valid JSON", "NaN and Infinity are not JSON numbers"}},
      {"scale_overflows_double",
       [](Checkpoint& c) { edit_text(first_scale_text(c.scales), "1e999")(c); },
       ErrorCode::invalid_input, {"<sidecar>: not valid JSON"}},
      // --- counts and shapes -------------------------------------------------------------
      {"scales_one_short",
       [](Checkpoint& c) { c.scales["scales"].erase(77); c.scales.erase("max_abs"); },
       ErrorCode::invalid_input, {"<sidecar>: field 'scales': has 77 entries, expected 78 (num_layers)"}},
      {"scales_one_long",
       [](Checkpoint& c) { c.scales["scales"].push_back(0.001); c.scales.erase("max_abs"); },
       ErrorCode::invalid_input, {"<sidecar>: field 'scales': has 79 entries, expected 78"}},
      {"scales_not_array", [](Checkpoint& c) { c.scales["scales"] = json{{"0", 0.1}}; },
       ErrorCode::invalid_input, {"<sidecar>: field 'scales': must be an array of numbers, got object"}},
      {"scales_missing", [](Checkpoint& c) { c.scales.erase("scales"); c.scales.erase("max_abs"); },
       ErrorCode::invalid_input, {"<sidecar>: field 'scales': missing (required)"}},
      {"num_layers_wrong",
       [](Checkpoint& c) {
         c.scales["num_layers"] = 77;
         c.scales["scales"].erase(77);
         c.scales["max_abs"].erase(77);
       },
       ErrorCode::invalid_input, {"<sidecar>: field 'num_layers': is 77 but the model has 78 layers"}},
      {"num_layers_is_string", [](Checkpoint& c) { c.scales["num_layers"] = "78"; },
       ErrorCode::invalid_input, {"<sidecar>: field 'num_layers': must be a positive integer, got string \"78\""}},
      {"num_layers_is_float", [](Checkpoint& c) { c.scales["num_layers"] = 78.0; },
       ErrorCode::invalid_input, {"<sidecar>: field 'num_layers': must be a positive integer, got number 78"}},
      {"num_layers_is_huge", [](Checkpoint& c) { c.scales["num_layers"] = 18446744073709551615ull; },
       ErrorCode::invalid_input, {"<sidecar>: field 'num_layers': must be a positive integer no larger than"}},
      {"latent_dim_wrong", [](Checkpoint& c) { c.scales["latent_dim"] = 576; },
       ErrorCode::invalid_input, {"<sidecar>: field 'latent_dim': is 576 but the model's kv_lora_rank is 512"}},
      {"latent_dim_missing", [](Checkpoint& c) { c.scales.erase("latent_dim"); },
       ErrorCode::invalid_input, {"<sidecar>: field 'latent_dim': missing (required)"}},
      {"denominator_wrong", [](Checkpoint& c) { c.scales["denominator"] = 448.0; },
       ErrorCode::invalid_input, {"<sidecar>: field 'denominator': must be exactly 2688 (6 * 448), got 448"}},
      {"denominator_nearly_right", [](Checkpoint& c) { c.scales["denominator"] = 2688.0000001; },
       ErrorCode::invalid_input, {"<sidecar>: field 'denominator': must be exactly 2688"}},
      {"denominator_is_string", [](Checkpoint& c) { c.scales["denominator"] = "2688"; },
       ErrorCode::invalid_input, {"<sidecar>: field 'denominator': must be the number 2688"}},
      {"format_unknown", [](Checkpoint& c) { c.scales["format"] = "nvfp4_ds_mla_outer_scale_v2"; },
       ErrorCode::invalid_input,
       {"<sidecar>: field 'format': unsupported format \"nvfp4_ds_mla_outer_scale_v2\"",
        "supported formats: nvfp4_ds_mla_outer_scale_v1"}},
      {"format_missing", [](Checkpoint& c) { c.scales.erase("format"); },
       ErrorCode::invalid_input, {"<sidecar>: field 'format': missing; supported formats: nvfp4_ds_mla_outer_scale_v1"}},
      {"format_is_number", [](Checkpoint& c) { c.scales["format"] = 1; },
       ErrorCode::invalid_input, {"<sidecar>: field 'format': must be a string, got number 1"}},
      {"max_abs_disagrees",
       [](Checkpoint& c) { c.scales["max_abs"][10] = c.scales["max_abs"][10].get<double>() * 1.00001; },
       ErrorCode::invalid_input, {"<sidecar>: field 'max_abs[10]': ", "disagrees with scales[10]"}},
      {"max_abs_wrong_length", [](Checkpoint& c) { c.scales["max_abs"].erase(0); },
       ErrorCode::invalid_input, {"<sidecar>: field 'max_abs': has 77 entries, scales has 78"}},
      {"max_abs_negative", [](Checkpoint& c) { c.scales["max_abs"][4] = -1.0; },
       ErrorCode::invalid_input, {"<sidecar>: field 'max_abs[4]': must be >= 0, got -1"}},
      {"max_abs_is_string", [](Checkpoint& c) { c.scales["max_abs"] = "0.02..5.2"; },
       ErrorCode::invalid_input, {"<sidecar>: field 'max_abs': must be an array of numbers, got string"}},
      {"unknown_field", [](Checkpoint& c) { c.scales["scale"] = json::array(); },
       ErrorCode::invalid_input, {"<sidecar>: field 'scale': unknown field; a v1 object has only format,"}},
      {"model_revision_not_string", [](Checkpoint& c) { c.scales["model_revision"] = 1234567; },
       ErrorCode::invalid_input, {"<sidecar>: field 'model_revision': must be a non-empty string, got number"}},
      {"provenance_not_object", [](Checkpoint& c) { c.scales["provenance"] = "wikitext-2"; },
       ErrorCode::invalid_input, {"<sidecar>: field 'provenance': must be an object, got string"}},
      {"top_level_array", [](Checkpoint& c) { c.scales_text = "[1, 2, 3]"; },
       ErrorCode::invalid_input, {"<sidecar>: expected a JSON object (nvfp4_ds_mla_outer_scale_v1), got array"}},
      // --- JSON text ---------------------------------------------------------------------
      {"duplicate_top_level_key",
       [](Checkpoint& c) { edit_text("\"denominator\": 2688.0", "\"denominator\": 2688.0, \"denominator\": 2688.0")(c); },
       ErrorCode::invalid_input, {"<sidecar>: duplicate key \"denominator\" in the top-level object"}},
      {"duplicate_nested_key",
       [](Checkpoint& c) { edit_text("\"dataset\": \"wikitext-2\"", "\"dataset\": \"wikitext-2\", \"dataset\": \"c4\"")(c); },
       ErrorCode::invalid_input, {"<sidecar>: duplicate key \"dataset\" in object \"provenance\""}},
      {"truncated_mid_file", [](Checkpoint& c) { const std::string t = c.scales.dump(2); c.scales_text = t.substr(0, t.size() / 2); },
       ErrorCode::invalid_input, {"<sidecar>: not valid JSON: parse error at line "}},
      {"truncated_before_last_brace", [](Checkpoint& c) { const std::string t = c.scales.dump(); c.scales_text = t.substr(0, t.size() - 1); },
       ErrorCode::invalid_input, {"<sidecar>: not valid JSON", "unexpected end of input"}},
      {"empty_file", [](Checkpoint& c) { c.scales_text = ""; },
       ErrorCode::invalid_input, {"<sidecar>: not valid JSON"}},
      {"trailing_garbage", [](Checkpoint& c) { c.scales_text = c.scales.dump() + " {}"; },
       ErrorCode::invalid_input, {"<sidecar>: not valid JSON"}},
      {"non_utf8_byte", edit_text("test values", "test \xff values"),
       ErrorCode::invalid_input, {"<sidecar>: not valid UTF-8 (first bad byte at offset "}},
      {"overlong_utf8", edit_text("test values", "test \xc0\xaf values"),
       ErrorCode::invalid_input, {"<sidecar>: not valid UTF-8"}},
      {"utf16_surrogate_in_utf8", edit_text("test values", "test \xed\xa0\x80 values"),
       ErrorCode::invalid_input, {"<sidecar>: not valid UTF-8"}},
      {"deep_nesting",
       [](Checkpoint& c) {
         const std::size_t depth = 200000;  // far past any stack a recursive parser could take
         edit_text("\"notes\": \"test values\"",
                   "\"notes\": " + std::string(depth, '[') + std::string(depth, ']'))(c);
       },
       ErrorCode::invalid_input, {"<sidecar>: nesting deeper than 64 levels at \"provenance.notes"}},
      {"huge_file",
       [](Checkpoint& c) { c.scales_text = c.scales.dump() + std::string(2 << 20, ' '); },
       ErrorCode::invalid_input, {"<sidecar>: file is ", "over the limit of 1048576 bytes"}},
      // --- the sidecar reference and the checkpoint sandbox ------------------------------
      {"path_traversal",
       [](Checkpoint& c) {
         write_text(c.root / "evil.json", c.scales.dump());
         c.reference = {{"file", "../evil.json"}, {"sha256", sha256_hex(c.scales.dump())}};
       },
       ErrorCode::unsafe,
       {"<config>: field 'nvfp4_ds_mla_outer_scales.file': \"../evil.json\" leaves the checkpoint directory"}},
      {"hidden_path_traversal",
       [](Checkpoint& c) {
         c.reference = {{"file", "sub/../../evil.json"}, {"sha256", sha256_hex("")}};
       },
       ErrorCode::unsafe, {"<config>: field 'nvfp4_ds_mla_outer_scales.file'", "leaves the checkpoint directory"}},
      {"absolute_path",
       [](Checkpoint& c) { c.reference = {{"file", "/etc/passwd"}, {"sha256", sha256_hex("")}}; },
       ErrorCode::unsafe,
       {"<config>: field 'nvfp4_ds_mla_outer_scales.file': must be a path relative to the checkpoint directory, got absolute path \"/etc/passwd\""}},
      {"symlink_escapes_checkpoint",
       [](Checkpoint& c) {
         c.after_write = [](Checkpoint& c) {
           const std::string text = c.scales.dump(2);
           write_text(c.root / "outside.json", text);
           fs::remove(c.sidecar());
           fs::create_symlink(c.root / "outside.json", c.sidecar());
         };
       },
       ErrorCode::unsafe,
       {"<config>: field 'nvfp4_ds_mla_outer_scales.file'", "outside the checkpoint directory",
        "a symlink escapes it"}},
      {"directory_symlink_escapes_checkpoint",
       [](Checkpoint& c) {
         write_text(c.root / "elsewhere" / "s.json", c.scales.dump());
         fs::create_directories(c.dir);
         fs::create_directory_symlink(c.root / "elsewhere", c.dir / "sub");
         c.reference = {{"file", "sub/s.json"}, {"sha256", sha256_hex(c.scales.dump())}};
       },
       ErrorCode::unsafe, {"<config>: field 'nvfp4_ds_mla_outer_scales.file'", "outside the checkpoint directory"}},
      {"sidecar_missing",
       [](Checkpoint& c) { c.reference = {{"file", "absent.json"}, {"sha256", sha256_hex("")}}; },
       ErrorCode::not_found, {"<config>: field 'nvfp4_ds_mla_outer_scales.file': sidecar \"absent.json\" cannot be opened"}},
      {"sidecar_is_fifo",
       [](Checkpoint& c) {
         c.after_write = [](Checkpoint& c) {
           fs::remove(c.sidecar());
           ASSERT_EQ(::mkfifo(c.sidecar().c_str(), 0600), 0);
         };
       },
       ErrorCode::invalid_input, {"<sidecar>: not a regular file"}},
      {"sidecar_is_directory",
       [](Checkpoint& c) {
         c.after_write = [](Checkpoint& c) {
           fs::remove(c.sidecar());
           fs::create_directory(c.sidecar());
         };
       },
       ErrorCode::invalid_input, {"<sidecar>: not a regular file"}},
      {"sha256_mismatch",
       [](Checkpoint& c) { c.reference = {{"file", "nvfp4_ds_mla_outer_scales.json"}, {"sha256", sha256_hex("other")}}; },
       ErrorCode::invalid_input,
       {"<config>: field 'nvfp4_ds_mla_outer_scales.sha256': does not match <sidecar> (file has sha256 "}},
      {"sha256_malformed",
       [](Checkpoint& c) { c.reference = {{"file", "nvfp4_ds_mla_outer_scales.json"}, {"sha256", "abc123"}}; },
       ErrorCode::invalid_input,
       {"<config>: field 'nvfp4_ds_mla_outer_scales.sha256': must be 64 hexadecimal digits, got string \"abc123\""}},
      {"sha256_missing",
       [](Checkpoint& c) { c.reference = {{"file", "nvfp4_ds_mla_outer_scales.json"}}; },
       ErrorCode::invalid_input,
       {"<config>: field 'nvfp4_ds_mla_outer_scales.sha256': missing; a sidecar reference must pin"}},
      {"reference_file_not_string",
       [](Checkpoint& c) { c.reference = {{"file", 7}, {"sha256", sha256_hex("")}}; },
       ErrorCode::invalid_input,
       {"<config>: field 'nvfp4_ds_mla_outer_scales.file': must be a non-empty relative path, got number 7"}},
      {"reference_unknown_key",
       [](Checkpoint& c) {
         c.reference = {{"file", "nvfp4_ds_mla_outer_scales.json"}, {"sha256", sha256_hex("")}, {"sha1", "x"}};
       },
       ErrorCode::invalid_input, {"<config>: field 'nvfp4_ds_mla_outer_scales.sha1': unknown field"}},
      {"field_is_string",
       [](Checkpoint& c) { c.reference = "nvfp4_ds_mla_outer_scales.json"; },
       ErrorCode::invalid_input,
       {"<config>: field 'nvfp4_ds_mla_outer_scales': expected an inline nvfp4_ds_mla_outer_scale_v1 object or a sidecar reference"}},
      {"reference_and_inline_mixed",
       [](Checkpoint& c) {
         c.reference = c.scales;
         c.reference["file"] = "nvfp4_ds_mla_outer_scales.json";
       },
       ErrorCode::invalid_input, {"<config>: field 'nvfp4_ds_mla_outer_scales': has both 'file'"}},
      {"revision_mismatch",
       [](Checkpoint& c) { c.checkpoint_revision = "fedcba9876543210fedcba9876543210fedcba98"; },
       ErrorCode::invalid_input,
       {"<sidecar>: field 'model_revision': \"0123456789abcdef0123456789abcdef01234567\" does not match the checkpoint revision \"fedcba9876543210fedcba9876543210fedcba98\""}},
      // --- inline metadata: the same rules, named inside config.json ---------------------
      {"inline_scale_is_boolean",
       [](Checkpoint& c) { c.inline_object = true; c.scales["scales"][2] = false; },
       ErrorCode::invalid_input,
       {"<config>: field 'nvfp4_ds_mla_outer_scales.scales[2]': must be a number, got boolean false"}},
      {"inline_wrong_count",
       [](Checkpoint& c) { c.inline_object = true; c.scales["scales"].erase(0); c.scales.erase("max_abs"); },
       ErrorCode::invalid_input, {"<config>: field 'nvfp4_ds_mla_outer_scales.scales': has 77 entries, expected 78"}},
      {"inline_duplicate_key",
       [](Checkpoint& c) {
         json config = c.config;
         config[k_scales_config_field] = c.scales;
         std::string text = config.dump();
         const std::string needle = "\"format\":\"nvfp4_ds_mla_outer_scale_v1\"";
         text.replace(text.find(needle), needle.size(), needle + "," + needle);
         c.config_text = text;
       },
       ErrorCode::invalid_input,
       {"<config>: duplicate key \"format\" in object \"nvfp4_ds_mla_outer_scales\""}},
      {"inline_revision_mismatch",
       [](Checkpoint& c) { c.inline_object = true; c.checkpoint_revision = "abcdef0"; },
       ErrorCode::invalid_input,
       {"<config>: field 'nvfp4_ds_mla_outer_scales.model_revision'", "does not match the checkpoint revision \"abcdef0\""}},
      // --- the model config --------------------------------------------------------------
      {"config_layers_not_integer",
       [](Checkpoint& c) { c.config["num_hidden_layers"] = "78"; },
       ErrorCode::invalid_input, {"<config>: field 'num_hidden_layers': must be an integer in [1, 100000], got \"78\""}},
      {"config_missing_kv_lora_rank",
       [](Checkpoint& c) { c.config.erase("kv_lora_rank"); },
       ErrorCode::invalid_input, {"<config>: field 'kv_lora_rank': missing"}},
  };
  return table;
}

class MalformedScales : public TempDirTest, public ::testing::WithParamInterface<Row> {
 protected:
  ScopedEnv m_no_override{"VLLM_NVFP4_MLA_SCALES_FILE", std::nullopt};
  ScopedEnv m_no_strict{"JITCACHE_STRICT", std::nullopt};
};

TEST_P(MalformedScales, FailsWithItsOwnError) {
  const Row& row = GetParam();
  Checkpoint c;
  c.root = dir();
  c.dir = dir() / "ckpt";
  c.scales = valid_scales(test_seed(row.name));
  row.mutate(c);
  if (::testing::Test::HasFatalFailure()) return;

  fs::create_directories(c.dir);
  json config = c.config;
  if (c.inline_object) {
    config[k_scales_config_field] = c.scales;
  } else {
    const std::string text = c.scales_text.value_or(c.scales.dump(2));
    write_text(c.sidecar(), text);
    config[k_scales_config_field] =
        c.reference.is_null() ? json{{"file", "nvfp4_ds_mla_outer_scales.json"}, {"sha256", sha256_hex(text)}}
                              : c.reference;
  }
  write_text(c.dir / "config.json", c.config_text.value_or(config.dump(2)));
  if (c.after_write) c.after_write(c);
  if (::testing::Test::HasFatalFailure()) return;

  ResolveOptions options;
  options.checkpoint_dir = c.dir;
  options.checkpoint_revision = c.checkpoint_revision;
  options.env = EnvOverride::ignore;
  const auto resolved = resolve_scales(options);
  ASSERT_FALSE(resolved) << "accepted: " << row.name;
  EXPECT_EQ(resolved.error().code, row.code)
      << to_string(resolved.error().code) << ": " << resolved.error().message;
  for (std::string needle : row.expected) {
    for (const auto& [tag, path] : {std::pair<std::string, fs::path>{"<sidecar>", c.sidecar()},
                                    std::pair<std::string, fs::path>{"<config>", c.dir / "config.json"}}) {
      for (auto at = needle.find(tag); at != std::string::npos; at = needle.find(tag))
        needle.replace(at, tag.size(), path.string());
    }
    EXPECT_CONTAINS(resolved.error().message, needle);
  }
  // Messages stay readable even for hostile input.
  EXPECT_LT(resolved.error().message.size(), 2000u);
}

INSTANTIATE_TEST_SUITE_P(Table, MalformedScales, ::testing::ValuesIn(rows()),
                         [](const ::testing::TestParamInfo<Row>& info) { return info.param.name; });

TEST(MalformedScalesTable, CoversAtLeastTwentyFiveMutations) { EXPECT_GE(rows().size(), 25u); }

}  // namespace
}  // namespace jitcache
