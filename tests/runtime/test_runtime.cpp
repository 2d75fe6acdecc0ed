// The linked runtime: prepare() on the bundled GLM-5.x-shaped checkpoint resolves 78
// calibrated layers + 1 draft layer, needs exactly the dynamic and identity variant of
// each kernel, compiles them once, and binds each layer to the right one.
#include <fstream>

#include "jitcache/runtime.hpp"
#include "runtime/compile/binding_guard.hpp"
#include "runtime/compile/compiler.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

const std::filesystem::path k_checkpoint = jitcache::testing::source_dir() / "examples" / "glm5-mini";

class RuntimeTest : public jitcache::testing::TempDirTest {
 protected:
  std::unique_ptr<Runtime> open_runtime(std::function<void(const PrepareProgress&)> progress = {}) {
    RuntimeOptions options;
    options.cache_dir = dir() / "cache";
    options.device = DeviceUse::none;
    options.progress = std::move(progress);
    auto rt = Runtime::open(options);
    EXPECT_TRUE(rt.has_value()) << rt.error().to_string();
    return std::move(*rt);
  }
};

TEST_F(RuntimeTest, PreparesTheBundledCheckpoint) {
  std::vector<PrepareProgress> events;
  auto rt = open_runtime([&](const PrepareProgress& p) { events.push_back(p); });
  ModelSpec model{k_checkpoint, RecordFormat::b12x_432, "sm_100a", std::nullopt, std::nullopt, std::nullopt};
  auto prepared = rt->prepare(model);
  ASSERT_OK(prepared);
  const PreparedModel& m = **prepared;
  ASSERT_EQ(m.layers().size(), 79u);
  EXPECT_EQ(m.stats().variants, 4u);
  EXPECT_EQ(m.stats().compiled, 4u);
  EXPECT_EQ(m.stats().cached, 0u);
  EXPECT_EQ(events.size(), 4u);
  EXPECT_EQ(events.back().done, 4u);

  int dynamic = 0;
  for (const LayerBinding& b : m.layers()) {
    ASSERT_NE(b.writer, nullptr);
    ASSERT_NE(b.gather, nullptr);
    const KernelInfo& w = m.info(*b.writer);
    const KernelInfo& g = m.info(*b.gather);
    EXPECT_EQ(w.kernel, KernelKind::writer);
    EXPECT_EQ(g.kernel, KernelKind::gather);
    EXPECT_EQ(w.target, "sm_100a");
    EXPECT_FALSE(w.loaded);
    const LatentScale needed = b.mode == ScaleMode::identity ? LatentScale::identity : LatentScale::dynamic;
    EXPECT_EQ(w.latent_scale, needed) << "layer " << b.layer;
    EXPECT_EQ(g.latent_scale, needed) << "layer " << b.layer;
    if (b.mode == ScaleMode::dynamic) {
      ++dynamic;
      EXPECT_NE(b.scale, 1.0f);
    }
  }
  EXPECT_EQ(dynamic, 78);
  const LayerBinding* draft = m.layer(78);
  ASSERT_NE(draft, nullptr);
  EXPECT_EQ(draft->source, ScaleSource::draft_identity);
  EXPECT_EQ(draft->scale, 1.0f);
  EXPECT_EQ(m.layer(79), nullptr);
  EXPECT_EQ(m.layer(-1), nullptr);
}

TEST_F(RuntimeTest, SecondPrepareCompilesNothing) {
  ModelSpec model{k_checkpoint, RecordFormat::b12x_368, "sm_90", std::nullopt, std::nullopt, std::nullopt};
  {
    auto rt = open_runtime();
    ASSERT_OK(rt->prepare(model));
  }
  auto rt = open_runtime();
  auto again = rt->prepare(model);
  ASSERT_OK(again);
  EXPECT_EQ((*again)->stats().compiled, 0u);
  EXPECT_EQ((*again)->stats().cached, 4u);
  auto third = rt->prepare(model);
  ASSERT_OK(third);
  EXPECT_EQ((*third)->stats().compiled, 0u);
}

TEST_F(RuntimeTest, IdentityCheckpointNeedsOnlyIdentityVariants) {
  // A checkpoint without scales metadata: every layer identity.
  const auto ckpt = dir() / "plain";
  std::filesystem::create_directories(ckpt);
  {
    std::ofstream out(ckpt / "config.json");
    out << R"({"num_hidden_layers": 61, "num_nextn_predict_layers": 1, "kv_lora_rank": 512,
               "qk_rope_head_dim": 64})";
  }
  jitcache::testing::ScopedEnv no_override("VLLM_NVFP4_MLA_SCALES_FILE", nullptr);
  auto rt = open_runtime();
  auto prepared = rt->prepare(ModelSpec{ckpt, RecordFormat::b12x_432, "sm_120a", std::nullopt, std::nullopt, std::nullopt});
  ASSERT_OK(prepared);
  EXPECT_EQ((*prepared)->stats().variants, 2u);
  for (const auto& k : (*prepared)->kernels()) EXPECT_EQ(k.latent_scale, LatentScale::identity);
}

TEST_F(RuntimeTest, ErrorsNameTheProblem) {
  auto rt = open_runtime();
  auto no_target = rt->prepare(ModelSpec{k_checkpoint, RecordFormat::b12x_432, "", std::nullopt, std::nullopt, std::nullopt});
  ASSERT_FALSE(no_target);
  EXPECT_EQ(no_target.error().code, ErrorCode::unavailable);
  auto bad_target = rt->prepare(ModelSpec{k_checkpoint, RecordFormat::b12x_432, "sm_12", std::nullopt, std::nullopt, std::nullopt});
  ASSERT_FALSE(bad_target);
  EXPECT_NE(bad_target.error().message.find("sm_12"), std::string::npos);
  auto missing = rt->prepare(ModelSpec{dir() / "nowhere", RecordFormat::b12x_432, "sm_90", std::nullopt, std::nullopt, std::nullopt});
  ASSERT_FALSE(missing);
  EXPECT_FALSE(rt->device().available);
  EXPECT_FALSE(rt->device().reason.empty());
}

TEST_F(RuntimeTest, LaunchWithoutAGpuIsUnavailableNotACrash) {
  auto rt = open_runtime();
  auto prepared = rt->prepare(ModelSpec{k_checkpoint, RecordFormat::b12x_432, "sm_90", std::nullopt, std::nullopt, std::nullopt});
  ASSERT_OK(prepared);
  alignas(16) static std::uint8_t buffer[4096];
  WriterLaunch w;
  w.kv_c = w.k_pe = w.slot_mapping = reinterpret_cast<std::uintptr_t>(buffer);
  w.cache = w.kv_c + 2048;  // written, so apart from the rest (the launch contract)
  w.num_tokens = 1;
  w.num_slots = 1;
  auto r = (*prepared)->launch_writer(3, w, nullptr);
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().code, ErrorCode::unavailable);
  auto bad_layer = (*prepared)->launch_writer(500, w, nullptr);
  ASSERT_FALSE(bad_layer);
  EXPECT_EQ(bad_layer.error().code, ErrorCode::invalid_argument);
  w.kv_c += 2;  // misaligned
  auto misaligned = (*prepared)->launch_writer(3, w, nullptr);
  ASSERT_FALSE(misaligned);
  EXPECT_EQ(misaligned.error().code, ErrorCode::invalid_argument);
}

TEST(BindingGuard, RefusesAnIdentityArtifactForACalibratedLayer) {
  const auto compiler = make_nvrtc_compiler();
  const KernelSpec identity{KernelKind::writer, LatentScale::identity, RecordFormat::b12x_432, Target{"sm_90"}};
  auto artifact = compiler->compile(generate(identity));
  ASSERT_OK(artifact);
  auto embedded = facts_from_cubin(artifact->cubin);
  ASSERT_OK(embedded);
  LayerScale calibrated{17, 0.0019f, ScaleMode::dynamic, ScaleSource::checkpoint, 5.2};
  KernelSpec wanted = identity;
  wanted.latent_scale = LatentScale::dynamic;
  auto r = check_binding(calibrated, LatentPolicy::per_layer, wanted, *embedded);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("layer 17"), std::string::npos) << r.error().message;
  EXPECT_NE(r.error().message.find("latent_scale=identity"), std::string::npos) << r.error().message;

  LayerScale draft{78, 1.0f, ScaleMode::identity, ScaleSource::draft_identity, std::nullopt};
  EXPECT_OK(check_binding(draft, LatentPolicy::per_layer, identity, *embedded));
  KernelSpec other_target = identity;
  other_target.target = Target{"sm_120a"};
  EXPECT_FALSE(check_binding(draft, LatentPolicy::per_layer, other_target, *embedded));
  FactMap missing = *embedded;
  missing.erase("latent_scale");
  EXPECT_FALSE(check_binding(draft, LatentPolicy::per_layer, identity, missing));
}

}  // namespace
}  // namespace jitcache
