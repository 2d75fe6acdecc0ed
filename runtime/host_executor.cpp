#include "runtime/host_executor.hpp"

#include <cstdint>
#include <string>

namespace jitcache {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

Status check(bool ok, const char* field, const char* rule) {
  if (ok) return {};
  return make_error(ErrorCode::invalid_argument,
                    std::string("kernel parameter '") + field + "': " + rule);
}

template <jc::LatentMode LM, jc::RopeMode RM>
jc::u32 run_writer(const jc::WriterParams& p, float scale) {
  jc::u32 status = 0;
  jc::WriterParams q = p;
  q.status = &status;
  if (!jc::latent_scale_ok<LM>(scale)) {
    jc::report(q.status, jc::latent_scale_error_bit<LM>());
  } else {
    for (jc::i64 t = 0; t < q.num_tokens; ++t) {
      // The GPU reduces the RoPE lanes' partial maxima with shuffles; max is exact, so
      // a sequential reduction gives the same value.
      float rope_amax = 0.0f;
      for (int lane = 0; lane < jc::k_warp; ++lane)
        rope_amax = jc::max_num(rope_amax, jc::writer_rope_partial_amax<RM>(q, t, lane));
      for (int lane = 0; lane < jc::k_warp; ++lane)
        jc::writer_lane<LM, RM>(q, t, lane, scale, rope_amax);
    }
  }
  if (p.status != nullptr) *p.status |= status;
  return status;
}

template <jc::LatentMode LM, jc::RopeMode RM>
jc::u32 run_gather(const jc::GatherParams& p, float scale) {
  jc::u32 status = 0;
  jc::GatherParams q = p;
  q.status = &status;
  if (!jc::latent_scale_ok<LM>(scale)) {
    jc::report(q.status, jc::latent_scale_error_bit<LM>());
  } else {
    for (jc::i64 row = 0; row < q.num_rows; ++row)
      for (int lane = 0; lane < jc::k_warp; ++lane) jc::gather_lane<LM, RM>(q, row, lane, scale);
  }
  if (p.status != nullptr) *p.status |= status;
  return status;
}

template <class Params, class Fn>
jc::u32 dispatch(LatentScale latent, RopeFormat rope, const Params& p, float scale, Fn&& fn) {
  using L = jc::LatentMode;
  using R = jc::RopeMode;
  const bool id = latent == LatentScale::identity;
  const bool bf = rope == RopeFormat::bf16;
  if (id && bf) return fn.template operator()<L::identity, R::bf16>(p, scale);
  if (id) return fn.template operator()<L::identity, R::fp8>(p, scale);
  if (bf) return fn.template operator()<L::dynamic, R::bf16>(p, scale);
  return fn.template operator()<L::dynamic, R::fp8>(p, scale);
}

}  // namespace

Status validate(const jc::WriterParams& p, RopeFormat rope) {
  (void)rope;
  JC_TRY(check(p.num_tokens >= 0, "num_tokens", "must be >= 0"));
  JC_TRY(check(p.num_slots >= 0, "num_slots", "must be >= 0"));
  if (p.num_tokens == 0) return {};
  JC_TRY(check(p.kv_c != nullptr && aligned16(p.kv_c), "kv_c", "must be non-null and 16-byte aligned"));
  JC_TRY(check(p.k_pe != nullptr && aligned16(p.k_pe), "k_pe", "must be non-null and 16-byte aligned"));
  JC_TRY(check(p.slot_mapping != nullptr, "slot_mapping", "must be non-null"));
  JC_TRY(check(p.cache != nullptr && aligned16(p.cache), "cache", "must be non-null and 16-byte aligned"));
  JC_TRY(check(p.kv_c_stride >= jc::k_latent_dim && p.kv_c_stride % 8 == 0, "kv_c_stride",
               "must be >= 512 and a multiple of 8 elements"));
  JC_TRY(check(p.k_pe_stride >= jc::k_rope_dim && p.k_pe_stride % 8 == 0, "k_pe_stride",
               "must be >= 64 and a multiple of 8 elements"));
  return {};
}

Status validate(const jc::GatherParams& p) {
  JC_TRY(check(p.num_rows >= 0, "num_rows", "must be >= 0"));
  JC_TRY(check(p.num_slots >= 0, "num_slots", "must be >= 0"));
  if (p.num_rows == 0) return {};
  JC_TRY(check(p.slots != nullptr, "slots", "must be non-null"));
  JC_TRY(check(p.out != nullptr && aligned16(p.out), "out", "must be non-null and 16-byte aligned"));
  JC_TRY(check(p.out_stride >= jc::k_out_dim && p.out_stride % 8 == 0, "out_stride",
               "must be >= 576 and a multiple of 8 elements"));
  JC_TRY(check(p.num_slots == 0 || (p.cache != nullptr && aligned16(p.cache)), "cache",
               "must be non-null and 16-byte aligned"));
  return {};
}

Result<jc::u32> host_run_writer(LatentScale latent, RopeFormat rope, const jc::WriterParams& p,
                                float scale) {
  JC_TRY(validate(p, rope));
  return dispatch(latent, rope, p, scale,
                  []<jc::LatentMode LM, jc::RopeMode RM>(const jc::WriterParams& q, float s) {
                    return run_writer<LM, RM>(q, s);
                  });
}

Result<jc::u32> host_run_gather(LatentScale latent, RopeFormat rope, const jc::GatherParams& p,
                                float scale) {
  JC_TRY(validate(p));
  return dispatch(latent, rope, p, scale,
                  []<jc::LatentMode LM, jc::RopeMode RM>(const jc::GatherParams& q, float s) {
                    return run_gather<LM, RM>(q, s);
                  });
}

}  // namespace jitcache
