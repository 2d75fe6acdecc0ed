// The kernel bundle format: round trip, a golden file pinning the bytes of format
// version 1, and every kind of damage coming back as an error, never a crash.
#include <cstring>
#include <fstream>
#include <iterator>

#include "runtime/compile/artifact_bundle.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

CompiledArtifact sample() {
  CompiledArtifact a;
  a.spec = {KernelKind::gather, LatentScale::dynamic, RecordFormat::b12x_368, Target{"sm_100a"}};
  a.entry = "jc_nvfp4_mla_gather";
  a.cubin = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0x33, 0, 0xff};
  a.ptx = ".version 9.0\n.target sm_100a\n";
  a.log = "ptxas info    : Used 32 registers";
  a.options = {"--gpu-architecture=sm_100a", "--fmad=false"};
  a.usage = {32, 0, 0, 0};
  a.compile_ms = 123.5;
  a.facts = {{"kernel", "gather"}, {"latent_scale", "dynamic"}, {"rope", "fp8"}, {"target", "sm_100a"}};
  return a;
}

const std::filesystem::path k_golden =
    jitcache::testing::source_dir() / "tests" / "runtime" / "compile" / "golden" / "kernel_bundle_v1.bin";

TEST(ArtifactBundle, RoundTrips) {
  const CompiledArtifact a = sample();
  auto back = parse_bundle(serialize_bundle(a));
  ASSERT_OK(back);
  EXPECT_EQ(back->spec, a.spec);
  EXPECT_EQ(back->entry, a.entry);
  EXPECT_EQ(back->cubin, a.cubin);
  EXPECT_EQ(back->ptx, a.ptx);
  EXPECT_EQ(back->log, a.log);
  EXPECT_EQ(back->options, a.options);
  EXPECT_EQ(back->usage.registers, 32);
  EXPECT_EQ(back->usage.spill_store_bytes, 0);
  EXPECT_EQ(back->compile_ms, 123.5);
  EXPECT_EQ(back->facts, a.facts);
}

TEST(ArtifactBundle, SkippingTextKeepsWhatLoadingNeeds) {
  const CompiledArtifact a = sample();
  auto lean = parse_bundle(serialize_bundle(a), BundleText::skip);
  ASSERT_OK(lean);
  EXPECT_TRUE(lean->ptx.empty());
  EXPECT_TRUE(lean->log.empty());
  EXPECT_EQ(lean->cubin, a.cubin);
  EXPECT_EQ(lean->entry, a.entry);
  EXPECT_EQ(lean->facts, a.facts);
  EXPECT_EQ(lean->usage.registers, 32);
  auto damaged = serialize_bundle(a);
  damaged[damaged.size() / 2] ^= std::byte{1};
  EXPECT_FALSE(parse_bundle(damaged, BundleText::skip)) << "the checksum covers the skipped text too";
}

TEST(ArtifactBundle, MatchesGoldenFileOfThisFormatVersion) {
  std::ifstream in(k_golden, std::ios::binary);
  ASSERT_TRUE(in) << "missing " << k_golden;
  const std::vector<char> raw((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> golden(raw.size());
  std::memcpy(golden.data(), raw.data(), raw.size());
  const auto now = serialize_bundle(sample());
  EXPECT_EQ(now, golden)
      << "The bundle bytes changed. If the format changed, bump k_bundle_format_version in "
         "runtime/compile/artifact_bundle.hpp and write a new golden file; old caches must not be misread.";
  auto parsed = parse_bundle(golden);
  ASSERT_OK(parsed);
  EXPECT_EQ(parsed->spec, sample().spec);
}

TEST(ArtifactBundle, EveryTruncationIsAnError) {
  const auto bytes = serialize_bundle(sample());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    auto r = parse_bundle(std::span(bytes).first(n));
    ASSERT_FALSE(r) << "truncated to " << n << " bytes was accepted";
    EXPECT_EQ(r.error().code, ErrorCode::invalid_input);
  }
}

TEST(ArtifactBundle, EveryFlippedByteIsAnError) {
  const auto bytes = serialize_bundle(sample());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    auto damaged = bytes;
    damaged[i] ^= std::byte{0x20};
    ASSERT_FALSE(parse_bundle(damaged)) << "flip at " << i << " was accepted";
  }
}

TEST(ArtifactBundle, RejectsForeignAndIncompleteBundles) {
  std::vector<std::byte> junk(64, std::byte{0x41});
  auto r = parse_bundle(junk);
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("magic"), std::string::npos);

  CompiledArtifact no_spec = sample();
  no_spec.facts.erase("latent_scale");
  r = parse_bundle(serialize_bundle(no_spec));
  ASSERT_FALSE(r);
  EXPECT_NE(r.error().message.find("latent_scale"), std::string::npos);

  CompiledArtifact bad_target = sample();
  bad_target.facts["target"] = "sm_12";
  EXPECT_FALSE(parse_bundle(serialize_bundle(bad_target)));
}

}  // namespace
}  // namespace jitcache
