#include "runtime/kv/host_executor.hpp"

#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <unordered_set>
#include <utility>

#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/kv/launch_contract.hpp"

namespace jitcache {
namespace {

Status invalid(const char* field, const std::string& rule) {
  return make_error(ErrorCode::invalid_argument, std::string("kernel parameter '") + field + "': " + rule);
}

std::string hex(std::uint64_t value) {
  char buffer[24];
  std::snprintf(buffer, sizeof buffer, "0x%llx", static_cast<unsigned long long>(value));
  return buffer;
}

Status check_count(std::int64_t count, const char* field, std::int64_t max) {
  if (count < 0) return invalid(field, "must be >= 0, got " + std::to_string(count));
  if (count > max)
    return invalid(
        field, "must be <= " + std::to_string(max) + " (one launch's limit), got " + std::to_string(count));
  return {};
}

Status check_pointer(const void* p, const char* field, std::size_t alignment, const char* type) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  if (address == 0) return invalid(field, "must be non-null");
  if (address % alignment != 0)
    return invalid(
        field, "must be " + std::to_string(alignment) + "-byte aligned (" + type + "), got " + hex(address));
  return {};
}

Status check_optional_pointer(const void* p, const char* field, std::size_t alignment, const char* type) {
  return p == nullptr ? Status{} : check_pointer(p, field, alignment, type);
}

Status check_stride(std::int64_t stride, int row_elems, const char* field) {
  if (stride < row_elems || stride % 8 != 0)
    return invalid(field, "must be >= " + std::to_string(row_elems) + " and a multiple of 8 elements, got " +
                              std::to_string(stride));
  return {};
}

// The buffer spans (count - 1) * stride + row elements from `base`. That many bytes must
// fit in int64 (the kernels' index type) and must not wrap the 64-bit address space.
Status check_extent(const void* base, const char* field, std::int64_t count, std::int64_t stride,
                    std::int64_t row_elems, std::size_t elem_bytes) {
  if (count == 0) return {};
  // Callers bound count (rows <= 2^33) wherever the stride is free, so nothing here wraps.
  __extension__ typedef unsigned __int128 Wide;
  const Wide bytes =
      (static_cast<Wide>(count - 1) * static_cast<Wide>(stride) + static_cast<Wide>(row_elems)) *
      static_cast<Wide>(elem_bytes);
  const Wide end = static_cast<Wide>(reinterpret_cast<std::uintptr_t>(base)) + bytes;
  if (bytes > static_cast<Wide>(std::numeric_limits<std::int64_t>::max()) || end > (Wide{1} << 64))
    return invalid(field, "the buffer at " + hex(reinterpret_cast<std::uintptr_t>(base)) + " with " +
                              std::to_string(count) + " rows of stride " + std::to_string(stride) +
                              " does not fit in the 64-bit address space");
  return {};
}

// What every body below shares: the run's status word is its own (or'ed into the caller's
// at the end), and an outer scale the kernel refuses reports its bit and runs nothing, as
// the kernels' first check does.
template <class Params, class Body>
jc::u32 run_checked(const Params& p, bool scale_ok, jc::u32 refused_bit, Body&& body) {
  jc::u32 status = 0;
  Params q = p;
  q.status = &status;
  if (scale_ok) {
    body(q);
  } else {
    jc::report(q.status, refused_bit);
  }
  if (p.status != nullptr) *p.status |= status;
  return status;
}

template <jc::LatentMode LM, jc::RopeMode RM>
jc::u32 run_first_text(const jc::WriterParams& p, float scale) {
  return run_checked(p, jc::latent_scale_ok<LM>(scale), jc::latent_scale_error_bit<LM>(), [&](jc::WriterParams& q) {
    jc::WriterLoads in[jc::k_warp];
    jc::WriterPartials part[jc::k_warp];
    jc::BlockScale mine[jc::k_warp];
    for (jc::i64 t = 0; t < q.num_tokens; ++t) {
      for (int lane = 0; lane < jc::k_warp; ++lane) {
        in[lane] = jc::writer_load(q, t, lane);
        part[lane] = jc::writer_partials<RM>(in[lane]);
      }
      // The warp's cross-lane steps, in the kernel's order: each chunk amax with the
      // partner's (xor 1); the RoPE amax over all lanes (max is exact, commutative and
      // associative on these never-NaN values, so the order does not matter); then, where
      // the lanes share the block scales, each lane's scale of the block of its chunk
      // lane & 1, and the partner's copy of the other one.
      float rope_amax = 0.0f;
      for (int lane = 0; lane < jc::k_warp; ++lane) rope_amax = jc::max_num(rope_amax, part[lane].rope_amax);
      float block_amax[jc::k_warp][2];
      for (int lane = 0; lane < jc::k_warp; ++lane)
        for (int j = 0; j < 2; ++j)
          block_amax[lane][j] = jc::max_num(part[lane].latent_amax[j], part[lane ^ 1].latent_amax[j]);
      if constexpr (jc::shares_block_scales<LM>())
        for (int lane = 0; lane < jc::k_warp; ++lane)
          mine[lane] = jc::block_scale<LM>(block_amax[lane][lane % 2], scale);
      for (int lane = 0; lane < jc::k_warp; ++lane) {
        jc::BlockScale scales[2];
        if constexpr (jc::shares_block_scales<LM>()) {
          scales[lane % 2] = mine[lane];
          scales[1 - lane % 2] = mine[lane ^ 1];
        } else {
          scales[0] = jc::block_scale<LM>(block_amax[lane][0], scale);
          scales[1] = jc::block_scale<LM>(block_amax[lane][1], scale);
        }
        jc::writer_lane<LM, RM>(q, lane, in[lane], scales, rope_amax);
      }
    }
  });
}

template <jc::LatentMode LM, jc::RopeMode RM>
jc::u32 run_first_text(const jc::GatherParams& p, float scale) {
  return run_checked(p, jc::latent_scale_ok<LM>(scale), jc::latent_scale_error_bit<LM>(), [&](jc::GatherParams& q) {
    for (jc::i64 row = 0; row < q.num_rows; ++row)
      for (int lane = 0; lane < jc::k_warp; ++lane) jc::gather_lane<LM, RM>(q, row, lane, scale);
  });
}

// The formats' bodies (nvfp4_mla_formats.cuh) the same way: the per-token writer first
// takes the maximum of every lane's block amaxes (the warp's reduction) to get s_t.
template <jc::fmt::Scaling S, jc::fmt::Format F>
jc::u32 run_formats(const jc::WriterParams& p, float scale) {
  return run_checked(p, jc::fmt::outer_scale_ok<S>(scale), jc::fmt::outer_scale_error_bit<S>(),
                     [&](jc::WriterParams& q) {
    jc::WriterLoads in[jc::k_warp];
    jc::WriterPartials part[jc::k_warp];
    jc::BlockScale mine[jc::k_warp];
    for (jc::i64 t = 0; t < q.num_tokens; ++t) {
      for (int lane = 0; lane < jc::k_warp; ++lane) {
        in[lane] = jc::fmt::writer_load<F>(q, t, lane);
        part[lane] = jc::fmt::writer_partials<F>(in[lane]);
      }
      float rope_amax = 0.0f;
      for (int lane = 0; lane < jc::k_warp; ++lane) rope_amax = jc::max_num(rope_amax, part[lane].rope_amax);
      float block_amax[jc::k_warp][2];
      float token_amax = 0.0f;
      for (int lane = 0; lane < jc::k_warp; ++lane)
        for (int j = 0; j < 2; ++j) {
          block_amax[lane][j] = jc::max_num(part[lane].latent_amax[j], part[lane ^ 1].latent_amax[j]);
          token_amax = jc::max_num(token_amax, block_amax[lane][j]);
        }
      float s = scale;
      float token_scale = 0.0f;
      if constexpr (S == jc::fmt::Scaling::per_token) {
        token_scale = jc::fmt::per_token_scale(token_amax);
        s = token_scale;
      }
      if constexpr (jc::fmt::shares_block_scales<S>())
        for (int lane = 0; lane < jc::k_warp; ++lane)
          mine[lane] = jc::fmt::block_scale_of<S, F>(block_amax[lane][lane % 2], s);
      for (int lane = 0; lane < jc::k_warp; ++lane) {
        jc::BlockScale scales[2];
        if constexpr (jc::fmt::shares_block_scales<S>()) {
          scales[lane % 2] = mine[lane];
          scales[1 - lane % 2] = mine[lane ^ 1];
        } else {
          scales[0] = jc::fmt::block_scale_of<S, F>(block_amax[lane][0], s);
          scales[1] = jc::fmt::block_scale_of<S, F>(block_amax[lane][1], s);
        }
        jc::fmt::writer_lane<S, F>(q, lane, in[lane], scales, rope_amax, token_scale);
      }
    }
  });
}

template <jc::fmt::Scaling S, jc::fmt::Format F>
jc::u32 run_formats(const jc::GatherParams& p, float scale) {
  return run_checked(p, jc::fmt::outer_scale_ok<S>(scale), jc::fmt::outer_scale_error_bit<S>(),
                     [&](jc::GatherParams& q) {
    for (jc::i64 row = 0; row < q.num_rows; ++row)
      for (int lane = 0; lane < jc::k_warp; ++lane) jc::fmt::gather_lane<S, F>(q, row, lane, scale);
  });
}

// The page-major formats' bodies: rows in order, a row whose in-range slot an earlier row
// took writes nothing (the GPU warp's scan of the earlier rows), then the lanes with the
// kernel's one exchange, each chunk amax with its partner's (xor 1).
template <jc::fmt::Scaling S, jc::fmt::Format F>
jc::u32 run_paged(const jc::WriterParams& p, float scale) {
  return run_checked(p, jc::fmt::outer_scale_ok<S>(scale), jc::fmt::outer_scale_error_bit<S>(),
                     [&](jc::WriterParams& q) {
    std::unordered_set<jc::i64> taken;
    jc::WriterLoads in[jc::k_warp];
    float amax[jc::k_warp][2];
    for (jc::i64 t = 0; t < q.num_tokens; ++t) {
      const jc::i64 slot = q.slot_mapping[t];
      if (slot >= 0 && slot < q.num_slots && !taken.insert(slot).second) continue;
      for (int lane = 0; lane < jc::k_warp; ++lane) {
        in[lane] = jc::fmt::writer_load<F>(q, t, lane);
        for (int j = 0; j < 2; ++j) amax[lane][j] = jc::fmt::paged_chunk_amax<F>(in[lane].latent[j]);
      }
      for (int lane = 0; lane < jc::k_warp; ++lane) {
        const jc::fmt::PagedScale scales[2] = {
            jc::fmt::paged_scale<F>(jc::max_num(amax[lane][0], amax[lane ^ 1][0])),
            jc::fmt::paged_scale<F>(jc::max_num(amax[lane][1], amax[lane ^ 1][1]))};
        jc::fmt::paged_writer_lane<F>(q, lane, in[lane], scales);
      }
    }
  });
}

template <jc::fmt::Scaling S, jc::fmt::Format F>
jc::u32 run_paged(const jc::GatherParams& p, float scale) {
  return run_checked(p, jc::fmt::outer_scale_ok<S>(scale), jc::fmt::outer_scale_error_bit<S>(),
                     [&](jc::GatherParams& q) {
    for (jc::i64 row = 0; row < q.num_rows; ++row)
      for (int lane = 0; lane < jc::k_warp; ++lane) jc::fmt::paged_gather_lane<F>(q, row, lane);
  });
}

template <jc::fmt::Format F>
constexpr bool is_paged() {
  return jc::fmt::layout(F).placement == jc::fmt::Placement::paged;
}

// The run-time values to template arguments: one case per enumerator (a new one fails to
// compile here until it has a case), each instantiating with its table row's device
// enumerator (a new one fails to compile until it has a row). `fn` is called with the
// formats' enumerators; the caller picks the bodies.
template <jc::fmt::Scaling S, class Params, class Fn>
Result<jc::u32> dispatch_format(RecordFormat format, const Params& p, float scale, Fn&& fn) {
  switch (format) {
    case RecordFormat::b12x_432:
      return fn.template operator()<S, k_record_formats[RecordFormat::b12x_432].device>(p, scale);
    case RecordFormat::b12x_368:
      return fn.template operator()<S, k_record_formats[RecordFormat::b12x_368].device>(p, scale);
    case RecordFormat::b12x_304:
      return fn.template operator()<S, k_record_formats[RecordFormat::b12x_304].device>(p, scale);
    case RecordFormat::flashmla_352:
      return fn.template operator()<S, k_record_formats[RecordFormat::flashmla_352].device>(p, scale);
    case RecordFormat::flashinfer_glm_416:
      return fn.template operator()<S, k_record_formats[RecordFormat::flashinfer_glm_416].device>(p, scale);
    case RecordFormat::flashinfer_dsv4_384:
      return fn.template operator()<S, k_record_formats[RecordFormat::flashinfer_dsv4_384].device>(p, scale);
    case RecordFormat::flashmla_v41_288:
      return fn.template operator()<S, k_record_formats[RecordFormat::flashmla_v41_288].device>(p, scale);
  }
  return make_error(ErrorCode::invalid_argument,
                    "no record format " + std::to_string(std::to_underlying(format)) + ": no kernel to run");
}

template <class Params, class Fn>
Result<jc::u32> dispatch(LatentScale latent, RecordFormat format, const Params& p, float scale, Fn&& fn) {
  switch (latent) {
    case LatentScale::identity:
      return dispatch_format<k_latent_scales[LatentScale::identity].device>(format, p, scale, fn);
    case LatentScale::dynamic:
      return dispatch_format<k_latent_scales[LatentScale::dynamic].device>(format, p, scale, fn);
    case LatentScale::per_token:
      return dispatch_format<k_latent_scales[LatentScale::per_token].device>(format, p, scale, fn);
  }
  const std::string value = std::to_string(std::to_underlying(latent));
  return make_error(ErrorCode::invalid_argument, "no latent-scale mode " + value + ": no kernel to run");
}

// nvfp4_mla.cuh's enumerators for a variant its first text builds (the generator's
// from_first_text): the formats' enumerators share their values.
template <jc::fmt::Scaling S>
constexpr jc::LatentMode first_text_mode() {
  return static_cast<jc::LatentMode>(std::to_underlying(S));
}
template <jc::fmt::Format F>
constexpr jc::RopeMode first_text_rope() {
  return static_cast<jc::RopeMode>(std::to_underlying(F));
}
template <jc::fmt::Scaling S, jc::fmt::Format F>
constexpr bool built_from_first_text() {
  return S != jc::fmt::Scaling::per_token && (F == jc::fmt::Format::b12x_432 || F == jc::fmt::Format::b12x_368);
}

Status check_mode(LatentScale latent, RecordFormat format) { return check_format_mode(format, latent); }

// A variant's bodies, the writer's or the gather's alike (each name above is overloaded on
// the kernel's parameters): the page-major formats' own; else the first text's where the
// generator builds the variant from it and the caller asks for the bodies as generated;
// else the formats header's.
template <class Params>
Result<jc::u32> run_bodies(LatentScale latent, RecordFormat format, const Params& p, float scale,
                           HostBodies bodies) {
  return dispatch(latent, format, p, scale, [bodies]<jc::fmt::Scaling S, jc::fmt::Format F>(const Params& q, float s) {
    if constexpr (is_paged<F>()) {
      return run_paged<S, F>(q, s);
    } else {
      if constexpr (built_from_first_text<S, F>())
        if (bodies == HostBodies::as_generated) return run_first_text<first_text_mode<S>(), first_text_rope<F>()>(q, s);
      return run_formats<S, F>(q, s);
    }
  });
}

}  // namespace

// A page-major cache is whole pages.
Status check_whole_pages(std::int64_t num_slots, RecordFormat format) {
  const int page = k_record_formats[format].page_size;
  if (num_slots % page != 0)
    return invalid("num_slots", std::string("must be a multiple of ") + to_string(format) + "'s page size " +
                                    std::to_string(page) + ", got " + std::to_string(num_slots));
  return {};
}

Status validate(const jc::WriterParams& p, RecordFormat format) {
  const bool has_rope = jc::fmt::reads_k_pe(jc::fmt::layout(k_record_formats[format].device));
  JC_TRY(check_count(p.num_tokens, "num_tokens", k_max_launch_rows));
  JC_TRY(check_count(p.num_slots, "num_slots", std::numeric_limits<std::int64_t>::max()));
  JC_TRY(check_whole_pages(p.num_slots, format));
  if (p.num_tokens == 0) return {};
  JC_TRY(check_pointer(p.kv_c, "kv_c", 16, "bf16 rows"));
  if (has_rope) JC_TRY(check_pointer(p.k_pe, "k_pe", 16, "bf16 rows"));
  JC_TRY(check_pointer(p.slot_mapping, "slot_mapping", alignof(std::int64_t), "int64"));
  JC_TRY(check_optional_pointer(p.status, "status", alignof(std::uint32_t), "uint32"));
  JC_TRY(check_stride(p.kv_c_stride, jc::k_latent_dim, "kv_c_stride"));
  if (has_rope) JC_TRY(check_stride(p.k_pe_stride, jc::k_rope_dim, "k_pe_stride"));
  JC_TRY(check_extent(p.kv_c, "kv_c", p.num_tokens, p.kv_c_stride, jc::k_latent_dim, sizeof(jc::u16)));
  if (has_rope)
    JC_TRY(check_extent(p.k_pe, "k_pe", p.num_tokens, p.k_pe_stride, jc::k_rope_dim, sizeof(jc::u16)));
  JC_TRY(check_extent(p.slot_mapping, "slot_mapping", p.num_tokens, 1, 1, sizeof(std::int64_t)));
  // Every slot is out of range with no slots: the cache is never written.
  if (p.num_slots > 0) {
    JC_TRY(check_pointer(p.cache, "cache", 16, "records"));
    const int record = record_bytes(format);
    JC_TRY(check_extent(p.cache, "cache", p.num_slots, record, record, 1));
  }
  return check_no_overlap(p, format);
}

Status validate(const jc::GatherParams& p, RecordFormat format) {
  const int row_elems = gathered_row_elems(format);
  JC_TRY(check_count(p.num_rows, "num_rows", k_max_launch_rows));
  JC_TRY(check_count(p.num_slots, "num_slots", std::numeric_limits<std::int64_t>::max()));
  JC_TRY(check_whole_pages(p.num_slots, format));
  if (p.num_rows == 0) return {};
  JC_TRY(check_pointer(p.slots, "slots", alignof(std::int32_t), "int32"));
  JC_TRY(check_pointer(p.out, "out", 16, "bf16 rows"));
  JC_TRY(check_optional_pointer(p.status, "status", alignof(std::uint32_t), "uint32"));
  JC_TRY(check_stride(p.out_stride, row_elems, "out_stride"));
  JC_TRY(check_extent(p.slots, "slots", p.num_rows, 1, 1, sizeof(std::int32_t)));
  JC_TRY(check_extent(p.out, "out", p.num_rows, p.out_stride, row_elems, sizeof(jc::u16)));
  // Every slot is out of range with no slots: the cache is never read.
  if (p.num_slots > 0) {
    JC_TRY(check_pointer(p.cache, "cache", 16, "records"));
    const int record = record_bytes(format);
    JC_TRY(check_extent(p.cache, "cache", p.num_slots, record, record, 1));
  }
  return check_no_overlap(p, format);
}

Result<jc::u32> host_run_writer(LatentScale latent, RecordFormat format, const jc::WriterParams& p,
                                float scale, HostBodies bodies) {
  JC_TRY(check_mode(latent, format));
  JC_TRY(validate(p, format));
  // A page-major writer defines duplicates (the lowest row wins), as its engine's does.
  if (k_record_formats[format].page_size == 1) JC_TRY(check_distinct_slots(p));
  return run_bodies(latent, format, p, scale, bodies);
}

Result<jc::u32> host_run_gather(LatentScale latent, RecordFormat format, const jc::GatherParams& p,
                                float scale, HostBodies bodies) {
  JC_TRY(check_mode(latent, format));
  JC_TRY(validate(p, format));
  return run_bodies(latent, format, p, scale, bodies);
}

}  // namespace jitcache
