#include "runtime/kv/launch_contract.hpp"

#include <bit>
#include <cstdio>
#include <string>
#include <vector>

namespace jitcache {
namespace {

std::string hex(std::uint64_t value) {
  char buffer[24];
  std::snprintf(buffer, sizeof buffer, "0x%llx", static_cast<unsigned long long>(value));
  return buffer;
}

std::string describe(const ByteRange& r) {
  return "[" + hex(r.begin) + ", +" + std::to_string(r.bytes) + " bytes)";
}

// Inclusive last bytes: begin + bytes itself may be 2^64 (validate() allows a buffer that
// ends at the top of the address space).
bool overlap(const ByteRange& a, const ByteRange& b) {
  return a.begin <= b.begin + (b.bytes - 1) && b.begin <= a.begin + (a.bytes - 1);
}

std::uint64_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// From base to the end of the last of `rows` rows, as validate()'s extent check computes
// it (which has bounded the product, so 128 bits never wrap and the result fits).
std::uint64_t span_bytes(std::int64_t rows, std::int64_t stride, std::int64_t row_elems, std::size_t elem_bytes) {
  if (rows <= 0) return 0;
  __extension__ typedef unsigned __int128 Wide;
  const Wide bytes = (static_cast<Wide>(rows - 1) * static_cast<Wide>(stride) + static_cast<Wide>(row_elems)) *
                     static_cast<Wide>(elem_bytes);
  return static_cast<std::uint64_t>(bytes);
}

ByteRange optional_status(jc::u32* status) {
  return {"status", address(status), status != nullptr ? sizeof(jc::u32) : 0, Access::write};
}

// MurmurHash3's 64-bit finalizer: a bijection, so distinct slots never share a full hash,
// and it spreads runs of consecutive slots (a paged cache's blocks) over the table.
std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  x ^= x >> 33;
  return x;
}

Status duplicate(const jc::WriterParams& p, std::int64_t repeat) {
  const jc::i64 slot = p.slot_mapping[repeat];
  std::int64_t first = 0;
  while (p.slot_mapping[first] != slot) ++first;
  return make_error(ErrorCode::invalid_argument,
                    "kernel parameter 'slot_mapping': slot " + std::to_string(slot) + " appears at tokens " +
                        std::to_string(first) + " and " + std::to_string(repeat) +
                        "; one writer launch may write a slot at most once (negative slots, padding, may repeat)");
}

}  // namespace

Status check_disjoint(std::span<const ByteRange> ranges) {
  for (std::size_t i = 0; i < ranges.size(); ++i) {
    const ByteRange& a = ranges[i];
    if (a.access != Access::write || a.bytes == 0) continue;
    for (std::size_t j = 0; j < ranges.size(); ++j) {
      const ByteRange& b = ranges[j];
      // A pair of written ranges is seen from the first of the two only.
      if (j == i || b.bytes == 0 || (b.access == Access::write && j < i)) continue;
      if (overlap(a, b))
        return make_error(ErrorCode::invalid_argument,
                          std::string("kernel parameter '") + a.name + "': " + describe(a) + " overlaps '" +
                              b.name + "' " + describe(b) +
                              "; a buffer the kernel writes may share no byte with another buffer of the launch");
    }
  }
  return {};
}

Status check_no_overlap(const jc::WriterParams& p, RecordFormat format) {
  const std::int64_t n = p.num_tokens;
  const int record = record_bytes(format);
  // A format without RoPE never reads k_pe.
  const bool reads_rope = gathered_row_elems(format) > jc::k_latent_dim;
  const ByteRange ranges[] = {
      {"cache", address(p.cache), n > 0 ? span_bytes(p.num_slots, record, record, 1) : 0, Access::write},
      n > 0 ? optional_status(p.status) : ByteRange{"status", 0, 0, Access::write},
      {"kv_c", address(p.kv_c), span_bytes(n, p.kv_c_stride, jc::k_latent_dim, sizeof(jc::u16)), Access::read},
      {"k_pe", address(p.k_pe), reads_rope ? span_bytes(n, p.k_pe_stride, jc::k_rope_dim, sizeof(jc::u16)) : 0,
       Access::read},
      {"slot_mapping", address(p.slot_mapping), span_bytes(n, 1, 1, sizeof(jc::i64)), Access::read},
  };
  return check_disjoint(ranges);
}

Status check_no_overlap(const jc::GatherParams& p, RecordFormat format) {
  const std::int64_t n = p.num_rows;
  const int record = record_bytes(format);
  const ByteRange ranges[] = {
      {"out", address(p.out), span_bytes(n, p.out_stride, gathered_row_elems(format), sizeof(jc::u16)),
       Access::write},
      n > 0 ? optional_status(p.status) : ByteRange{"status", 0, 0, Access::write},
      {"cache", address(p.cache), n > 0 ? span_bytes(p.num_slots, record, record, 1) : 0, Access::read},
      {"slots", address(p.slots), span_bytes(n, 1, 1, sizeof(jc::i32)), Access::read},
  };
  return check_disjoint(ranges);
}

Status check_distinct_slots(const jc::WriterParams& p) {
  const std::int64_t n = p.num_tokens;
  const std::int64_t num_slots = p.num_slots;
  std::int64_t in_range = 0;
  for (std::int64_t t = 0; t < n; ++t) in_range += p.slot_mapping[t] >= 0 && p.slot_mapping[t] < num_slots;
  if (in_range < 2) return {};
  // n <= k_max_launch_rows (2^33), so neither doubling wraps.
  const std::uint64_t capacity = std::bit_ceil(2 * static_cast<std::uint64_t>(in_range));

  if (static_cast<std::uint64_t>(num_slots) <= 64 * capacity) {
    std::vector<std::uint64_t> seen((static_cast<std::uint64_t>(num_slots) + 63) / 64);
    for (std::int64_t t = 0; t < n; ++t) {
      const jc::i64 slot = p.slot_mapping[t];
      if (slot < 0 || slot >= num_slots) continue;
      std::uint64_t& word = seen[static_cast<std::uint64_t>(slot) / 64];
      const std::uint64_t bit = std::uint64_t{1} << (slot % 64);
      if (word & bit) return duplicate(p, t);
      word |= bit;
    }
    return {};
  }

  // Each cell holds slot + 1 (0: empty); slot + 1 <= num_slots fits in int64.
  std::vector<std::uint64_t> cells(capacity);
  const std::uint64_t mask = capacity - 1;
  for (std::int64_t t = 0; t < n; ++t) {
    const jc::i64 slot = p.slot_mapping[t];
    if (slot < 0 || slot >= num_slots) continue;
    const std::uint64_t key = static_cast<std::uint64_t>(slot) + 1;
    // At most half the cells are ever full, so the probe ends at an empty cell.
    for (std::uint64_t i = mix(key) & mask;; i = (i + 1) & mask) {
      if (cells[i] == key) return duplicate(p, t);
      if (cells[i] == 0) {
        cells[i] = key;
        break;
      }
    }
  }
  return {};
}

}  // namespace jitcache
