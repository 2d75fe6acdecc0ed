// The resolver's behaviour: where each layer's scale comes from, in which order, with what
// provenance and which log lines. Malformed inputs are in test_scale_malformed.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <initializer_list>
#include <string>

#include "jitcache/scales.hpp"
#include "runtime/scales/scale_resolver.hpp"
#include "support/sha256.hpp"
#include "test_scale_support.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using namespace jitcache::testing;

enum class Form { sidecar, inline_object, none };

class ScaleResolverTest : public TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    m_seed = test_seed("scale resolver values");
  }

  // A checkpoint at dir()/sub with the given scales stored as `form`.
  fs::path make_checkpoint(const json& scales, Form form, const fs::path& sub = "ckpt",
                           json config = glm_config()) {
    const fs::path ckpt = dir() / sub;
    fs::create_directories(ckpt);
    if (form == Form::sidecar) {
      const std::string text = scales.dump(2);
      write_text(ckpt / "scales.json", text);
      config[k_scales_config_field] = {{"file", "scales.json"}, {"sha256", sha256_hex(text)}};
    } else if (form == Form::inline_object) {
      config[k_scales_config_field] = scales;
    }
    write_text(ckpt / "config.json", config.dump(2));
    return ckpt;
  }

  fs::path write_file(const std::string& name, const json& value) {
    write_text(dir() / name, value.dump());
    return dir() / name;
  }

  ResolveOptions options(const fs::path& ckpt) {
    ResolveOptions o;
    o.checkpoint_dir = ckpt;
    return o;
  }

  // The scales resolved from a checkpoint that holds `scales` as its sidecar file.
  Result<ResolvedScales> resolve_sidecar(const json& scales) {
    return resolve_scales(options(make_checkpoint(scales, Form::sidecar)));
  }

  std::uint64_t m_seed = 0;
  // Tests start from a known environment and leave the caller's untouched.
  ScopedEnv m_no_override{"VLLM_NVFP4_MLA_SCALES_FILE", std::nullopt};
  ScopedEnv m_no_strict{"JITCACHE_STRICT", std::nullopt};
};

void expect_values(const ResolvedScales& resolved, const json& scales, ScaleSource source) {
  ASSERT_EQ(resolved.num_hidden_layers, 78);
  ASSERT_EQ(resolved.num_draft_layers, 1);
  ASSERT_EQ(resolved.layers.size(), 79u);
  for (int i = 0; i < 78; ++i) {
    const LayerScale& l = resolved.layers[static_cast<std::size_t>(i)];
    EXPECT_EQ(l.layer, i);
    EXPECT_EQ(l.scale, static_cast<float>(scales["scales"][i].get<double>())) << "layer " << i;
    EXPECT_EQ(l.mode, ScaleMode::dynamic) << "layer " << i;
    EXPECT_EQ(l.source, source) << "layer " << i;
    ASSERT_TRUE(l.max_abs.has_value());
    EXPECT_EQ(*l.max_abs, scales["max_abs"][i].get<double>());
  }
}

// Expects `logs` to hold exactly one line at `level`, and that line each of `parts`.
void expect_one_line(const LogCapture& logs, LogLevel level, std::initializer_list<std::string> parts) {
  const auto lines = logs.at(level);
  ASSERT_EQ(lines.size(), 1u);
  for (const std::string& part : parts) EXPECT_CONTAINS(lines[0], part);
}

void expect_draft_identity(const ResolvedScales& resolved) {
  for (std::size_t i = static_cast<std::size_t>(resolved.num_hidden_layers); i < resolved.layers.size(); ++i) {
    const LayerScale& draft = resolved.layers[i];
    EXPECT_EQ(draft.scale, 1.0f);
    EXPECT_EQ(draft.mode, ScaleMode::identity);
    EXPECT_EQ(draft.source, ScaleSource::draft_identity);
    EXPECT_FALSE(draft.max_abs.has_value());
  }
}

TEST_F(ScaleResolverTest, LoadsSidecarFromCheckpoint) {
  const json scales = valid_scales(m_seed);
  const fs::path ckpt = make_checkpoint(scales, Form::sidecar);
  LogCapture logs;
  const auto resolved = resolve_scales(options(ckpt));
  ASSERT_OK(resolved);
  expect_values(*resolved, scales, ScaleSource::checkpoint);
  expect_draft_identity(*resolved);
  const ScaleProvenance& p = resolved->provenance;
  EXPECT_EQ(p.source, ScaleSource::checkpoint);
  EXPECT_EQ(p.checkpoint_form, CheckpointForm::sidecar);
  EXPECT_EQ(p.file, "scales.json");
  EXPECT_EQ(p.format, "nvfp4_ds_mla_outer_scale_v1");
  EXPECT_EQ(p.sha256, sha256_hex(read_text(ckpt / "scales.json")));
  EXPECT_EQ(p.model_revision, "0123456789abcdef0123456789abcdef01234567");
  EXPECT_EQ(json::parse(p.provenance_json), scales["provenance"]);
  EXPECT_TRUE(p.warnings.empty());
  EXPECT_EQ(resolved->count(ScaleMode::identity), 1);
  EXPECT_EQ(resolved->count(ScaleMode::dynamic), 78);
  EXPECT_TRUE(logs.at(LogLevel::warning).empty());
}

TEST_F(ScaleResolverTest, LoadsInlineObjectFromConfig) {
  const json scales = valid_scales(m_seed);
  const fs::path ckpt = make_checkpoint(scales, Form::inline_object);
  const auto resolved = resolve_scales(options(ckpt));
  ASSERT_OK(resolved);
  expect_values(*resolved, scales, ScaleSource::checkpoint);
  expect_draft_identity(*resolved);
  EXPECT_EQ(resolved->provenance.checkpoint_form, CheckpointForm::inline_object);
  EXPECT_EQ(resolved->provenance.file, "config.json");
  // Inline values are pinned by the digest of the file they came from.
  EXPECT_EQ(resolved->provenance.sha256, sha256_hex(read_text(ckpt / "config.json")));
}

TEST_F(ScaleResolverTest, BundledExampleCheckpointResolves) {
  const fs::path example = jitcache::testing::source_dir() / "examples" / "glm5-mini";
  const auto resolved = resolve_scales(options(example));
  ASSERT_OK(resolved);
  ASSERT_EQ(resolved->layers.size(), 79u);
  EXPECT_EQ(resolved->layers[0].scale, static_cast<float>(0.02 / 2688.0));
  EXPECT_EQ(resolved->layers[77].scale, static_cast<float>(5.2 / 2688.0));
  EXPECT_EQ(resolved->layers[0].max_abs, 0.02);
  EXPECT_EQ(resolved->layers[77].max_abs, 5.2);
  // Shallow to deep spans the ~240x the brief describes, rising overall.
  EXPECT_GT(resolved->layers[77].scale / resolved->layers[0].scale, 200.0f);
  expect_draft_identity(*resolved);
  EXPECT_EQ(resolved->provenance.file, "nvfp4_ds_mla_outer_scales.json");
  const json provenance = json::parse(resolved->provenance.provenance_json);
  EXPECT_EQ(provenance["dataset"], "wikitext-2");
  EXPECT_EQ(provenance["context"], 2048);
  EXPECT_EQ(provenance["tp"], 4);
  EXPECT_EQ(provenance["notes"], "synthetic example values, not a real calibration");
}

TEST_F(ScaleResolverTest, IdentityWhenCheckpointHasNoMetadata) {
  const fs::path ckpt = make_checkpoint(json(), Form::none);
  LogCapture logs;
  const auto resolved = resolve_scales(options(ckpt));
  ASSERT_OK(resolved);
  ASSERT_EQ(resolved->layers.size(), 79u);
  for (int i = 0; i < 78; ++i) {
    EXPECT_EQ(resolved->layers[static_cast<std::size_t>(i)].scale, 1.0f);
    EXPECT_EQ(resolved->layers[static_cast<std::size_t>(i)].mode, ScaleMode::identity);
    EXPECT_EQ(resolved->layers[static_cast<std::size_t>(i)].source, ScaleSource::identity_default);
  }
  expect_draft_identity(*resolved);
  EXPECT_EQ(resolved->provenance.source, ScaleSource::identity_default);
  EXPECT_TRUE(resolved->provenance.file.empty());
  EXPECT_TRUE(resolved->provenance.sha256.empty());
  expect_one_line(logs, LogLevel::info, {"identity default", "79 identity"});
}

TEST_F(ScaleResolverTest, ArgumentBeatsEnvironmentBeatsCheckpoint) {
  const json from_checkpoint = valid_scales(m_seed);
  const json from_env = valid_scales(m_seed + 1);
  const json from_argument = valid_scales(m_seed + 2);
  const fs::path ckpt = make_checkpoint(from_checkpoint, Form::sidecar);
  const fs::path env_file = write_file("env.json", from_env);
  const fs::path arg_file = write_file("arg.json", from_argument);
  ScopedEnv env("VLLM_NVFP4_MLA_SCALES_FILE", env_file.string());

  ResolveOptions with_argument = options(ckpt);
  with_argument.override_file = arg_file;
  auto resolved = resolve_scales(with_argument);
  ASSERT_OK(resolved);
  expect_values(*resolved, from_argument, ScaleSource::explicit_override);
  expect_draft_identity(*resolved);
  EXPECT_EQ(resolved->provenance.override_origin, OverrideOrigin::argument);
  EXPECT_EQ(resolved->provenance.file, arg_file.string());
  EXPECT_EQ(resolved->provenance.sha256, sha256_hex(read_text(arg_file)));

  resolved = resolve_scales(options(ckpt));
  ASSERT_OK(resolved);
  expect_values(*resolved, from_env, ScaleSource::explicit_override);
  EXPECT_EQ(resolved->provenance.override_origin, OverrideOrigin::environment);
  EXPECT_EQ(resolved->provenance.file, env_file.string());

  ResolveOptions env_ignored = options(ckpt);
  env_ignored.env = EnvOverride::ignore;
  resolved = resolve_scales(env_ignored);
  ASSERT_OK(resolved);
  expect_values(*resolved, from_checkpoint, ScaleSource::checkpoint);
}

TEST_F(ScaleResolverTest, BlankEnvironmentVariableIsUnset) {
  const json scales = valid_scales(m_seed);
  const fs::path ckpt = make_checkpoint(scales, Form::sidecar);
  for (const char* blank : {"", "   ", "\t\n"}) {
    ScopedEnv env("VLLM_NVFP4_MLA_SCALES_FILE", std::string(blank));
    const auto resolved = resolve_scales(options(ckpt));
    ASSERT_OK(resolved);
    EXPECT_EQ(resolved->provenance.source, ScaleSource::checkpoint);
  }
}

TEST_F(ScaleResolverTest, BlankOverrideArgumentIsUnsetLikeTheEnvironmentVariable) {
  // Issue 10 item 11: "  " as the argument was opened as a file (not found), while the
  // same value in VLLM_NVFP4_MLA_SCALES_FILE counts as unset.
  const json scales = valid_scales(m_seed);
  const fs::path ckpt = make_checkpoint(scales, Form::sidecar);
  for (const char* blank : {"", "   ", "\t\n", " \r\v\f "}) {
    ResolveOptions o = options(ckpt);
    o.override_file = fs::path(blank);
    const auto resolved = resolve_scales(o);
    ASSERT_OK(resolved);
    EXPECT_EQ(resolved->provenance.source, ScaleSource::checkpoint);
    EXPECT_EQ(resolved->provenance.override_origin, OverrideOrigin::none);
  }
}

// Issue 10 item 7: a misspelt scales key silently gave 78 identity layers.
TEST_F(ScaleResolverTest, NearMissScalesKeyWarnsWithDidYouMeanOrFailsInStrictMode) {
  const json scales = valid_scales(m_seed);
  for (const std::string key : {"nvfp4_ds_mla_outer_scale", "NVFP4_DS_MLA_OUTER_SCALES",
                                "nvfp4_ds_mla_outer_sclaes", "nvfp4_ds_mla_outerscales"}) {
    SCOPED_TRACE(key);
    json config = glm_config();
    config[key] = scales;
    const fs::path ckpt =
        make_checkpoint(scales, Form::none, "near-" + std::to_string(key.size()) + key, config);
    {
      LogCapture logs;
      const auto resolved = resolve_scales(options(ckpt));
      ASSERT_OK(resolved);
      EXPECT_EQ(resolved->provenance.source, ScaleSource::identity_default);
      const auto warnings = logs.at(LogLevel::warning);
      ASSERT_EQ(warnings.size(), 1u);
      EXPECT_CONTAINS(warnings[0], (ckpt / "config.json").string() + ": key '" + key + "' is not read");
      EXPECT_CONTAINS(warnings[0], "did you mean the top-level key 'nvfp4_ds_mla_outer_scales'?");
      ASSERT_EQ(resolved->provenance.warnings.size(), 1u);
      EXPECT_EQ(resolved->provenance.warnings[0], warnings[0]);
    }
    ScopedEnv strict("JITCACHE_STRICT", "1");
    const auto resolved = resolve_scales(options(ckpt));
    ASSERT_FALSE(resolved);
    EXPECT_EQ(resolved.error().code, ErrorCode::invalid_input);
    EXPECT_CONTAINS(resolved.error().message, "key '" + key + "' is not read");
    EXPECT_CONTAINS(resolved.error().message, "strict mode");
  }
}

TEST_F(ScaleResolverTest, ScalesKeyInsideQuantizationConfigIsNotReadAndWarns) {
  // jitcache reads the scales from the top level only (docs/scales.md); the right key in
  // quantization_config, or a near miss there, is a WARNING (an error in strict mode).
  const json scales = valid_scales(m_seed);
  for (const std::string key : {"nvfp4_ds_mla_outer_scales", "Nvfp4_Ds_Mla_Outer_Scale"}) {
    SCOPED_TRACE(key);
    json config = glm_config();
    config["quantization_config"] = {{"quant_method", "fp8"}, {key, scales}};
    const fs::path ckpt = make_checkpoint(scales, Form::none, "q" + std::to_string(key.size()), config);
    LogCapture logs;
    const auto resolved = resolve_scales(options(ckpt));
    ASSERT_OK(resolved);
    EXPECT_EQ(resolved->provenance.source, ScaleSource::identity_default);
    expect_one_line(logs, LogLevel::warning, {
        "key 'quantization_config." + key + "' is not read",
        "top-level key 'nvfp4_ds_mla_outer_scales'",
    });
    ScopedEnv strict("JITCACHE_STRICT", "1");
    EXPECT_FALSE(resolve_scales(options(ckpt)));
  }
}

TEST_F(ScaleResolverTest, DistantKeysAndTheRealKeyGiveNoNearMissWarning) {
  const json scales = valid_scales(m_seed);
  json config = glm_config();
  // Edit distance 4 and unrelated keys: not near misses.
  config["nvfp4_ds_mla_outer_sc"] = 1;
  config["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {128, 128}}};
  const fs::path ckpt = make_checkpoint(scales, Form::sidecar, "ckpt", config);
  LogCapture logs;
  ScopedEnv strict("JITCACHE_STRICT", "1");
  const auto resolved = resolve_scales(options(ckpt));
  ASSERT_OK(resolved);
  EXPECT_EQ(resolved->provenance.source, ScaleSource::checkpoint);
  EXPECT_TRUE(logs.at(LogLevel::warning).empty());
}

TEST_F(ScaleResolverTest, UnparsableStrictModeIsAnErrorListingTheAcceptedValues) {
  const fs::path ckpt = make_checkpoint(valid_scales(m_seed), Form::sidecar);
  ScopedEnv strict("JITCACHE_STRICT", "maybe");
  const auto resolved = resolve_scales(options(ckpt));
  ASSERT_FALSE(resolved);
  EXPECT_EQ(resolved.error().code, ErrorCode::invalid_input);
  EXPECT_CONTAINS(resolved.error().message,
                  "JITCACHE_STRICT=maybe: expected a boolean: 1, true, yes, on or 0, "
                  "false, no, off");
}

TEST_F(ScaleResolverTest, OverrideShadowingCheckpointWarnsNamingBoth) {
  const fs::path ckpt = make_checkpoint(valid_scales(m_seed), Form::sidecar);
  const fs::path env_file = write_file("env.json", valid_scales(m_seed + 1));
  ScopedEnv env("VLLM_NVFP4_MLA_SCALES_FILE", env_file.string());
  LogCapture logs;
  const auto resolved = resolve_scales(options(ckpt));
  ASSERT_OK(resolved);
  expect_one_line(logs, LogLevel::warning, {
      env_file.string(),
      "VLLM_NVFP4_MLA_SCALES_FILE",
      "scales.json",
      (ckpt / "config.json").string(),
  });
  EXPECT_EQ(resolved->provenance.shadowed_checkpoint_file, "scales.json");
  expect_one_line(logs, LogLevel::info, {
      "explicit override (VLLM_NVFP4_MLA_SCALES_FILE)",
      resolved->provenance.sha256,
  });
}

TEST_F(ScaleResolverTest, OverrideWithoutCheckpointMetadataDoesNotWarn) {
  const fs::path ckpt = make_checkpoint(json(), Form::none);
  ResolveOptions o = options(ckpt);
  o.override_file = write_file("arg.json", valid_scales(m_seed));
  LogCapture logs;
  const auto resolved = resolve_scales(o);
  ASSERT_OK(resolved);
  EXPECT_TRUE(logs.at(LogLevel::warning).empty());
  EXPECT_TRUE(resolved->provenance.shadowed_checkpoint_file.empty());
}

TEST_F(ScaleResolverTest, OneInfoLinePerResolutionNamesSourceFileDigestAndCounts) {
  const json scales = valid_scales(m_seed);
  LogCapture logs;
  const auto resolved = resolve_sidecar(scales);
  ASSERT_OK(resolved);
  expect_one_line(logs, LogLevel::info, {
      "checkpoint metadata (sidecar)",
      "file scales.json",
      "sha256 " + resolved->provenance.sha256,
      "79 layers (78 + 1 draft)",
      "1 identity",
  });
}

TEST_F(ScaleResolverTest, ScaleOfExactlyOneIsIdentityButKeepsItsSource) {
  json scales = valid_scales(m_seed);
  scales.erase("max_abs");
  scales["scales"][0] = 1.0;
  scales["scales"][40] = 1;  // an integer token is a number too
  const auto resolved = resolve_sidecar(scales);
  ASSERT_OK(resolved);
  EXPECT_EQ(resolved->layers[0].mode, ScaleMode::identity);
  EXPECT_EQ(resolved->layers[0].source, ScaleSource::checkpoint);
  EXPECT_EQ(resolved->layers[40].mode, ScaleMode::identity);
  EXPECT_EQ(resolved->layers[1].mode, ScaleMode::dynamic);
  EXPECT_FALSE(resolved->layers[1].max_abs.has_value());
  EXPECT_EQ(resolved->count(ScaleMode::identity), 3);
}

TEST_F(ScaleResolverTest, EveryDraftLayerStaysIdentity) {
  const json scales = valid_scales(m_seed, 61);
  json config = glm_config(61, 3);
  const fs::path ckpt = make_checkpoint(scales, Form::sidecar, "ckpt", config);
  const auto resolved = resolve_scales(options(ckpt));
  ASSERT_OK(resolved);
  ASSERT_EQ(resolved->layers.size(), 64u);
  EXPECT_EQ(resolved->num_draft_layers, 3);
  EXPECT_EQ(resolved->layers[60].source, ScaleSource::checkpoint);
  expect_draft_identity(*resolved);
}

TEST_F(ScaleResolverTest, WrongLengthMetadataIsRefusedNotTruncated) {
  json scales = valid_scales(m_seed);
  scales["scales"].erase(scales["scales"].size() - 1);
  scales["max_abs"].erase(scales["max_abs"].size() - 1);
  const fs::path ckpt = make_checkpoint(scales, Form::sidecar);
  const auto resolved = resolve_scales(options(ckpt));
  ASSERT_FALSE(resolved);
  EXPECT_EQ(resolved.error().code, ErrorCode::invalid_input);
  EXPECT_CONTAINS(resolved.error().message, (ckpt / "scales.json").string());
  EXPECT_CONTAINS(resolved.error().message, "field 'scales': has 77 entries, expected 78");
}

TEST_F(ScaleResolverTest, MalformedOverrideNamesTheEnvironmentVariable) {
  const fs::path ckpt = make_checkpoint(valid_scales(m_seed), Form::sidecar);
  ScopedEnv env("VLLM_NVFP4_MLA_SCALES_FILE", (dir() / "missing.json").string());
  const auto resolved = resolve_scales(options(ckpt));
  ASSERT_FALSE(resolved);
  EXPECT_EQ(resolved.error().code, ErrorCode::not_found);
  EXPECT_CONTAINS(resolved.error().message, "missing.json");
  EXPECT_CONTAINS(resolved.error().message, "(from VLLM_NVFP4_MLA_SCALES_FILE)");
}

TEST_F(ScaleResolverTest, OverrideMustFitTheModel) {
  const fs::path ckpt = make_checkpoint(json(), Form::none);
  json scales = valid_scales(m_seed, 61);
  ResolveOptions o = options(ckpt);
  o.override_file = write_file("deepseek.json", scales);
  const auto resolved = resolve_scales(o);
  ASSERT_FALSE(resolved);
  EXPECT_CONTAINS(resolved.error().message, "deepseek.json: field 'num_layers': is 61 but the model has 78");
}

TEST_F(ScaleResolverTest, MultipleProblemsAreAllListed) {
  json scales = valid_scales(m_seed);
  scales["scales"][3] = "x";
  scales["scales"][9] = -1.0;
  scales["latent_dim"] = 576;
  const auto resolved = resolve_sidecar(scales);
  ASSERT_FALSE(resolved);
  EXPECT_CONTAINS(resolved.error().message, "(and 2 more problems)");
  EXPECT_CONTAINS(resolved.error().detail, "field 'latent_dim'");
  EXPECT_CONTAINS(resolved.error().detail, "field 'scales[3]'");
  EXPECT_CONTAINS(resolved.error().detail, "field 'scales[9]'");
}

// --- revisions --------------------------------------------------------------------------

TEST_F(ScaleResolverTest, SnapshotRevisionMatchesFullAndAbbreviatedIds) {
  const std::string rev = "0123456789abcdef0123456789abcdef01234567";
  json scales = valid_scales(m_seed);
  const fs::path ckpt =
      make_checkpoint(scales, Form::sidecar, fs::path("models--org--glm") / "snapshots" / rev);
  EXPECT_EQ(scales::snapshot_revision(ckpt), rev);
  auto resolved = resolve_scales(options(ckpt));
  ASSERT_OK(resolved);
  EXPECT_EQ(resolved->provenance.checkpoint_revision, rev);

  scales["model_revision"] = "0123456";  // `git log --oneline` form
  const fs::path ckpt2 =
      make_checkpoint(scales, Form::sidecar, fs::path("models--org--glm2") / "snapshots" / rev);
  ASSERT_OK(resolve_scales(options(ckpt2)));
}

TEST_F(ScaleResolverTest, ExplicitRevisionIsCheckedForCheckpointMetadata) {
  const fs::path ckpt = make_checkpoint(valid_scales(m_seed), Form::inline_object);
  ResolveOptions o = options(ckpt);
  o.checkpoint_revision = "main-2026-01";
  const auto resolved = resolve_scales(o);
  ASSERT_FALSE(resolved);
  EXPECT_EQ(resolved.error().code, ErrorCode::invalid_input);
  EXPECT_CONTAINS(resolved.error().message,
                  "config.json: field 'nvfp4_ds_mla_outer_scales.model_revision'");
  EXPECT_CONTAINS(resolved.error().message, "\"main-2026-01\" (given explicitly)");
}

TEST_F(ScaleResolverTest, OverrideRevisionMismatchWarnsLoudlyOrFailsInStrictMode) {
  const fs::path ckpt = make_checkpoint(json(), Form::none,
                                        fs::path("models--org--glm") / "snapshots" / "feedbeef00");
  json scales = valid_scales(m_seed);
  ResolveOptions o = options(ckpt);
  o.override_file = write_file("other-rev.json", scales);
  {
    LogCapture logs;
    const auto resolved = resolve_scales(o);
    ASSERT_OK(resolved);
    const auto warnings = logs.at(LogLevel::warning);
    ASSERT_EQ(warnings.size(), 1u);
    EXPECT_CONTAINS(warnings[0], "other-rev.json: field 'model_revision'");
    EXPECT_CONTAINS(warnings[0], "\"feedbeef00\"");
    ASSERT_EQ(resolved->provenance.warnings.size(), 1u);
  }
  ScopedEnv strict("JITCACHE_STRICT", "1");
  const auto resolved = resolve_scales(o);
  ASSERT_FALSE(resolved);
  EXPECT_CONTAINS(resolved.error().message, "does not match the checkpoint revision \"feedbeef00\"");
  EXPECT_CONTAINS(resolved.error().message, "strict mode");
}

TEST_F(ScaleResolverTest, SidecarSymlinkIntoHuggingFaceBlobsIsAccepted) {
  // The hub cache stores snapshots/<rev>/file as a symlink to ../../blobs/<sha>.
  const json scales = valid_scales(m_seed);
  const std::string text = scales.dump();
  const fs::path repo = dir() / "models--org--glm";
  const fs::path snapshot = repo / "snapshots" / "0123456789abcdef0123456789abcdef01234567";
  write_text(repo / "blobs" / sha256_hex(text), text);
  fs::create_directories(snapshot);
  fs::create_symlink(fs::path("..") / ".." / "blobs" / sha256_hex(text), snapshot / "scales.json");
  json config = glm_config();
  config[k_scales_config_field] = {{"file", "scales.json"}, {"sha256", sha256_hex(text)}};
  write_text(snapshot / "config.json", config.dump());
  const auto resolved = resolve_scales(options(snapshot));
  ASSERT_OK(resolved);
  expect_values(*resolved, scales, ScaleSource::checkpoint);
}

TEST_F(ScaleResolverTest, SidecarInSubdirectoryIsAccepted) {
  const json scales = valid_scales(m_seed);
  const std::string text = scales.dump();
  const fs::path ckpt = dir() / "ckpt";
  write_text(ckpt / "jitcache" / "scales.json", text);
  json config = glm_config();
  config[k_scales_config_field] = {{"file", "./jitcache/../jitcache/scales.json"},
                                   {"sha256", sha256_hex(text)}};
  write_text(ckpt / "config.json", config.dump());
  const auto resolved = resolve_scales(options(ckpt));
  ASSERT_OK(resolved);
  EXPECT_EQ(resolved->provenance.file, "./jitcache/../jitcache/scales.json");
}

// --- checkpoint config ------------------------------------------------------------------

TEST_F(ScaleResolverTest, ConfigWithoutModelFieldsSaysSo) {
  write_text(dir() / "ckpt" / "config.json", R"({"model_type": "llama", "num_hidden_layers": 32})");
  const auto resolved = resolve_scales(options(dir() / "ckpt"));
  ASSERT_FALSE(resolved);
  EXPECT_CONTAINS(resolved.error().message, "config.json: field 'kv_lora_rank': missing");
}

TEST_F(ScaleResolverTest, ConfigThatIsNotJsonSaysSo) {
  write_text(dir() / "ckpt" / "config.json", "{\"num_hidden_layers\": 78,");
  const auto resolved = resolve_scales(options(dir() / "ckpt"));
  ASSERT_FALSE(resolved);
  EXPECT_CONTAINS(resolved.error().message, "config.json: not valid JSON");
}

TEST_F(ScaleResolverTest, MissingCheckpointIsNotFound) {
  const auto resolved = resolve_scales(options(dir() / "nowhere"));
  ASSERT_FALSE(resolved);
  EXPECT_EQ(resolved.error().code, ErrorCode::not_found);
  EXPECT_CONTAINS(resolved.error().message, "nowhere");
}

TEST_F(ScaleResolverTest, UnknownJitcacheVariableFailsOnlyInStrictMode) {
  const fs::path ckpt = make_checkpoint(json(), Form::none);
  ScopedEnv typo("JITCACHE_STRCT", "1");
  ASSERT_OK(resolve_scales(options(ckpt)));
  ScopedEnv strict("JITCACHE_STRICT", "1");
  const auto resolved = resolve_scales(options(ckpt));
  ASSERT_FALSE(resolved);
  EXPECT_CONTAINS(resolved.error().message, "JITCACHE_STRCT");
  EXPECT_CONTAINS(resolved.error().message, "did you mean JITCACHE_STRICT?");
}

// --- validate_scales_file ---------------------------------------------------------------

TEST_F(ScaleResolverTest, ValidateStandaloneFileWithAndWithoutCheckpoint) {
  const json scales = valid_scales(m_seed, 61);
  const fs::path file = write_file("ds.json", scales);
  ValidateOptions o;
  o.file = file;
  const auto alone = validate_scales_file(o);
  ASSERT_OK(alone);
  EXPECT_EQ(alone->contents.num_layers, 61);
  EXPECT_EQ(alone->sha256, sha256_hex(read_text(file)));

  o.checkpoint_dir = make_checkpoint(json(), Form::none);  // 78 layers
  const auto against_glm = validate_scales_file(o);
  ASSERT_FALSE(against_glm);
  EXPECT_CONTAINS(against_glm.error().message, "field 'num_layers': is 61 but the model has 78");
}

TEST_F(ScaleResolverTest, JsonFormCarriesEveryLayerAndTheProvenance) {
  const json scales = valid_scales(m_seed);
  const auto resolved = resolve_sidecar(scales);
  ASSERT_OK(resolved);
  const json out = scales::to_json(*resolved);
  ASSERT_EQ(out["layers"].size(), 79u);
  EXPECT_EQ(out["layers"][78]["source"], "draft-identity");
  EXPECT_EQ(out["layers"][78]["max_abs"], nullptr);
  EXPECT_EQ(out["layers"][5]["mode"], "dynamic");
  EXPECT_EQ(static_cast<float>(out["layers"][5]["scale"].get<double>()), resolved->layers[5].scale);
  EXPECT_EQ(out["provenance"]["source"], "checkpoint");
  EXPECT_EQ(out["provenance"]["provenance"]["dataset"], "wikitext-2");
  EXPECT_EQ(out["identity_layers"], 1);
}

}  // namespace
}  // namespace jitcache
