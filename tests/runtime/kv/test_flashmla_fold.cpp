// Calibrated scales with FlashMLA, proven on the CPU. FlashMLA applies no outer scale;
// jitcache's flashmla-352 dynamic writer stores kv_c / s_l. With MLA's absorbed weights
// the latent is both key and value, so an engine folds s_l into the query's latent part
// and into the output: (s_l q_nope)·(kv/s_l) = q_nope·kv and s_l Σ p (kv/s_l) = Σ p kv.
// These tests run that on the synthetic GLM-shaped latents of the outer-scale study and
// hold the folded attention to the reader-side restore (the dynamic gather, × s_l) and
// to a float64 reference. docs/flashmla-fold.md explains the fold and quotes the numbers.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "every_slot_gather.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "runtime/kv/host_executor.hpp"
#include "runtime/kv/kv_tools.hpp"
#include "runtime/kv/outer_scale_study.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

constexpr RecordFormat k_format = RecordFormat::flashmla_352;
constexpr int k_tokens = 256;
constexpr int k_heads = 16;    // DeepSeek/GLM have 64 or more; 16 show the same arithmetic
constexpr int k_queries = 8;   // decode positions per layer, each with k_heads query rows
constexpr int k_latent = 512;
constexpr int k_rope = 64;
constexpr int k_row = k_latent + k_rope;
// bf16's unit roundoff: round to nearest moves a value by at most 2^-8 of itself.
constexpr double k_u_bf16 = 0x1p-8;

double softmax_scale() { return 1.0 / std::sqrt(static_cast<double>(k_row)); }

// 16-byte aligned storage, as the kernels' vector loads require.
template <class T>
class Aligned {
 public:
  explicit Aligned(std::size_t count) : m_count(count), m_storage((count * sizeof(T) + 15) / 16 + 1) {}
  T* data() { return reinterpret_cast<T*>(m_storage.data()); }
  const T* data() const { return reinterpret_cast<const T*>(m_storage.data()); }
  T& operator[](std::size_t i) { return data()[i]; }
  const T& operator[](std::size_t i) const { return data()[i]; }
  std::size_t size() const { return m_count; }

 private:
  std::size_t m_count;
  std::vector<jc::Vec16> m_storage;
};

float bf16_value(std::uint16_t h) { return jc::bf16_to_float(h); }
std::uint16_t to_bf16(float x) { return jc::float_to_bf16(x); }

// One layer's inputs, every value bf16 as an engine holds it: the study's latents at the
// layer's magnitude, k_pe, and k_queries * k_heads query rows [q_latent (512), q_pe (64)].
// The query pattern is the same in every layer, its latent part scaled by the inverse
// of the layer's latent magnitude, so the exact scores (and the attention weights) are
// the same in every layer and only the magnitude of the latents differs.
struct Layer {
  float max_abs = 0.0f;
  float scale = 0.0f;  // calibrated s_l = max|kv_c| / 2688
  Aligned<std::uint16_t> kv_c{static_cast<std::size_t>(k_tokens) * k_latent};
  Aligned<std::uint16_t> k_pe{static_cast<std::size_t>(k_tokens) * k_rope};
  std::vector<std::uint16_t> queries;  // [k_queries * k_heads, 576]
};

void make_layer(float max_abs, std::uint64_t seed, Layer* layer) {
  layer->max_abs = max_abs;
  const std::vector<float> latents = study::synthetic_latents(k_tokens, max_abs, seed);
  ASSERT_EQ(latents.size(), layer->kv_c.size());
  float bf16_max = 0.0f;
  double sum_sq = 0.0;
  for (std::size_t i = 0; i < latents.size(); ++i) {
    layer->kv_c[i] = to_bf16(latents[i]);
    const float v = bf16_value(layer->kv_c[i]);
    bf16_max = std::max(bf16_max, std::fabs(v));
    sum_sq += static_cast<double>(v) * v;
  }
  const kv::LatentScaleChoice choice = kv::calibrated_latent_scale(bf16_max);
  ASSERT_EQ(choice.variant, LatentScale::dynamic) << "max_abs " << max_abs;
  layer->scale = choice.value;

  // Scores of unit spread: q_latent ~ N(0, a^2) with a = 2.5 / (c * ||kv_t||_rms) gives
  // latent scores of standard deviation about 2.5, q_pe·k_pe about 1: softmax weights
  // from nearly uniform to a few dominant tokens, as real decode attention has.
  std::mt19937_64 rng(seed ^ 0x9e3779b97f4a7c15ull);
  std::normal_distribution<float> normal;
  for (std::size_t i = 0; i < layer->k_pe.size(); ++i) layer->k_pe[i] = to_bf16(normal(rng));
  const double c = softmax_scale();
  const double kv_row_norm = std::sqrt(sum_sq / k_tokens);
  const float a = static_cast<float>(2.5 / (c * kv_row_norm));
  const float b = static_cast<float>(1.0 / (c * std::sqrt(static_cast<double>(k_rope))));
  layer->queries.resize(static_cast<std::size_t>(k_queries) * k_heads * k_row);
  for (int r = 0; r < k_queries * k_heads; ++r)
    for (int i = 0; i < k_row; ++i)
      layer->queries[static_cast<std::size_t>(r) * k_row + i] = to_bf16(normal(rng) * (i < k_latent ? a : b));
}

// The flashmla-352 writer over the layer, token t in slot t.
void write_records(const Layer& layer, LatentScale mode, float scale, Aligned<std::uint8_t>* cache) {
  std::vector<std::int64_t> slots(k_tokens);
  for (int t = 0; t < k_tokens; ++t) slots[t] = t;
  jc::WriterParams p{};
  p.kv_c = layer.kv_c.data();
  p.kv_c_stride = k_latent;
  p.k_pe = layer.k_pe.data();
  p.k_pe_stride = k_rope;
  p.slot_mapping = slots.data();
  p.num_tokens = k_tokens;
  p.cache = cache->data();
  p.num_slots = k_tokens;
  const auto status = host_run_writer(mode, k_format, p, scale);
  ASSERT_OK(status);
  ASSERT_EQ(*status, 0u) << to_string(mode) << " writer, scale " << scale;
}

// The flashmla-352 gather of every slot: bf16 bits [k_tokens, 576].
void gather_rows(const Aligned<std::uint8_t>& cache, LatentScale mode, float scale, std::vector<std::uint16_t>* rows) {
  std::vector<std::int32_t> slots(k_tokens);
  for (int t = 0; t < k_tokens; ++t) slots[t] = t;
  Aligned<std::uint16_t> out(static_cast<std::size_t>(k_tokens) * k_row);
  const jc::GatherParams p =
      jitcache::testing::every_slot_gather(cache.data(), k_tokens, slots.data(), out.data(), k_row);
  const auto status = host_run_gather(mode, k_format, p, scale);
  ASSERT_OK(status);
  ASSERT_EQ(*status, 0u) << to_string(mode) << " gather, scale " << scale;
  rows->assign(out.data(), out.data() + out.size());
}

template <class Real>
struct Attention {
  std::vector<Real> score;  // c * (q_latent·latent_t + q_pe·k_pe_t)
  std::vector<Real> p;      // softmax(score)
  std::array<Real, k_latent> out{};
};

// One query row over k_tokens rows of 576 values, in Real arithmetic throughout.
template <class Real>
Attention<Real> attend(std::span<const Real> q, std::span<const Real> rows) {
  Attention<Real> a;
  a.score.resize(k_tokens);
  a.p.resize(k_tokens);
  const Real c = static_cast<Real>(softmax_scale());
  Real top = -INFINITY;
  for (int t = 0; t < k_tokens; ++t) {
    Real dot = 0;
    for (int i = 0; i < k_row; ++i) dot += q[i] * rows[static_cast<std::size_t>(t) * k_row + i];
    a.score[t] = dot * c;
    top = std::max(top, a.score[t]);
  }
  Real sum = 0;
  for (int t = 0; t < k_tokens; ++t) sum += a.p[t] = std::exp(a.score[t] - top);
  for (int t = 0; t < k_tokens; ++t) a.p[t] /= sum;
  for (int t = 0; t < k_tokens; ++t)
    for (int j = 0; j < k_latent; ++j) a.out[j] += a.p[t] * rows[static_cast<std::size_t>(t) * k_row + j];
  return a;
}

template <class Real>
std::vector<Real> values_of(std::span<const std::uint16_t> bits) {
  std::vector<Real> v(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) v[i] = static_cast<Real>(bf16_value(bits[i]));
  return v;
}

// Relative RMS of outputs against the reference, over every query row of a layer.
struct RelRms {
  double err_sq = 0.0, ref_sq = 0.0;
  template <class Real>
  void add(const std::array<Real, k_latent>& out, const std::array<double, k_latent>& ref) {
    for (int j = 0; j < k_latent; ++j) {
      const double d = static_cast<double>(out[j]) - ref[j];
      err_sq += d * d;
      ref_sq += ref[j] * ref[j];
    }
  }
  double value() const { return std::sqrt(err_sq / ref_sq); }
};

struct LayerResult {
  float max_abs = 0.0f;
  float scale = 0.0f;
  double restore_rel_rms = 0.0;    // reader-side restore vs float64 reference
  double fold_rel_rms = 0.0;       // identity gather + fold vs float64 reference
  double no_scale_rel_rms = 0.0;   // identity writer (no scale) vs float64 reference
  double unfolded_rel_rms = 0.0;   // the dynamic records read by FlashMLA without the fold
  double max_score_diff = 0.0;     // max |score_fold - score_restore|
  double max_score_ratio = 0.0;    // max of that over its a-priori bound (<= 1)
  double max_k = 0.0;              // max |fold - restore| / (u_bf16 * Σ p |kv|)
  double max_k_bound = 0.0;        // the bound on that k, from the observed score differences
  double max_ulp_ratio = 0.0;      // max |fold - restore| / ulp_bf16(|restore|), for the record
  double restore_latent_rel_rms = 0.0;   // round trip of kv_c alone: dynamic gather vs kv_c
  double no_scale_latent_rel_rms = 0.0;  // and through the identity writer and gather
  double no_scale_floored = 0.0;   // share of the identity records' block scales at the 2^-9 floor
  double no_scale_subnormal = 0.0; // share of them below E4M3's smallest normal, 2^-6
  std::uint64_t bound_violations = 0;
};

double ulp_bf16(double x) {
  const double m = std::max(std::fabs(x), 0x1p-126);
  return std::ldexp(1.0, std::ilogb(m) - 7);
}

// The bounds, argued once. s·v is the exact value behind both paths: v = code × block
// scale is what the identity gather returns (exact in bf16), s = s_l.
//  * restore reads r = bf16(fp32(v·s)): |r - s·v| <= u2·|s·v|, u2 = 2^-8 + 2^-24 + 2^-32
//    (two round-to-nearest steps, each relative).
//  * fold holds q' = bf16(fp32(s·q)): |q' - s·q| <= u2·|s·q|; q'·v and q·r are then
//    both within u2·Σ|s·q_i·v_i| of the exact s·(q·v) (the RoPE terms are identical).
//    fp32 accumulation of 576 products adds at most γ_576 = 576·2^-24/(1 - 576·2^-24)
//    ≈ 3.4e-5 of Σ|terms| to each, the product with c 2^-24 of |score|. So
//      |score_fold - score_restore| <= (2·u2 + 1e-4)·A_t,  A_t = c·Σ_i |q_i·s·v_ti| + c·Σ_rope |q·k|.
//  * softmax: with every score moved by at most Δ, every weight moves by a factor within
//    [e^-2Δ, e^2Δ], so |p_fold - p_restore| <= (e^2Δ - 1)·p_restore, plus fp32 errors of
//    the exp, the sum and the division (relative, under 1e-5 each here).
//  * output: o_restore = Σ p_r·r, o_fold = s·Σ p_f·v; with B_j = Σ_t p_t·|s·v_tj|,
//      |o_fold_j - o_restore_j| <= (u2 + (e^2Δ - 1))·B_j + (fp32 sums: 2·γ_256 ≈ 3.1e-5,
//      weights: < 5e-5, final ·s: 2^-24) ≤ k·u_bf16·B_j with k = 1 + (e^2Δ - 1)/2^-8 + 0.03.
//    B_j, not |o_j|, is the right scale: the output is a weighted average whose terms
//    cancel, so an element near zero still carries the rounding of its large terms.
LayerResult run_layer(const Layer& layer) {
  LayerResult result;
  result.max_abs = layer.max_abs;
  result.scale = layer.scale;
  const float s = layer.scale;

  Aligned<std::uint8_t> dynamic_cache(static_cast<std::size_t>(k_tokens) * record_bytes(k_format));
  Aligned<std::uint8_t> identity_cache(dynamic_cache.size());
  std::vector<std::uint16_t> restored, folded, unscaled;
  write_records(layer, LatentScale::dynamic, s, &dynamic_cache);
  gather_rows(dynamic_cache, LatentScale::dynamic, s, &restored);
  gather_rows(dynamic_cache, LatentScale::identity, 1.0f, &folded);  // what FlashMLA reads
  write_records(layer, LatentScale::identity, 1.0f, &identity_cache);
  gather_rows(identity_cache, LatentScale::identity, 1.0f, &unscaled);
  if (::testing::Test::HasFatalFailure()) return result;
  const jc::fmt::Layout layout = jc::fmt::layout(jc::fmt::Format::flashmla_352);
  std::uint64_t floored = 0, subnormal = 0;
  for (int t = 0; t < k_tokens; ++t)
    for (int b = 0; b < jc::k_num_blocks; ++b) {
      const std::uint8_t sf = identity_cache[static_cast<std::size_t>(t) * layout.record_bytes +
                                             jc::fmt::scale_position(layout, b)];
      floored += sf == 0x01;  // E4M3 0x01 = 2^-9
      subnormal += sf < 0x08;
    }
  result.no_scale_floored = static_cast<double>(floored) / (k_tokens * jc::k_num_blocks);
  result.no_scale_subnormal = static_cast<double>(subnormal) / (k_tokens * jc::k_num_blocks);

  // The restore is the identity gather times s_l, rounded to bf16, bit for bit; the RoPE
  // values are the same bits in both gathers (flashmla-352 stores k_pe unscaled).
  std::uint64_t restore_mismatches = 0, rope_mismatches = 0;
  for (int t = 0; t < k_tokens; ++t)
    for (int i = 0; i < k_row; ++i) {
      const std::size_t at = static_cast<std::size_t>(t) * k_row + i;
      if (i < k_latent) {
        restore_mismatches += restored[at] != to_bf16(bf16_value(folded[at]) * s);
      } else {
        rope_mismatches += restored[at] != folded[at];
      }
    }
  EXPECT_EQ(restore_mismatches, 0u) << "max_abs " << layer.max_abs;
  EXPECT_EQ(rope_mismatches, 0u) << "max_abs " << layer.max_abs;

  // The latents' own round trip, for comparison with the attention outputs' error.
  double restore_sq = 0.0, no_scale_sq = 0.0, latent_sq = 0.0;
  for (int t = 0; t < k_tokens; ++t)
    for (int i = 0; i < k_latent; ++i) {
      const double x = bf16_value(layer.kv_c[static_cast<std::size_t>(t) * k_latent + i]);
      const std::size_t at = static_cast<std::size_t>(t) * k_row + i;
      restore_sq += std::pow(bf16_value(restored[at]) - x, 2);
      no_scale_sq += std::pow(bf16_value(unscaled[at]) - x, 2);
      latent_sq += x * x;
    }
  result.restore_latent_rel_rms = std::sqrt(restore_sq / latent_sq);
  result.no_scale_latent_rel_rms = std::sqrt(no_scale_sq / latent_sq);

  // The float64 reference reads the unquantized bf16 inputs.
  std::vector<double> ref_rows(static_cast<std::size_t>(k_tokens) * k_row);
  for (int t = 0; t < k_tokens; ++t)
    for (int i = 0; i < k_row; ++i)
      ref_rows[static_cast<std::size_t>(t) * k_row + i] =
          i < k_latent ? bf16_value(layer.kv_c[static_cast<std::size_t>(t) * k_latent + i])
                       : bf16_value(layer.k_pe[static_cast<std::size_t>(t) * k_rope + i - k_latent]);
  const std::vector<float> restored_values = values_of<float>(restored);
  const std::vector<float> folded_values = values_of<float>(folded);
  const std::vector<float> unscaled_values = values_of<float>(unscaled);

  RelRms restore_err, fold_err, no_scale_err, unfolded_err;
  const double c = softmax_scale();
  for (int r = 0; r < k_queries * k_heads; ++r) {
    const std::span<const std::uint16_t> q_bits(layer.queries.data() + static_cast<std::size_t>(r) * k_row, k_row);
    const std::vector<double> q_ref = values_of<double>(q_bits);
    const std::vector<float> q = values_of<float>(q_bits);
    // The engine's folded query: s_l·q_latent held in bf16, q_pe unchanged.
    std::vector<float> q_fold = q;
    for (int i = 0; i < k_latent; ++i) q_fold[i] = bf16_value(to_bf16(q[i] * s));

    const auto ref = attend<double>(q_ref, ref_rows);
    const auto restore = attend<float>(q, restored_values);
    auto fold = attend<float>(q_fold, folded_values);
    for (float& o : fold.out) o *= s;
    const auto no_scale = attend<float>(q, unscaled_values);
    const auto unfolded = attend<float>(q, folded_values);
    restore_err.add(restore.out, ref.out);
    fold_err.add(fold.out, ref.out);
    no_scale_err.add(no_scale.out, ref.out);
    unfolded_err.add(unfolded.out, ref.out);

    constexpr double u2 = 0x1p-8 + 0x1p-24 + 0x1p-32;
    double delta = 0.0;
    for (int t = 0; t < k_tokens; ++t) {
      double a_t = 0.0;
      for (int i = 0; i < k_row; ++i) {
        const double kv = folded_values[static_cast<std::size_t>(t) * k_row + i];
        a_t += std::fabs(q_ref[i] * (i < k_latent ? static_cast<double>(s) * kv : kv));
      }
      a_t *= c;
      const double diff = std::fabs(static_cast<double>(fold.score[t]) - restore.score[t]);
      delta = std::max(delta, diff);
      const double bound = (2.0 * u2 + 1e-4) * a_t;
      result.max_score_ratio = std::max(result.max_score_ratio, diff / bound);
      result.bound_violations += diff > bound;
    }
    result.max_score_diff = std::max(result.max_score_diff, delta);
    const double k_bound = 1.0 + std::expm1(2.0 * delta) / k_u_bf16 + 0.03;
    result.max_k_bound = std::max(result.max_k_bound, k_bound);
    for (int j = 0; j < k_latent; ++j) {
      double b_j = 0.0;
      for (int t = 0; t < k_tokens; ++t) {
        const double v = folded_values[static_cast<std::size_t>(t) * k_row + j];
        b_j += restore.p[t] * std::fabs(static_cast<double>(s) * v);
      }
      const double diff = std::fabs(static_cast<double>(fold.out[j]) - restore.out[j]);
      if (b_j > 0.0) result.max_k = std::max(result.max_k, diff / (k_u_bf16 * b_j));
      result.bound_violations += diff > k_bound * k_u_bf16 * b_j + 1e-30;
      result.max_ulp_ratio = std::max(result.max_ulp_ratio, diff / ulp_bf16(restore.out[j]));
    }
  }
  result.restore_rel_rms = restore_err.value();
  result.fold_rel_rms = fold_err.value();
  result.no_scale_rel_rms = no_scale_err.value();
  result.unfolded_rel_rms = unfolded_err.value();
  return result;
}

std::vector<LayerResult> run_study_layers(std::uint64_t seed) {
  std::vector<LayerResult> results;
  std::printf("  max_abs   s_l         restore  fold     no-scale unfolded   max dScore (/bound)  k (bound)       ulp-ratio  floored subnormal  latent: restore no-scale\n");
  for (float max_abs : study::default_layer_max_abs()) {
    Layer layer;
    make_layer(max_abs, seed, &layer);
    if (::testing::Test::HasFatalFailure()) return results;
    const LayerResult r = run_layer(layer);
    if (::testing::Test::HasFatalFailure()) return results;
    std::printf("  %-8g  %.4e  %.5f  %.5f  %.5f  %.3e  %.2e (%.3f)     %.3f (%.3f)   %-9.0f  %.3f   %.3f      %.5f %.5f\n", r.max_abs, r.scale,
                r.restore_rel_rms, r.fold_rel_rms, r.no_scale_rel_rms, r.unfolded_rel_rms, r.max_score_diff,
                r.max_score_ratio, r.max_k, r.max_k_bound, r.max_ulp_ratio, r.no_scale_floored,
                r.no_scale_subnormal, r.restore_latent_rel_rms, r.no_scale_latent_rel_rms);
    results.push_back(r);
  }
  return results;
}

// The layers run once per test program (about a second), by whichever test comes first.
const std::vector<LayerResult>& study_layers() {
  static const std::vector<LayerResult> results =
      run_study_layers(jitcache::testing::test_seed("FlashMlaFold (latents, k_pe, queries)"));
  return results;
}

TEST(FlashMlaFold, FoldedScaleMatchesTheReaderSideRestore) {
  const std::vector<LayerResult>& results = study_layers();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(results.size(), study::default_layer_max_abs().size());
  ASSERT_FLOAT_EQ(results.front().max_abs, 0.02f);
  ASSERT_FLOAT_EQ(results.back().max_abs, 5.2f);
  for (const LayerResult& r : results) {
    // Within bf16 rounding: every score and output element inside its bound (above).
    EXPECT_EQ(r.bound_violations, 0u) << "max_abs " << r.max_abs;
    EXPECT_LE(r.max_score_ratio, 1.0) << "max_abs " << r.max_abs;
    EXPECT_LE(r.max_k, r.max_k_bound) << "max_abs " << r.max_abs;
    // And as close to the float64 reference as each other: the NVFP4 error (about 0.18
    // relative RMS here) dominates; the fold's bf16 rounding of s·q moved it by at most
    // 0.43% over 40 seeds.
    EXPECT_NEAR(r.fold_rel_rms, r.restore_rel_rms, 0.01 * r.restore_rel_rms) << "max_abs " << r.max_abs;
  }
}

TEST(FlashMlaFold, WithoutTheScaleShallowLayersLoseAccuracy) {
  const std::vector<LayerResult>& results = study_layers();
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(results.size(), study::default_layer_max_abs().size());
  const LayerResult& shallow = results.front();
  const LayerResult& deep = results.back();
  // Calibrated (restore or fold), every layer attends as accurately as the deepest (the
  // layers differ only in magnitude; over 40 seeds the spread was at most 4.3%).
  for (const LayerResult& r : results)
    EXPECT_NEAR(r.fold_rel_rms, deep.fold_rel_rms, 0.10 * deep.fold_rel_rms) << "max_abs " << r.max_abs;
  // Without a scale the deep layer is about as good (0.94x to 1.08x over 40 seeds), the
  // shallow one much worse (2.3x to 4.6x): at max|kv| 0.02 every block's scale is
  // E4M3's smallest subnormal, 2^-9 (flashmla-352's floor), where the scale can no longer
  // follow amax / 6, so each block's values use only the low, coarse end of E2M1's grid.
  EXPECT_NEAR(deep.no_scale_rel_rms, deep.fold_rel_rms, 0.2 * deep.fold_rel_rms);
  EXPECT_GT(shallow.no_scale_rel_rms, 1.75 * shallow.fold_rel_rms);
  EXPECT_GT(shallow.no_scale_rel_rms, 1.75 * deep.no_scale_rel_rms);
  // And the dynamic records read without the fold are not attention at all: the output
  // is off by the factor 1/s_l.
  for (const LayerResult& r : results) EXPECT_GT(r.unfolded_rel_rms, 10.0) << "max_abs " << r.max_abs;
}

}  // namespace
}  // namespace jitcache
