// On a machine with a GPU: the device kernels, prepared by the runtime and launched
// through its wrappers, are bit-identical to the host executor for both kernels x both
// latent-scale modes x both RoPE layouts on fresh random data; the identity guard
// fires on the device; and the hardware conversions the kernels use in place of the
// host's software ones agree with them on every input they can receive (small check
// kernels over the kernel header, compiled by the library's NVRTC back end). Without a
// GPU every test here skips.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "bench/rcp_table_kernel.hpp"
#include "jitcache/runtime.hpp"
#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/compile/compiler.hpp"
#include "runtime/device/cuda_driver.hpp"
#include "runtime/kv/host_executor.hpp"
#include "runtime/kv/rcp_approx.hpp"
#include "runtime/compile/kernel_cache.hpp"
#include "runtime/compile/source_compiler.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

const std::filesystem::path k_checkpoint = jitcache::testing::source_dir() / "examples" / "glm5-mini";
// The identity-only (page-major) formats take a checkpoint without per-layer scales.
const std::filesystem::path k_identity_checkpoint = jitcache::testing::source_dir() / "examples" / "dsv4-mini";

bool identity_only(RecordFormat format) {
  return !format_allows(format, LatentScale::dynamic) && !format_allows(format, LatentScale::per_token);
}

// A device allocation freed on scope exit.
class DeviceBuffer {
 public:
  DeviceBuffer(const CudaDriver& driver, std::size_t bytes) : m_driver(driver), m_bytes(bytes) {
    EXPECT_OK(m_driver.check(m_driver.api().cuMemAlloc(&m_ptr, bytes ? bytes : 16), "cuMemAlloc"));
  }
  ~DeviceBuffer() {
    if (m_ptr) m_driver.api().cuMemFree(m_ptr);
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::uint64_t addr() const { return m_ptr; }
  void upload(const void* data) { EXPECT_OK(m_driver.check(m_driver.api().cuMemcpyHtoD(m_ptr, data, m_bytes), "HtoD")); }
  template <class T>
  std::vector<T> download() const {
    std::vector<T> out(m_bytes / sizeof(T));
    EXPECT_OK(m_driver.check(m_driver.api().cuMemcpyDtoH(out.data(), m_ptr, m_bytes), "DtoH"));
    return out;
  }
  void fill(unsigned char byte) { EXPECT_OK(m_driver.check(m_driver.api().cuMemsetD8(m_ptr, byte, m_bytes), "memset")); }

 private:
  const CudaDriver& m_driver;
  std::size_t m_bytes;
  CUdeviceptr m_ptr = 0;
};

class GpuTest : public jitcache::testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    auto driver = CudaDriver::load();
    if (!driver) GTEST_SKIP() << "no GPU: " << driver.error().message;
    m_driver = *driver;
    RuntimeOptions options;
    options.cache_dir = dir() / "cache";
    auto rt = Runtime::open(options);
    ASSERT_OK(rt);
    m_runtime = std::move(*rt);
    ASSERT_TRUE(m_runtime->device().available) << m_runtime->device().reason;
    std::printf("[gpu] %s, target %s\n", m_runtime->device().name.c_str(), m_runtime->device().target.c_str());
  }
  void TearDown() override {
    if (m_checks != nullptr) m_driver->api().cuModuleUnload(m_checks);
    TempDirTest::TearDown();
  }

  // A kernel of k_check_kernels, compiled for this device through the library's NVRTC back
  // end (the same options and embedded headers as the product kernels).
  CUfunction check_kernel(const char* entry);

  // Runs a check kernel `(u32 param, u64 count, u32* result)` over `count` inputs (for the
  // bit-pattern checks, the fp32 patterns [param, param + count)): result[0] counts
  // mismatches, result[1..8] keeps some of them.
  std::vector<std::uint32_t> run_check(const char* entry, std::uint32_t param, std::uint64_t count);

  std::shared_ptr<CudaDriver> m_driver;
  std::unique_ptr<Runtime> m_runtime;
  CUmodule m_checks = nullptr;
};

// Without a target, prepare() gives the device the most specific target for it (the cache
// is empty) and loads its cubins; a target whose cubin NVIDIA's rule says cannot run here
// is refused before anything is compiled.
TEST_F(GpuTest, PrepareGivesTheDeviceATargetThatRunsOnItAndRefusesOneThatCannot) {
  const DeviceInfo& info = m_driver->device();
  const std::vector<std::string> here = targets_for_device(info.major, info.minor);
  if (here.empty()) GTEST_SKIP() << "no target of this build runs on " << info.name;
  EXPECT_EQ(m_runtime->device().target, here.front());
  const std::filesystem::path checkpoint = jitcache::testing::source_dir() / "examples" / "glm5-mini";
  ModelSpec model;
  model.checkpoint = checkpoint;
  auto prepared = m_runtime->prepare(model);
  ASSERT_OK(prepared);
  EXPECT_EQ((*prepared)->target(), here.front());
  for (const LayerBinding& b : (*prepared)->layers()) {
    EXPECT_TRUE((*prepared)->info(*b.writer).loaded);
    EXPECT_FALSE((*prepared)->info(*b.writer).ptx_fallback);
  }
  for (std::string_view other : supported_targets()) {
    if (cubin_runs_on(other, info.major, info.minor)) continue;
    model.target = std::string(other);
    auto refused = m_runtime->prepare(model);
    ASSERT_FALSE(refused) << other;
    EXPECT_EQ(refused.error().code, ErrorCode::invalid_argument) << other;
    EXPECT_NE(refused.error().message.find("cannot run on a device of compute capability " +
                                           capability_text(info.major, info.minor)),
              std::string::npos)
        << refused.error().message;
  }
}

// Check kernels: each runs the GPU's hardware path of one conversion and the software
// definition the host executor uses (the same header text, compiled for the device)
// side by side and counts the inputs where they differ.
constexpr const char* k_check_kernels = R"(
#include "jitcache/nvfp4_mla.cuh"
using namespace jc;

__device__ void note_mismatch(u32* result, u32 input) {
  const u32 n = atomicAdd(&result[0], 1u);
  if (n < 8u) result[1 + n] = input;
}

// Calls check(i) for each input i below count, spread over the whole grid.
template <class Check>
__device__ void for_each_input(u64 count, Check check) {
  for (u64 i = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x; i < count;
       i += static_cast<u64>(gridDim.x) * blockDim.x)
    check(i);
}

// Every fp32 input `bits` (first + i) through a packed conversion of (bits, bits with its
// sign flipped), so that every pattern goes through either half, against the software
// conversion of each: the low half, and the high one from bit `shift` on. NaN inputs are
// left out where the packed conversion is not meant for them.
enum class NanInputs { checked, left_out };
template <class Packed, class Convert>
__device__ void check_packed_pair(u32 first, u64 count, u32* result, int shift, NanInputs nans, Packed packed,
                                  Convert convert) {
  for_each_input(count, [&](u64 i) {
    const u32 bits = first + static_cast<u32>(i);
    if (nans == NanInputs::left_out && is_nan(bits_float(bits))) return;
    const u32 pair = packed(bits_float(bits), bits_float(bits ^ 0x80000000u));
    const u32 expected = static_cast<u32>(convert(bits_float(bits))) |
                         (static_cast<u32>(convert(bits_float(bits ^ 0x80000000u))) << shift);
    if (pair != expected) note_mismatch(result, bits);
  });
}

// The block scale: e4m3_encode_nonnegative (cvt.rn.satfinite.e4m3x2.f32) against
// float_to_e4m3_satfinite.
extern "C" __global__ void jc_check_e4m3_encode(u32 first, u64 count, u32* result) {
  for_each_input(count, [&](u64 i) {
    const u32 bits = first + static_cast<u32>(i);
    if (e4m3_encode_nonnegative(bits_float(bits)) != float_to_e4m3_satfinite(bits_float(bits)))
      note_mismatch(result, bits);
  });
}

// Every E4M3 code's value: e4m3_value (cvt.rn.f16x2.e4m3x2, cvt.f32.f16) against
// e4m3_to_float, bit for bit; the NaN codes only need to decode to a NaN.
extern "C" __global__ void jc_check_e4m3_value(u32 first, u64 count, u32* result) {
  for_each_input(count, [&](u64 i) {
    const u8 code = static_cast<u8>(first + i);
    const float hw = e4m3_value(code), sw = e4m3_to_float(code);
    const bool same = is_nan(sw) ? is_nan(hw) : float_bits(hw) == float_bits(sw);
    if (!same) note_mismatch(result, code);
  });
}

// bf16 rounding: bf16x2_rn (cvt.rn.bf16x2.f32 and the NaN select) against float_to_bf16,
// both halves (the high half gets the input with its sign flipped, so every pattern goes
// through either position).
extern "C" __global__ void jc_check_bf16_round(u32 first, u64 count, u32* result) {
  check_packed_pair(
      first, count, result, 16, NanInputs::checked, [](float lo, float hi) { return bf16x2_rn(lo, hi); },
      [](float x) { return float_to_bf16(x); });
}

// For the record, not a requirement: the NaN inputs whose bare cvt.rn.bf16x2.f32 result is
// not the canonical 0x7FFF (the select in bf16x2_rn makes the kernels independent of it).
extern "C" __global__ void jc_count_bf16_noncanonical_nan(u32 first, u64 count, u32* result) {
  for_each_input(count, [&](u64 i) {
    const u32 bits = first + static_cast<u32>(i);
    if (!is_nan(bits_float(bits))) return;
    u32 pair;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(pair) : "f"(0.0f), "f"(bits_float(bits)));
    if ((pair & 0xffffu) != 0x7fffu) note_mismatch(result, bits);
  });
}

// bf16x2_rn_not_nan (the bare cvt.rn.bf16x2.f32) against float_to_bf16 on non-NaN inputs.
extern "C" __global__ void jc_check_bf16_round_not_nan(u32 first, u64 count, u32* result) {
  check_packed_pair(
      first, count, result, 16, NanInputs::left_out, [](float lo, float hi) { return bf16x2_rn_not_nan(lo, hi); },
      [](float x) { return float_to_bf16(x); });
}

// The gather's latent dequantization (packed bf16 products) against the brief's formula in
// fp32 and software rounding: thread i takes scale byte i >> 8 and code byte i & 0xFF (two
// elements), placed in all four bytes of the code word. `param` is the latent scale's bits
// (dynamic) and is ignored by the identity check.
template <LatentMode LM>
__device__ void check_dequantize(u32 param, u64 count, u32* result) {
  const u64 i = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const u8 sf = static_cast<u8>(i >> 8);
  const u32 code_byte = static_cast<u32>(i & 0xffu);
  const float s = bits_float(param);
  u32 words[4];
  dequantize8<LM>(code_byte * 0x01010101u, sf, s, words);
  for (int k = 0; k < 4; ++k) {
    u32 expected = 0u;
    for (int j = 0; j < 2; ++j) {
      float y = mul_rn(e2m1_to_float(static_cast<u8>((code_byte >> (4 * j)) & 0xfu)), e4m3_to_float(sf));
      if (LM == LatentMode::dynamic) y = mul_rn(y, s);
      expected |= static_cast<u32>(float_to_bf16(y)) << (16 * j);
    }
    if (words[k] != expected) {
      note_mismatch(result, static_cast<u32>(i));
      return;
    }
  }
}
extern "C" __global__ void jc_check_dequantize_identity(u32 param, u64 count, u32* result) {
  check_dequantize<LatentMode::identity>(param, count, result);
}
extern "C" __global__ void jc_check_dequantize_dynamic(u32 param, u64 count, u32* result) {
  check_dequantize<LatentMode::dynamic>(param, count, result);
}

// The gather's fp8 RoPE: every pair of E4M3 codes through e4m3x2_values, times the RoPE
// scale (bits in `param`), rounded by bf16x2_rn, against the software path.
extern "C" __global__ void jc_check_rope_dequantize(u32 param, u64 count, u32* result) {
  const u64 i = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const float rope_scale = bits_float(param);
  float lo, hi;
  e4m3x2_values(static_cast<u32>(i), &lo, &hi);
  const u32 pair = bf16x2_rn(mul_rn(lo, rope_scale), mul_rn(hi, rope_scale));
  const u32 expected =
      static_cast<u32>(float_to_bf16(mul_rn(e4m3_to_float(static_cast<u8>(i)), rope_scale))) |
      (static_cast<u32>(float_to_bf16(mul_rn(e4m3_to_float(static_cast<u8>(i >> 8)), rope_scale))) << 16);
  if (pair != expected) note_mismatch(result, static_cast<u32>(i));
}

// The writer's packed comparisons and max (set.gtu/geu/nan.u32.bf16x2, max.bf16x2) against
// the host's per-half definitions: input i is the bf16 pair a = i & 0xFFFF, b = i >> 16,
// compared as (a, b) in the low halves and (b, a) in the high halves, so all 2^32 ordered
// pairs are covered twice. max only takes operands with the sign bit clear; when both are
// NaN only NaN-ness is required (the host returns 0x7FFF, the GPU its canonical NaN, and
// the writer never uses that value: every amax is combined with +0 afterwards).
extern "C" __global__ void jc_check_bf16x2_compare(u32 first, u64 count, u32* result) {
  for_each_input(count, [&](u64 i) {
    const u32 ab = first + static_cast<u32>(i);
    const u32 a = ab & 0xffffu, b = ab >> 16;
    const u32 x = a | (b << 16), y = b | (a << 16);
    const float fa = bf16_to_float(static_cast<u16>(a)), fb = bf16_to_float(static_cast<u16>(b));
    const u32 gtu = half_mask(!(fa <= fb), !(fb <= fa)), geu = half_mask(!(fa < fb), !(fb < fa));
    const u32 nan = half_mask(is_nan(fa), is_nan(fb));
    bool same = bf16x2_gtu_mask(x, y) == gtu && bf16x2_geu_mask(x, y) == geu && bf16x2_nan_mask(x) == nan;
    if ((a & 0x8000u) == 0u && (b & 0x8000u) == 0u) {
      const u32 m = bf16x2_max_num(x, y);
      if (is_nan(fa) && is_nan(fb)) {
        same = same && is_nan(bf16_to_float(static_cast<u16>(m))) && is_nan(bf16_to_float(static_cast<u16>(m >> 16)));
      } else {
        const u32 larger = is_nan(fa) ? b : (is_nan(fb) || fa > fb ? a : b);
        same = same && m == (larger | (larger << 16));
      }
    }
    if (!same) note_mismatch(result, ab);
  });
}

// The fp8 RoPE's codes: e4m3x2_encode (cvt.rn.satfinite.e4m3x2.f32 and the NaN selects)
// against float_to_e4m3_satfinite on every fp32 input, both halves (the high one gets the
// input with its sign flipped).
extern "C" __global__ void jc_check_e4m3x2_encode(u32 first, u64 count, u32* result) {
  check_packed_pair(
      first, count, result, 8, NanInputs::checked, [](float lo, float hi) { return e4m3x2_encode(lo, hi); },
      [](float x) { return float_to_e4m3_satfinite(x); });
}

// The identity writer's thresholds, bf16 products of the scale code's bits (subnormal for
// codes 1..7) and t * 2^120, against t * sf in fp32, for every scale code 1..0x7E.
extern "C" __global__ void jc_check_identity_thresholds(u32 first, u64 count, u32* result) {
  const u64 i = static_cast<u64>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  const u8 sf = static_cast<u8>(first + i);
  const E2M1Thresholds th = e2m1_thresholds<LatentMode::identity>(sf, 1.0f);
  const E2M1Bounds c = e2m1_bounds(e4m3_to_float(sf));
  for (int k = 0; k < 7; ++k) {
    const u32 h = float_bits(c.c[k]) >> 16;
    if (th.t[k] != (h | (h << 16)) || (float_bits(c.c[k]) & 0xffffu) != 0u) {
      note_mismatch(result, sf);
      return;
    }
  }
}
)";

// k_check_kernels compiled for `target` through the library's NVRTC back end (the same
// options and embedded headers as the product kernels).
Result<CompiledArtifact> compile_check_kernels(const std::string& target) {
  GeneratedSource source;
  source.spec = KernelSpec{KernelKind::writer, LatentScale::identity, RecordFormat::b12x_432, Target{target}};
  source.program_name = "jc_conversion_checks.cu";
  source.entry = "jc_check_e4m3_encode";
  source.source = k_check_kernels;
  const auto headers = kernel_templates::embedded_headers();
  source.headers.assign(headers.begin(), headers.end());
  return make_nvrtc_compiler()->compile(source);
}

CUfunction GpuTest::check_kernel(const char* entry) {
  if (m_checks == nullptr) {
    auto artifact = compile_check_kernels(m_runtime->device().target);
    EXPECT_OK(artifact);
    if (!artifact) return nullptr;
    EXPECT_OK(m_driver->check(
        m_driver->api().cuModuleLoadDataEx(&m_checks, artifact->cubin.data(), 0, nullptr, nullptr),
        "cuModuleLoadDataEx"));
  }
  CUfunction fn = nullptr;
  EXPECT_OK(m_driver->check(m_driver->api().cuModuleGetFunction(&fn, m_checks, entry), entry));
  return fn;
}

std::vector<std::uint32_t> GpuTest::run_check(const char* entry, std::uint32_t param, std::uint64_t count) {
  CUfunction fn = check_kernel(entry);
  if (fn == nullptr) return {~0u};
  DeviceBuffer result(*m_driver, 9 * sizeof(std::uint32_t));
  result.fill(0);
  CUdeviceptr result_ptr = result.addr();
  void* args[] = {&param, &count, &result_ptr};
  const unsigned blocks = static_cast<unsigned>(std::min<std::uint64_t>((count + 255) / 256, 4096));
  EXPECT_OK(m_driver->check(m_driver->api().cuLaunchKernel(fn, blocks, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr),
                            entry));
  EXPECT_OK(m_driver->check(m_driver->api().cuCtxSynchronize(), entry));
  return result.download<std::uint32_t>();
}

// Prints up to eight recorded mismatching inputs of a check.
std::string mismatches_text(const std::vector<std::uint32_t>& result) {
  std::string text = std::to_string(result.at(0)) + " mismatches";
  char hex[16];
  for (std::uint32_t i = 0; i < std::min<std::uint32_t>(result[0], 8); ++i) {
    std::snprintf(hex, sizeof hex, " 0x%08x", result[1 + i]);
    text += hex;
  }
  return text;
}

std::vector<std::uint16_t> random_rows(std::mt19937_64& rng, std::size_t tokens) {
  std::vector<std::uint16_t> rows(tokens * 576);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> log_mag(std::log(0.004f), std::log(8.0f));
  for (std::size_t t = 0; t < tokens; ++t) {
    const float mag = std::exp(log_mag(rng));
    for (std::size_t c = 0; c < 576; ++c) rows[t * 576 + c] = jc::float_to_bf16(normal(rng) * mag);
  }
  return rows;
}

TEST_F(GpuTest, DeviceMatchesHostExecutorBitForBit) {
  std::mt19937_64 rng(jitcache::testing::test_seed("GpuTest.DeviceMatchesHostExecutorBitForBit"));
  const std::size_t tokens = 4099;  // not a multiple of the CTA's four tokens
  const std::size_t slots = 4224;  // tokens + 125 free slots, and whole 64-slot pages
  // Every format as prepare() binds it (b12x-304 per-token, the others per layer), then
  // b12x-368 per-token.
  std::vector<std::pair<RecordFormat, std::optional<LatentScale>>> models;
  for (RecordFormat format : k_record_formats.values()) models.emplace_back(format, std::nullopt);
  models.emplace_back(RecordFormat::b12x_368, LatentScale::per_token);
  for (const auto& [rope, latent_choice] : models) {
    auto prepared =
        m_runtime->prepare(ModelSpec{identity_only(rope) ? k_identity_checkpoint : k_checkpoint, rope, "",
                                     std::nullopt, std::nullopt, latent_choice});
    ASSERT_OK(prepared);
    const PreparedModel& m = **prepared;
    const std::size_t rb = static_cast<std::size_t>(record_bytes(rope));
    // Layer 0 is calibrated (dynamic), the draft layer 78 is identity.
    for (int layer : identity_only(rope) ? std::vector<int>{0, 2, 4} : std::vector<int>{0, 40, 78}) {
      const LayerBinding* b = m.layer(layer);
      ASSERT_NE(b, nullptr);
      SCOPED_TRACE(std::string(to_string(rope)) + " layer " + std::to_string(layer));
      const auto rows = random_rows(rng, tokens);
      std::vector<std::int64_t> slot_of(tokens);
      std::vector<std::int64_t> perm(slots);
      for (std::size_t i = 0; i < slots; ++i) perm[i] = static_cast<std::int64_t>(i);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (std::size_t t = 0; t < tokens; ++t) slot_of[t] = (rng() % 13 == 0) ? -1 : perm[t];
      // A page-major writer defines duplicate slots (the lowest row wins): the warp's scan
      // of the earlier rows against the host's record of them.
      if (k_record_formats[rope].page_size > 1)
        for (std::size_t t = 3; t < tokens; t += 11) slot_of[t] = slot_of[t - 3 + rng() % 2];

      // Host.
      std::vector<jc::Vec16> host_cache((slots * rb + 15) / 16);
      std::memset(host_cache.data(), 0x3c, slots * rb);
      jc::WriterParams hw{rows.data(), 576, rows.data() + 512, 576, slot_of.data(), static_cast<jc::i64>(tokens),
                          reinterpret_cast<jc::u8*>(host_cache.data()), static_cast<jc::i64>(slots), nullptr};
      const LatentScale mode = b->latent_scale;  // the binding's mode: per-token, or the layer's
      auto host_status = host_run_writer(mode, rope, hw, b->scale);
      ASSERT_OK(host_status);
      ASSERT_EQ(*host_status, 0u);

      // Device.
      DeviceBuffer d_rows(*m_driver, rows.size() * 2), d_slots(*m_driver, tokens * 8),
          d_cache(*m_driver, slots * rb), d_status(*m_driver, 4);
      d_rows.upload(rows.data());
      d_slots.upload(slot_of.data());
      d_cache.fill(0x3c);
      d_status.fill(0);
      WriterLaunch w{d_rows.addr(), 576, d_rows.addr() + 1024, 576, d_slots.addr(), static_cast<std::int64_t>(tokens),
                     d_cache.addr(), static_cast<std::int64_t>(slots), d_status.addr()};
      ASSERT_OK(m.launch_writer(layer, w, nullptr));
      ASSERT_OK(m_driver->check(m_driver->api().cuCtxSynchronize(), "cuCtxSynchronize"));
      EXPECT_EQ(d_status.download<std::uint32_t>()[0], 0u);
      const auto device_cache = d_cache.download<std::uint8_t>();
      ASSERT_EQ(std::memcmp(device_cache.data(), host_cache.data(), slots * rb), 0) << "writer output differs";

      // Gather every slot plus padding rows, on both sides.
      std::vector<std::int32_t> gather_slots;
      for (std::size_t s = 0; s < slots; ++s) gather_slots.push_back(s % 17 == 0 ? -1 : static_cast<std::int32_t>(s));
      const std::size_t n = gather_slots.size();
      std::vector<jc::Vec16> host_out(n * 576 * 2 / 16);
      std::memset(host_out.data(), 0x77, n * 576 * 2);  // as d_out: a 512-wide format leaves the rest
      jc::GatherParams hg{reinterpret_cast<const jc::u8*>(host_cache.data()), static_cast<jc::i64>(slots),
                          gather_slots.data(), static_cast<jc::i64>(n),
                          reinterpret_cast<jc::u16*>(host_out.data()), 576, nullptr};
      ASSERT_OK(host_run_gather(mode, rope, hg, b->scale));
      DeviceBuffer d_gslots(*m_driver, n * 4), d_out(*m_driver, n * 576 * 2);
      d_gslots.upload(gather_slots.data());
      d_out.fill(0x77);
      GatherLaunch g{d_cache.addr(), static_cast<std::int64_t>(slots), d_gslots.addr(), static_cast<std::int64_t>(n),
                     d_out.addr(), 576, d_status.addr()};
      ASSERT_OK(m.launch_gather(layer, g, nullptr));
      ASSERT_OK(m_driver->check(m_driver->api().cuCtxSynchronize(), "cuCtxSynchronize"));
      const auto device_out = d_out.download<std::uint8_t>();
      ASSERT_EQ(std::memcmp(device_out.data(), host_out.data(), n * 576 * 2), 0) << "gather output differs";
      EXPECT_EQ(d_status.download<std::uint32_t>()[0], 0u);
    }
  }
}

TEST_F(GpuTest, IdentityGuardFiresOnTheDevice) {
  // Launch the identity writer directly with a calibrated scale: it must write nothing
  // and raise the status bit.
  auto store = cache::Store::open(dir() / "cache");
  ASSERT_OK(store);
  const auto compiler = make_nvrtc_compiler();
  KernelCache kernels(**store, *compiler);
  const KernelSpec spec{KernelKind::writer, LatentScale::identity, RecordFormat::b12x_432,
                        Target{m_runtime->device().target}};
  auto fetched = kernels.get(spec);
  ASSERT_OK(fetched);
  const auto& api = m_driver->api();
  CUmodule module = nullptr;
  ASSERT_OK(m_driver->check(api.cuModuleLoadDataEx(&module, fetched->artifact->cubin.data(), 0, nullptr, nullptr),
                            "cuModuleLoadDataEx"));
  CUfunction fn = nullptr;
  ASSERT_OK(m_driver->check(api.cuModuleGetFunction(&fn, module, fetched->artifact->entry.c_str()), "get"));

  std::mt19937_64 rng(1);
  const std::size_t tokens = 64;
  const auto rows = random_rows(rng, tokens);
  std::vector<std::int64_t> slot_of(tokens);
  for (std::size_t t = 0; t < tokens; ++t) slot_of[t] = static_cast<std::int64_t>(t);
  DeviceBuffer d_rows(*m_driver, rows.size() * 2), d_slots(*m_driver, tokens * 8), d_cache(*m_driver, tokens * 432),
      d_status(*m_driver, 4);
  d_rows.upload(rows.data());
  d_slots.upload(slot_of.data());
  d_cache.fill(0x5a);
  d_status.fill(0);
  jc::WriterParams p{reinterpret_cast<const jc::u16*>(d_rows.addr()), 576,
                     reinterpret_cast<const jc::u16*>(d_rows.addr() + 1024), 576,
                     reinterpret_cast<const jc::i64*>(d_slots.addr()), static_cast<jc::i64>(tokens),
                     reinterpret_cast<jc::u8*>(d_cache.addr()), static_cast<jc::i64>(tokens),
                     reinterpret_cast<jc::u32*>(d_status.addr())};
  float scale = 0.0019f;
  void* args[] = {&p, &scale};
  ASSERT_OK(m_driver->check(api.cuLaunchKernel(fn, tokens / 4, 1, 1, 128, 1, 1, 0, nullptr, args, nullptr), "launch"));
  ASSERT_OK(m_driver->check(api.cuCtxSynchronize(), "sync"));
  EXPECT_EQ(d_status.download<std::uint32_t>()[0], jc::k_status_identity_scale_mismatch);
  for (std::uint8_t byte : d_cache.download<std::uint8_t>()) ASSERT_EQ(byte, 0x5a);
  api.cuModuleUnload(module);
}

// Without a GPU the checks cannot run, but they must at least compile for every product
// target, so that a machine with a GPU finds them ready.
TEST(GpuChecks, CompileForEveryProductTarget) {
  for (std::string_view target : default_targets()) {
    SCOPED_TRACE(std::string(target));
    EXPECT_OK(compile_check_kernels(std::string(target)));
  }
}

// The writer's block scale goes through the hardware E4M3 conversion: it must equal the
// software encoder on every input it can get, all non-negative fp32 values from +0 to
// +inf (the NaNs excluded, which an amax never is).
TEST_F(GpuTest, E4m3BlockScaleConversionMatchesSoftwareOnEveryNonNegativeInput) {
  const auto result = run_check("jc_check_e4m3_encode", 0u, 0x7f800001ull);
  EXPECT_EQ(result.at(0), 0u) << mismatches_text(result);
}

TEST_F(GpuTest, E4m3ValueConversionMatchesSoftwareOnEveryCode) {
  const auto result = run_check("jc_check_e4m3_value", 0u, 256);
  EXPECT_EQ(result.at(0), 0u) << mismatches_text(result);
}

// The gather rounds to bf16 with the hardware conversion: equal to the software rounding
// (NaN -> 0x7FFF) on all 2^32 fp32 inputs.
TEST_F(GpuTest, Bf16RoundingMatchesSoftwareOnEveryInput) {
  const auto result = run_check("jc_check_bf16_round", 0u, 0x100000000ull);
  EXPECT_EQ(result.at(0), 0u) << mismatches_text(result);
  const auto nan = run_check("jc_count_bf16_noncanonical_nan", 0u, 0x100000000ull);
  std::printf("[gpu] cvt.rn.bf16x2.f32 turns %u of the 2^24 - 2 NaN inputs into something other than 0x7FFF%s\n",
              nan.at(0), nan.at(0) == 0 ? " (the select is a no-op here)" : "");
}

TEST_F(GpuTest, Bf16RoundingOfNonNanInputsNeedsNoSelect) {
  const auto result = run_check("jc_check_bf16_round_not_nan", 0u, 0x100000000ull);
  EXPECT_EQ(result.at(0), 0u) << mismatches_text(result);
}

// Every scale byte x every code byte of the gather, identity and dynamic (a spread of
// latent scales, down to subnormal and up to FLT_MAX so that products underflow and
// overflow), and every pair of fp8 RoPE codes with a spread of RoPE scales.
TEST_F(GpuTest, GatherDequantizationMatchesSoftwareOnEveryScaleAndCodeByte) {
  const auto identity = run_check("jc_check_dequantize_identity", 0u, 65536);
  EXPECT_EQ(identity.at(0), 0u) << "identity: " << mismatches_text(identity);
  for (float s : {1.0f, 0.0019f, 7.4404761904761905e-06f, 1.0f / 3.0f, 3.0e38f, 1e-30f, 1e-40f,
                  std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max()}) {
    std::uint32_t bits;
    std::memcpy(&bits, &s, 4);
    const auto dynamic = run_check("jc_check_dequantize_dynamic", bits, 65536);
    EXPECT_EQ(dynamic.at(0), 0u) << "dynamic, s = " << s << ": " << mismatches_text(dynamic);
  }
  for (float rope_scale : {0.0f, -0.0f, 1.0f, 0.0123f, 1e-40f, 3.0e38f, INFINITY, -2.5f, NAN}) {
    std::uint32_t bits;
    std::memcpy(&bits, &rope_scale, 4);
    const auto rope = run_check("jc_check_rope_dequantize", bits, 65536);
    EXPECT_EQ(rope.at(0), 0u) << "RoPE scale " << rope_scale << ": " << mismatches_text(rope);
  }
}

// The fp8 RoPE's E4M3 codes go through the hardware conversion too, NaNs by a select: equal
// to the software encoder on all 2^32 fp32 inputs, negative ones included.
TEST_F(GpuTest, RopeE4m3ConversionMatchesSoftwareOnEveryInput) {
  const auto result = run_check("jc_check_e4m3x2_encode", 0u, 0x100000000ull);
  EXPECT_EQ(result.at(0), 0u) << mismatches_text(result);
}

TEST_F(GpuTest, IdentityThresholdsFromScaleCodeBitsAreExactForEveryCode) {
  const auto result = run_check("jc_check_identity_thresholds", 1u, 0x7e);
  EXPECT_EQ(result.at(0), 0u) << mismatches_text(result);
}

TEST_F(GpuTest, PackedBf16ComparisonsAndMaxMatchTheHostOnEveryPair) {
  const auto result = run_check("jc_check_bf16x2_compare", 0u, 0x100000000ull);
  EXPECT_EQ(result.at(0), 0u) << mismatches_text(result);
}

// Rows that reach every corner of the kernels' numerics: every bf16 bit pattern as an input
// element, blocks of one sign and magnitude, blocks with NaN (quiet and signalling),
// infinities, zeros of both signs, subnormals and all-zero blocks, tokens of every
// magnitude; and for the gather, records of random bytes (NaN and negative scale bytes,
// every code).
std::vector<std::uint16_t> adversarial_rows(std::mt19937_64& rng) {
  std::vector<std::uint16_t> rows;
  for (std::uint32_t h = 0; h < 65536; ++h) rows.push_back(static_cast<std::uint16_t>(h));
  std::normal_distribution<float> normal;
  const std::uint16_t specials[] = {0x7fc0, 0xffc0, 0x7f81, 0xffbf, 0x7f80, 0xff80, 0x0000, 0x8000,
                                    0x0001, 0x807f, 0x7f7f, 0xff7f, 0x0080, 0x8080};
  for (int t = 0; t < 2048; ++t) {
    const float mag = std::ldexp(1.0f, static_cast<int>(rng() % 280) - 150);
    for (int c = 0; c < 576; ++c) {
      std::uint16_t h = jc::float_to_bf16(normal(rng) * mag);
      if (t % 3 == 0 && rng() % 8 == 0) h = specials[rng() % 14];
      if (t % 5 == 1 && (c / 16) % 3 == 0) h = static_cast<std::uint16_t>(rng() % 128 | (rng() % 2) << 15);
      if (t % 7 == 2 && (c / 16) % 4 == 1) h = 0;
      rows.push_back(h);
    }
  }
  while (rows.size() % (576 * 64) != 0) rows.push_back(0x3f80);  // whole 64-slot pages
  return rows;
}

TEST_F(GpuTest, DeviceMatchesHostExecutorOnAdversarialData) {
  std::mt19937_64 rng(jitcache::testing::test_seed("GpuTest.DeviceMatchesHostExecutorOnAdversarialData"));
  const auto rows = adversarial_rows(rng);
  const std::size_t tokens = rows.size() / 576;
  std::vector<std::int64_t> slot_of(tokens);
  for (std::size_t t = 0; t < tokens; ++t) slot_of[t] = t % 29 == 5 ? -1 : static_cast<std::int64_t>(tokens - 1 - t);
  std::vector<std::int32_t> gather_slots(tokens);
  for (std::size_t t = 0; t < tokens; ++t) gather_slots[t] = t % 31 == 3 ? -1 : static_cast<std::int32_t>(t);

  auto store = cache::Store::open(dir() / "cache");
  ASSERT_OK(store);
  const auto compiler = make_nvrtc_compiler();
  KernelCache kernels(**store, *compiler);
  const auto& api = m_driver->api();
  DeviceBuffer d_rows(*m_driver, rows.size() * 2), d_slots(*m_driver, tokens * 8), d_gslots(*m_driver, tokens * 4),
      d_status(*m_driver, 4), d_out(*m_driver, tokens * 576 * 2);
  d_rows.upload(rows.data());
  d_slots.upload(slot_of.data());
  d_gslots.upload(gather_slots.data());

  for (RecordFormat rope : k_record_formats.values()) {
    const std::size_t rb = static_cast<std::size_t>(record_bytes(rope));
    for (LatentScale latent : k_latent_scales.values()) {
      if (!format_allows(rope, latent)) continue;
      // Identity and per-token take 1.0 only (each refuses anything else).
      const std::vector<float> scales = latent != LatentScale::dynamic
                                            ? std::vector<float>{1.0f}
                                            : std::vector<float>{0.0019f, 1.0f, 3.0e-39f, 1e-30f, 2.5e30f, 3.0e38f};
      CUfunction writer = nullptr, gather = nullptr;
      CUmodule modules[2] = {nullptr, nullptr};
      for (KernelKind kind : {KernelKind::writer, KernelKind::gather}) {
        auto fetched = kernels.get(KernelSpec{kind, latent, rope, Target{m_runtime->device().target}});
        ASSERT_OK(fetched);
        CUmodule& module = modules[kind == KernelKind::writer ? 0 : 1];
        ASSERT_OK(m_driver->check(api.cuModuleLoadDataEx(&module, fetched->artifact->cubin.data(), 0, nullptr, nullptr),
                                  "cuModuleLoadDataEx"));
        ASSERT_OK(m_driver->check(api.cuModuleGetFunction(kind == KernelKind::writer ? &writer : &gather, module,
                                                          fetched->artifact->entry.c_str()),
                                  "cuModuleGetFunction"));
      }
      for (float scale : scales) {
        SCOPED_TRACE(std::string(to_string(rope)) + " " + to_string(latent) + " s=" + std::to_string(scale));
        // Writer, both sides, from the same stale cache contents.
        std::vector<jc::Vec16> host_cache((tokens * rb + 15) / 16);
        std::memset(host_cache.data(), 0x5a, tokens * rb);
        jc::WriterParams hw{rows.data(), 576, rows.data() + 512, 576, slot_of.data(), static_cast<jc::i64>(tokens),
                            reinterpret_cast<jc::u8*>(host_cache.data()), static_cast<jc::i64>(tokens), nullptr};
        auto host_status = host_run_writer(latent, rope, hw, scale);
        ASSERT_OK(host_status);
        DeviceBuffer d_cache(*m_driver, tokens * rb);
        d_cache.fill(0x5a);
        d_status.fill(0);
        jc::WriterParams dw{reinterpret_cast<const jc::u16*>(d_rows.addr()), 576,
                            reinterpret_cast<const jc::u16*>(d_rows.addr() + 1024), 576,
                            reinterpret_cast<const jc::i64*>(d_slots.addr()), static_cast<jc::i64>(tokens),
                            reinterpret_cast<jc::u8*>(d_cache.addr()), static_cast<jc::i64>(tokens),
                            reinterpret_cast<jc::u32*>(d_status.addr())};
        void* wargs[] = {&dw, &scale};
        const unsigned blocks = static_cast<unsigned>((tokens + 3) / 4);
        ASSERT_OK(m_driver->check(api.cuLaunchKernel(writer, blocks, 1, 1, 128, 1, 1, 0, nullptr, wargs, nullptr), "writer"));
        ASSERT_OK(m_driver->check(api.cuCtxSynchronize(), "sync"));
        EXPECT_EQ(d_status.download<std::uint32_t>()[0], *host_status);
        const auto device_cache = d_cache.download<std::uint8_t>();
        ASSERT_EQ(std::memcmp(device_cache.data(), host_cache.data(), tokens * rb), 0) << "writer output differs";

        // Gather of the written records, then of random bytes.
        for (int garbage = 0; garbage < 2; ++garbage) {
          if (garbage == 1) {
            auto* bytes = reinterpret_cast<std::uint8_t*>(host_cache.data());
            for (std::size_t i = 0; i < tokens * rb; ++i) bytes[i] = static_cast<std::uint8_t>(rng() >> 11);
            d_cache.upload(host_cache.data());
          }
          std::vector<jc::Vec16> host_out(tokens * 576 * 2 / 16);
          std::memset(host_out.data(), 0x77, tokens * 576 * 2);  // as d_out: a 512-wide format leaves the rest
          jc::GatherParams hg{reinterpret_cast<const jc::u8*>(host_cache.data()), static_cast<jc::i64>(tokens),
                              gather_slots.data(), static_cast<jc::i64>(tokens),
                              reinterpret_cast<jc::u16*>(host_out.data()), 576, nullptr};
          ASSERT_OK(host_run_gather(latent, rope, hg, scale));
          d_out.fill(0x77);
          jc::GatherParams dg{reinterpret_cast<const jc::u8*>(d_cache.addr()), static_cast<jc::i64>(tokens),
                              reinterpret_cast<const jc::i32*>(d_gslots.addr()), static_cast<jc::i64>(tokens),
                              reinterpret_cast<jc::u16*>(d_out.addr()), 576, nullptr};
          void* gargs[] = {&dg, &scale};
          ASSERT_OK(m_driver->check(api.cuLaunchKernel(gather, blocks, 1, 1, 128, 1, 1, 0, nullptr, gargs, nullptr), "gather"));
          ASSERT_OK(m_driver->check(api.cuCtxSynchronize(), "sync"));
          const auto device_out = d_out.download<std::uint8_t>();
          ASSERT_EQ(std::memcmp(device_out.data(), host_out.data(), tokens * 576 * 2), 0)
              << (garbage ? "gather of random records differs" : "gather output differs");
        }
      }
      for (CUmodule module : modules) api.cuModuleUnload(module);
    }
  }
}

// FlashInfer's 384-byte writer takes 1 / scale with MUFU.RCP (-use_fast_math); jitcache's
// twin takes rn(1 / scale) (docs/record-formats.md, flashinfer-dsv4-384). This measures the
// instruction on the 126 non-zero E4M3 scale values: each result is within an ulp of
// rn(1 / s), and exact for the powers of two; the scales where it differs are printed, so
// the one step the CPU twin cannot state exactly is known for this device.
TEST_F(GpuTest, FastMathReciprocalOfEveryE4m3ScaleIsWithinAnUlp) {
  const std::string target = m_runtime->device().target;
  const std::string source =
      "extern \"C\" __global__ void rcp(const float* in, float* out) { out[threadIdx.x] = 1.0f / in[threadIdx.x]; }\n";
  auto compiled = compile_source(SourceInput{SourceKind::cuda, source, {}, "rcp", target, {"--use_fast_math"}, {}});
  ASSERT_OK(compiled);
  std::vector<float> scales;
  for (int code = 1; code <= 0x7e; ++code) scales.push_back(jc::e4m3_to_float(static_cast<jc::u8>(code)));
  CUmodule module = nullptr;
  ASSERT_OK(m_driver->check(m_driver->api().cuModuleLoadDataEx(&module, compiled->cubin.data(), 0, nullptr, nullptr),
                            "cuModuleLoadDataEx"));
  CUfunction fn = nullptr;
  ASSERT_OK(m_driver->check(m_driver->api().cuModuleGetFunction(&fn, module, "rcp"), "cuModuleGetFunction"));
  DeviceBuffer din(*m_driver, scales.size() * 4), dout(*m_driver, scales.size() * 4);
  din.upload(scales.data());
  CUdeviceptr pin = din.addr(), pout = dout.addr();
  void* args[] = {&pin, &pout};
  ASSERT_OK(m_driver->check(m_driver->api().cuLaunchKernel(fn, 1, 1, 1, static_cast<unsigned>(scales.size()), 1, 1, 0,
                                                           nullptr, args, nullptr),
                            "cuLaunchKernel"));
  ASSERT_OK(m_driver->check(m_driver->api().cuCtxSynchronize(), "cuCtxSynchronize"));
  const auto got = dout.download<float>();
  int differing = 0;
  for (std::size_t i = 0; i < scales.size(); ++i) {
    const float rn = jc::div_rn(1.0f, scales[i]);
    const auto ulps = static_cast<std::int64_t>(jc::float_bits(got[i])) - static_cast<std::int64_t>(jc::float_bits(rn));
    EXPECT_LE(std::abs(ulps), 1) << "scale " << scales[i];
    if ((jc::float_bits(scales[i]) & 0x7fffffu) == 0) EXPECT_EQ(ulps, 0) << "a power of two " << scales[i];
    if (ulps != 0) {
      ++differing;
      std::printf("  MUFU.RCP(%g) = rn(1/s) %+lld ulp\n", scales[i], static_cast<long long>(ulps));
    }
  }
  std::printf("MUFU.RCP differs from rn(1/s) on %d of %zu E4M3 scale values\n", differing, scales.size());
  m_driver->api().cuModuleUnload(module);
}

// Kernels from outside (Runtime::compile) run on the device: the compile tests' axpy as
// CUDA C++, NVVM IR and PTX, each compiled for this device's target through the cache,
// loaded and launched; y = a * x + y must come back exactly (one fma-free multiply-add in
// float, the same on the host).
TEST_F(GpuTest, KernelsFromOutsideRunOnTheDevice) {
  const std::filesystem::path golden = jitcache::testing::source_dir() / "tests" / "runtime" / "compile" / "golden";
  auto read = [&](const char* name) {
    std::ifstream in(golden / name, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string target = m_runtime->device().target;
  // The PTX is NVRTC's for this target, as a PTX-emitting DSL would hand it over.
  ASSERT_OK(m_runtime->declare_family(SpecSchema{"gpu.axpy.cuda", SourceKind::cuda, {}}));
  KernelRequest cuda{"gpu.axpy.cuda", {}, SourceKind::cuda, read("axpy.cu"), {}, "axpy", target, {"--fmad=false"}};
  auto from_cuda = m_runtime->compile(cuda);
  ASSERT_OK(from_cuda);
  auto ptx = compile_source(SourceInput{SourceKind::cuda, cuda.text, {}, "axpy", target, {"--fmad=false"}, {}});
  ASSERT_OK(ptx);
  ASSERT_OK(m_runtime->declare_family(SpecSchema{"gpu.axpy.nvvm", SourceKind::nvvm, {}}));
  ASSERT_OK(m_runtime->declare_family(SpecSchema{"gpu.axpy.ptx", SourceKind::ptx, {}}));
  std::vector<CompiledKernel> kernels{*from_cuda};
  for (KernelRequest r : {KernelRequest{"gpu.axpy.nvvm", {}, SourceKind::nvvm, read("axpy_nvvm.ll"), {}, "axpy",
                                        target, {"-fma=0"}},
                          KernelRequest{"gpu.axpy.ptx", {}, SourceKind::ptx, ptx->ptx, {}, "axpy", target, {}}}) {
    auto compiled = m_runtime->compile(r);
    ASSERT_OK(compiled);
    kernels.push_back(std::move(*compiled));
  }
  constexpr int n = 4099;  // not a multiple of the block
  std::mt19937 rng(static_cast<std::uint32_t>(jitcache::testing::test_seed("gpu_axpy")));
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> x(n), y(n);
  for (int i = 0; i < n; ++i) {
    x[i] = dist(rng);
    y[i] = dist(rng);
  }
  const float a = 1.7f;
  std::vector<float> expected(n);
  for (int i = 0; i < n; ++i) {
    volatile float product = a * x[i];  // no host fma either
    expected[i] = product + y[i];
  }
  for (const CompiledKernel& k : kernels) {
    SCOPED_TRACE(std::string(to_string(k.kind)) + " " + k.target);
    CUmodule module = nullptr;
    ASSERT_OK(m_driver->check(m_driver->api().cuModuleLoadDataEx(&module, k.cubin.data(), 0, nullptr, nullptr),
                              "cuModuleLoadDataEx"));
    CUfunction fn = nullptr;
    EXPECT_OK(m_driver->check(m_driver->api().cuModuleGetFunction(&fn, module, "axpy"), "cuModuleGetFunction"));
    DeviceBuffer dx(*m_driver, n * sizeof(float)), dy(*m_driver, n * sizeof(float));
    dx.upload(x.data());
    dy.upload(y.data());
    CUdeviceptr px = dx.addr(), py = dy.addr();
    float a_arg = a;
    int n_arg = n;
    void* args[] = {&a_arg, &px, &py, &n_arg};
    if (fn != nullptr) {
      EXPECT_OK(m_driver->check(m_driver->api().cuLaunchKernel(fn, (n + 255) / 256, 1, 1, 256, 1, 1, 0, nullptr, args,
                                                               nullptr),
                                "cuLaunchKernel"));
      EXPECT_OK(m_driver->check(m_driver->api().cuCtxSynchronize(), "cuCtxSynchronize"));
      EXPECT_EQ(dy.download<float>(), expected);
    }
    m_driver->api().cuModuleUnload(module);
  }
}

// The table of rcp.approx.ftz.f32 that scripts/gpu_check.sh measured (bench/rcp_table.cpp,
// its path in JCTEST_RCP_TABLE) and the rule of runtime/kv/rcp_approx.hpp give the
// hardware's result for every one of the 2^32 fp32 inputs: normal inputs of every exponent,
// zeros, subnormals, infinities and NaNs (a NaN input needs a NaN; its payload is counted,
// not required). The hardware side is the same inline PTX run on the inputs in chunks of
// 2^28; the comparison runs on the host, through the helper itself.
TEST_F(GpuTest, RcpApproxTableReproducesEveryInput) {
  const char* path = std::getenv("JCTEST_RCP_TABLE");
  if (path == nullptr || *path == '\0') GTEST_SKIP() << "JCTEST_RCP_TABLE names no table (scripts/gpu_check.sh sets it)";
  auto table = RcpApproxTable::read(path);
  ASSERT_OK(table);
  auto artifact = compile_rcp_kernel(m_runtime->device().target);
  ASSERT_OK(artifact);
  CUmodule module = nullptr;
  ASSERT_OK(m_driver->check(m_driver->api().cuModuleLoadDataEx(&module, artifact->cubin.data(), 0, nullptr, nullptr),
                            "cuModuleLoadDataEx"));
  CUfunction fn = nullptr;
  ASSERT_OK(m_driver->check(m_driver->api().cuModuleGetFunction(&fn, module, k_rcp_kernel_entry), "cuModuleGetFunction"));
  constexpr std::uint64_t chunk = std::uint64_t{1} << 28;
  DeviceBuffer out(*m_driver, chunk * 4);
  std::vector<std::uint32_t> gpu(chunk);
  const unsigned threads = std::max(1u, std::min(16u, std::thread::hardware_concurrency()));
  std::uint64_t mismatches = 0, nan_inputs = 0, noncanonical_nans = 0;
  std::vector<std::pair<std::uint32_t, std::uint32_t>> examples;
  for (std::uint64_t first = 0; first < (std::uint64_t{1} << 32); first += chunk) {
    std::uint32_t first_arg = static_cast<std::uint32_t>(first);
    std::uint64_t count = chunk;
    CUdeviceptr out_ptr = out.addr();
    void* args[] = {&first_arg, &count, &out_ptr};
    ASSERT_OK(m_driver->check(m_driver->api().cuLaunchKernel(fn, 65535, 1, 1, 256, 1, 1, 0, nullptr, args, nullptr),
                              "cuLaunchKernel"));
    ASSERT_OK(m_driver->check(m_driver->api().cuCtxSynchronize(), "cuCtxSynchronize"));
    ASSERT_OK(m_driver->check(m_driver->api().cuMemcpyDtoH(gpu.data(), out.addr(), chunk * 4), "cuMemcpyDtoH"));
    struct Counts {
      std::uint64_t mismatches = 0, nan_inputs = 0, noncanonical = 0;
      std::vector<std::pair<std::uint32_t, std::uint32_t>> examples;  // (input, gpu)
    };
    std::vector<Counts> counts(threads);
    std::vector<std::thread> workers;
    for (unsigned w = 0; w < threads; ++w)
      workers.emplace_back([&, w] {
        Counts& c = counts[w];
        for (std::uint64_t i = w; i < chunk; i += threads) {
          const std::uint32_t input = first_arg + static_cast<std::uint32_t>(i);
          const std::uint32_t expected = table->rcp_bits(input);
          const std::uint32_t got = gpu[i];
          bool same = got == expected;
          if (expected == k_canonical_nan) {
            ++c.nan_inputs;
            same = (got & 0x7f800000u) == 0x7f800000u && (got & 0x7fffffu) != 0;
            if (same && got != k_canonical_nan) ++c.noncanonical;
          }
          if (!same && ++c.mismatches <= 4) c.examples.emplace_back(input, got);
        }
      });
    for (auto& worker : workers) worker.join();
    for (const Counts& c : counts) {
      mismatches += c.mismatches;
      nan_inputs += c.nan_inputs;
      noncanonical_nans += c.noncanonical;
      examples.insert(examples.end(), c.examples.begin(), c.examples.end());
    }
  }
  m_driver->api().cuModuleUnload(module);
  std::printf("[gpu] rcp.approx.ftz.f32: 2^32 inputs, %llu differ from the table's rule; %llu NaN inputs, %llu of them "
              "give a NaN other than 0x7fffffff\n",
              static_cast<unsigned long long>(mismatches), static_cast<unsigned long long>(nan_inputs),
              static_cast<unsigned long long>(noncanonical_nans));
  std::string text;
  for (std::size_t i = 0; i < std::min<std::size_t>(examples.size(), 8); ++i) {
    char item[80];
    const auto [input, got] = examples[i];
    std::snprintf(item, sizeof item, " 0x%08x (gpu 0x%08x, rule 0x%08x)", input, got, table->rcp_bits(input));
    text += item;
  }
  EXPECT_EQ(mismatches, 0u) << "inputs:" << text;
}

}  // namespace
}  // namespace jitcache
