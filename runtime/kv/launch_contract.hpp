// The launch contract's two checks beyond alignment and bounds (runtime/kv/host_executor.hpp,
// validate()): no buffer a kernel writes shares a byte with another buffer of the launch,
// and no slot is written twice by one writer launch.
//
// Why the kernels need them: a writer token's record is written by several lanes, and the
// kernels load their inputs early and keep them in registers, trusting that a store cannot
// change what another load returns. A launch that breaks either rule has no defined
// result on the device, so the host refuses it where it can see it:
//   - overlap: from the pointers alone, in validate(), which both the device launch
//     wrappers and the host executor call;
//   - duplicate slots: only the host executor, whose slot_mapping is host memory. The
//     device launch wrappers cannot read slot_mapping (device memory); a duplicate slot
//     there is a caller error that leaves the slot's record undefined.
#pragma once

#include <cstdint>
#include <span>

#include "jitcache/error.hpp"
#include "kernel_templates/kernel_spec.hpp"
#include "kernel_templates/nvfp4_mla.cuh"

namespace jitcache {

enum class Access { read, write };

// The bytes one launch argument may touch: from its base to the end of its last row. For
// rows with a stride wider than the row, the gaps between rows are included: the range is
// conservative (a buffer placed inside another's row gaps counts as overlapping).
struct ByteRange {
  const char* name;
  std::uint64_t begin;
  std::uint64_t bytes;  // 0: the argument touches nothing in this launch
  Access access;
};

// Refuses (ErrorCode::invalid_argument) the first pair of non-empty ranges that share a
// byte when at least one of the two is written, naming the written one first:
//   kernel parameter 'cache': [0x1000, +864 bytes) overlaps 'kv_c' [0x1200, +2048 bytes); ...
// Ranges that are both only read may overlap (kv_c and k_pe as column slices of one
// [N, 576] tensor, as vLLM passes them).
Status check_disjoint(std::span<const ByteRange> ranges);

// The writer reads kv_c, k_pe and slot_mapping and writes cache and status; the gather
// reads cache and slots and writes out and status. Every range is empty for a launch of
// 0 rows, cache's for num_slots 0 (no slot is in range, so the cache is never touched)
// and status's when it is null. Call after validate()'s bound checks have passed (they
// guarantee that every range fits below 2^64).
Status check_no_overlap(const jc::WriterParams& params, RecordFormat format);
Status check_no_overlap(const jc::GatherParams& params, RecordFormat format);

// Refuses (ErrorCode::invalid_argument) a writer launch that maps two tokens to one slot
// in [0, num_slots), naming the slot and both token indices (the first repeat in token
// order and its first occurrence). Negative slots (padding) may repeat, and so may
// out-of-range ones: neither writes anything (the latter set the status bit). Reads
// slot_mapping, so host memory only; call after validate().
//
// O(N) time in the number of tokens and at most 32 bytes per in-range token: a bitmap
// over the cache's slots when that is no larger than a hash set of the launch's slots
// (num_slots <= 64 x the set's capacity), else the hash set (open addressing, capacity
// the power of two >= 2 x the in-range tokens, a bijective 64-bit mix of the slot as its
// hash). A bitmap alone would not do: num_slots may reach 2^40 (128 GiB of bits) for a
// launch of a few tokens; nor would sorting a copy (O(N log N)).
Status check_distinct_slots(const jc::WriterParams& params);

}  // namespace jitcache
