// The launch contract (issue 16 item 4; runtime/kv/launch_contract.hpp): a buffer a kernel
// writes shares no byte with another buffer of the launch (checked by validate(), so by
// the device launch wrappers and the host executor alike), and the host executor refuses
// a writer launch that maps two tokens to one slot.
#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <limits>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "jitcache/jitcache.h"
#include "kernel_templates/variant_dimensions.hpp"
#include "runtime/kv/host_executor.hpp"
#include "runtime/kv/launch_contract.hpp"
#include "test_scale_support.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using jitcache::testing::test_seed;

template <class T>
T* at(std::uint64_t address) {
  return reinterpret_cast<T*>(static_cast<std::uintptr_t>(address));
}

std::string hex(std::uint64_t value) {
  char buffer[24];
  std::snprintf(buffer, sizeof buffer, "0x%llx", static_cast<unsigned long long>(value));
  return buffer;
}

void expect_overlap(const Status& status, const std::string& written, const std::string& other) {
  ASSERT_FALSE(status) << written << " over " << other << " passed";
  EXPECT_EQ(status.error().code, ErrorCode::invalid_argument);
  EXPECT_CONTAINS(status.error().message, "kernel parameter '" + written + "': [0x");
  EXPECT_CONTAINS(status.error().message, " overlaps '" + other + "' [0x");
}

// validate() does arithmetic on the addresses and never dereferences them, so these
// launches name made-up addresses far apart: 4 tokens in rows of 576 elements (kv_c and
// k_pe apart here; as column slices of one tensor below), 8 slots.
constexpr std::int64_t k_tokens = 4;
constexpr std::uint64_t k_kv_c = 0x100000;
constexpr std::uint64_t k_kv_c_bytes = (3 * 576 + 512) * 2;  // 4480
constexpr std::uint64_t k_k_pe = 0x180000;
constexpr std::uint64_t k_k_pe_bytes = (3 * 576 + 64) * 2;   // 3584
constexpr std::uint64_t k_slot_mapping = 0x200000;
constexpr std::uint64_t k_cache = 0x300000;
constexpr std::uint64_t k_cache_bytes = 8 * 432;             // bf16 RoPE records
constexpr std::uint64_t k_status = 0x400000;

jc::WriterParams writer() {
  return {at<const jc::u16>(k_kv_c), 576, at<const jc::u16>(k_k_pe), 576, at<const jc::i64>(k_slot_mapping),
          k_tokens, at<jc::u8>(k_cache), 8, at<jc::u32>(k_status)};
}

// One buffer of a writer launch: where it is and how to move it.
struct WriterField {
  const char* name;
  std::uint64_t base;
  std::uint64_t bytes;
  std::uint64_t alignment;
  void (*place)(jc::WriterParams&, std::uint64_t);
};

const WriterField k_writer_fields[] = {
    {"cache", k_cache, k_cache_bytes, 16, [](jc::WriterParams& p, std::uint64_t a) { p.cache = at<jc::u8>(a); }},
    {"status", k_status, 4, 4, [](jc::WriterParams& p, std::uint64_t a) { p.status = at<jc::u32>(a); }},
    {"kv_c", k_kv_c, k_kv_c_bytes, 16, [](jc::WriterParams& p, std::uint64_t a) { p.kv_c = at<const jc::u16>(a); }},
    {"k_pe", k_k_pe, k_k_pe_bytes, 16, [](jc::WriterParams& p, std::uint64_t a) { p.k_pe = at<const jc::u16>(a); }},
    {"slot_mapping", k_slot_mapping, 32, 8,
     [](jc::WriterParams& p, std::uint64_t a) { p.slot_mapping = at<const jc::i64>(a); }},
};

TEST(LaunchContract, AWriterBufferMayNotOverlapAnyOtherToTheByte) {
  // (8 slots: a page-major cache is whole pages of 64, tests/runtime/kv/test_paged_formats.cpp.)
  for (RecordFormat rope : k_record_formats.values())
    if (k_record_formats[rope].page_size == 1) EXPECT_OK(validate(writer(), rope));
  // The written buffers (cache, status) against every other buffer: ending right at the
  // other's first byte passes, one alignment unit further is refused; so is starting at
  // the other's last aligned unit, and starting right after its end passes.
  for (const WriterField& w : {k_writer_fields[0], k_writer_fields[1]}) {
    for (const WriterField& o : k_writer_fields) {
      if (&o == &w || std::string(o.name) == w.name) continue;
      SCOPED_TRACE(std::string(w.name) + " against " + o.name);
      // cache and status overlap each other from cache's side: it is checked first.
      const bool cache_side = std::string(w.name) == "status" && std::string(o.name) == "cache";
      const std::string first = cache_side ? "cache" : w.name;
      const std::string second = cache_side ? "status" : o.name;
      jc::WriterParams p = writer();
      w.place(p, o.base - w.bytes);
      EXPECT_OK(validate(p, RecordFormat::b12x_432));
      w.place(p, o.base - w.bytes + w.alignment);
      expect_overlap(validate(p, RecordFormat::b12x_432), first, second);
      const std::uint64_t last_unit = (o.base + o.bytes - 1) / w.alignment * w.alignment;
      w.place(p, last_unit);
      expect_overlap(validate(p, RecordFormat::b12x_432), first, second);
      w.place(p, (o.base + o.bytes + w.alignment - 1) / w.alignment * w.alignment);
      EXPECT_OK(validate(p, RecordFormat::b12x_432));
    }
  }
}

TEST(LaunchContract, TheMessageNamesBothBuffersWithTheirByteRanges) {
  jc::WriterParams p = writer();
  p.cache = at<jc::u8>(k_kv_c + 4480 - 16);
  const Status status = validate(p, RecordFormat::b12x_432);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().message, "kernel parameter 'cache': [" + hex(k_kv_c + 4464) +
                                        ", +3456 bytes) overlaps 'kv_c' [" + hex(k_kv_c) +
                                        ", +4480 bytes); a buffer the kernel writes may share no byte "
                                        "with another buffer of the launch");
  // fp8 records are 368 bytes: the cache's range follows the RoPE format.
  p.cache = at<jc::u8>(k_kv_c - 8 * 368);
  EXPECT_OK(validate(p, RecordFormat::b12x_368));
  expect_overlap(validate(p, RecordFormat::b12x_432), "cache", "kv_c");
}

TEST(LaunchContract, BuffersThatAreOnlyReadMayOverlap) {
  jc::WriterParams p = writer();
  p.k_pe = p.kv_c + 512;  // vLLM: column slices of one [N, 576] tensor
  EXPECT_OK(validate(p, RecordFormat::b12x_432));
  p.k_pe = p.kv_c;  // the same rows, read twice
  EXPECT_OK(validate(p, RecordFormat::b12x_432));
  p.slot_mapping = at<const jc::i64>(k_kv_c + 64);  // inside kv_c's first row
  EXPECT_OK(validate(p, RecordFormat::b12x_432));
  // A gather's slots may lie inside the cache it reads.
  jc::GatherParams g{at<const jc::u8>(k_cache), 8, at<const jc::i32>(k_cache + 432), 4,
                     at<jc::u16>(0x500000), 576, nullptr};
  EXPECT_OK(validate(g, RecordFormat::b12x_432));
}

TEST(LaunchContract, EveryGatherWriteIsCheckedAgainstEveryOtherBuffer) {
  constexpr std::uint64_t cache = 0x100000, slots = 0x200000, out = 0x300000, status = 0x400000;
  constexpr std::uint64_t out_bytes = 4 * 1152;
  const jc::GatherParams g{at<const jc::u8>(cache), 8, at<const jc::i32>(slots), 4, at<jc::u16>(out), 576,
                           at<jc::u32>(status)};
  for (RecordFormat rope : k_record_formats.values())
    if (k_record_formats[rope].page_size == 1) EXPECT_OK(validate(g, rope));
  auto with = [&](auto change) {
    jc::GatherParams p = g;
    change(p);
    return validate(p, RecordFormat::b12x_432);
  };
  // out over the cache's last record, over slots, over status.
  expect_overlap(with([&](auto& p) { p.out = at<jc::u16>(cache + 8 * 432 - 16); }), "out", "cache");
  EXPECT_OK(with([&](auto& p) { p.out = at<jc::u16>(cache + 8 * 432); }));
  expect_overlap(with([&](auto& p) { p.out = at<jc::u16>(slots); }), "out", "slots");
  expect_overlap(with([&](auto& p) { p.status = at<jc::u32>(out + out_bytes - 4); }), "out", "status");
  EXPECT_OK(with([&](auto& p) { p.status = at<jc::u32>(out + out_bytes); }));
  // status over the cache, over slots.
  expect_overlap(with([&](auto& p) { p.status = at<jc::u32>(cache + 100); }), "status", "cache");
  expect_overlap(with([&](auto& p) { p.status = at<jc::u32>(slots + 12); }), "status", "slots");
  EXPECT_OK(with([&](auto& p) { p.status = at<jc::u32>(slots + 16); }));
}

TEST(LaunchContract, AStridedBufferSpansItsRowGaps) {
  // out rows of 576 elements every 640: the 128-byte gap after each row but the last
  // belongs to out's range; the bytes after the last row do not.
  constexpr std::uint64_t out = 0x300000;
  jc::GatherParams g{at<const jc::u8>(0x100000), 8, at<const jc::i32>(0x200000), 3, at<jc::u16>(out), 640,
                     at<jc::u32>(out + 1152)};
  expect_overlap(validate(g, RecordFormat::b12x_432), "out", "status");
  g.status = at<jc::u32>(out + 2 * 1280 + 1152);
  EXPECT_OK(validate(g, RecordFormat::b12x_432));
  // The same for a read buffer: status inside k_pe's first row gap, then past its end.
  jc::WriterParams p = writer();
  p.status = at<jc::u32>(k_k_pe + 128);
  expect_overlap(validate(p, RecordFormat::b12x_432), "status", "k_pe");
  p.status = at<jc::u32>(k_k_pe + k_k_pe_bytes);
  EXPECT_OK(validate(p, RecordFormat::b12x_432));
}

TEST(LaunchContract, WhatALaunchDoesNotTouchMayOverlapAnything) {
  // No rows: nothing is read or written.
  jc::WriterParams p = writer();
  p.num_tokens = 0;
  p.cache = at<jc::u8>(k_kv_c);
  p.status = at<jc::u32>(k_kv_c);
  EXPECT_OK(validate(p, RecordFormat::b12x_432));
  jc::GatherParams g{at<const jc::u8>(0x100000), 8, at<const jc::i32>(0x100000), 0, at<jc::u16>(0x100000), 576,
                     at<jc::u32>(0x100000)};
  EXPECT_OK(validate(g, RecordFormat::b12x_432));
  // No slots: every slot is out of range and the cache is never touched.
  p = writer();
  p.num_slots = 0;
  p.cache = at<jc::u8>(k_kv_c);
  EXPECT_OK(validate(p, RecordFormat::b12x_432));
  g.num_rows = 4;
  g.num_slots = 0;
  g.slots = at<const jc::i32>(0x200000);
  g.out = at<jc::u16>(0x300000);
  g.cache = at<const jc::u8>(0x300000);
  g.status = nullptr;  // no status word: nothing to overlap
  EXPECT_OK(validate(g, RecordFormat::b12x_432));
}

TEST(LaunchContract, RangesEndingAtTheTopOfTheAddressSpaceDoNotWrap) {
  constexpr std::uint64_t top_cache = 0 - std::uint64_t{k_cache_bytes};  // ends at exactly 2^64
  jc::WriterParams p = writer();
  p.cache = at<jc::u8>(top_cache);
  EXPECT_OK(validate(p, RecordFormat::b12x_432));
  p.status = at<jc::u32>(top_cache - 4);
  EXPECT_OK(validate(p, RecordFormat::b12x_432));
  p.status = at<jc::u32>(0 - std::uint64_t{4});
  expect_overlap(validate(p, RecordFormat::b12x_432), "cache", "status");
  p.status = at<jc::u32>(k_status);
  p.slot_mapping = at<const jc::i64>(0 - std::uint64_t{32});
  expect_overlap(validate(p, RecordFormat::b12x_432), "cache", "slot_mapping");
}

// ---- duplicate slots: the host executor -------------------------------------------------

struct HostBatch {
  explicit HostBatch(std::int64_t tokens, std::int64_t slots, int record = 432)
      : rows(static_cast<std::size_t>(tokens) * 576 * 2 / 16 + 1),
        cache(static_cast<std::size_t>(slots) * record / 16 + 1),
        cache_bytes(static_cast<std::size_t>(slots) * record) {
    std::mt19937_64 rng(7);
    auto* bits = reinterpret_cast<std::uint16_t*>(rows.data());
    for (std::size_t i = 0; i < static_cast<std::size_t>(tokens) * 576; ++i)
      bits[i] = static_cast<std::uint16_t>(0x3c00 + rng() % 0x200);  // ordinary finite bf16
    std::memset(cache.data(), 0xA5, cache_bytes);
  }
  jc::WriterParams params(const std::vector<std::int64_t>& slot_mapping, std::int64_t num_slots) {
    auto* bits = reinterpret_cast<const std::uint16_t*>(rows.data());
    return {bits, 576, bits + 512, 576, slot_mapping.data(), static_cast<std::int64_t>(slot_mapping.size()),
            reinterpret_cast<jc::u8*>(cache.data()), num_slots, nullptr};
  }
  bool cache_untouched() const {
    const auto* bytes = reinterpret_cast<const std::uint8_t*>(cache.data());
    for (std::size_t i = 0; i < cache_bytes; ++i)
      if (bytes[i] != 0xA5) return false;
    return true;
  }
  std::vector<jc::Vec16> rows;
  std::vector<jc::Vec16> cache;
  std::size_t cache_bytes;
};

std::string duplicate_message(std::int64_t slot, std::int64_t first, std::int64_t repeat) {
  return "kernel parameter 'slot_mapping': slot " + std::to_string(slot) + " appears at tokens " +
         std::to_string(first) + " and " + std::to_string(repeat) +
         "; one writer launch may write a slot at most once (negative slots, padding, may repeat)";
}

TEST(LaunchContract, TheHostWriterRefusesADuplicateSlotBeforeWritingAnything) {
  // 8 slots: the bitmap; 4096 slots for 6 in-range tokens (a set of 16 cells): the hash set.
  for (std::int64_t num_slots : {8, 4096}) {
    SCOPED_TRACE("num_slots " + std::to_string(num_slots));
    const std::vector<std::int64_t> slots = {3, -1, 5, -1, 7, 5, 3, 2};
    HostBatch batch(8, num_slots);
    for (LatentScale latent : {LatentScale::identity, LatentScale::dynamic}) {
      const auto result = host_run_writer(latent, RecordFormat::b12x_432, batch.params(slots, num_slots), 1.0f);
      ASSERT_FALSE(result);
      EXPECT_EQ(result.error().code, ErrorCode::invalid_argument);
      EXPECT_EQ(result.error().message, duplicate_message(5, 2, 5));
      EXPECT_TRUE(batch.cache_untouched());
    }
  }
}

TEST(LaunchContract, PaddingAndOutOfRangeSlotsMayRepeat) {
  const std::vector<std::int64_t> slots = {-1, 2, -1, 9, 9, 0, -7, -7, 1, 4};
  HostBatch batch(10, 4);
  const auto result = host_run_writer(LatentScale::identity, RecordFormat::b12x_432, batch.params(slots, 4), 1.0f);
  ASSERT_OK(result);
  EXPECT_EQ(*result, jc::k_status_slot_out_of_range);  // 9 and 4 are not slots of a 4-slot cache
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(batch.cache.data());
  for (int slot = 0; slot < 3; ++slot) {
    bool written = false;
    for (int i = 0; i < 432; ++i) written |= bytes[slot * 432 + i] != 0xA5;
    EXPECT_TRUE(written) << "slot " << slot;
  }
  for (int i = 3 * 432; i < 4 * 432; ++i) ASSERT_EQ(bytes[i], 0xA5) << "slot 3 was given no token";
}

// The first repeat in token order, and where its slot first appeared: the reference.
std::optional<std::pair<std::int64_t, std::int64_t>> first_repeat(const std::vector<std::int64_t>& slots,
                                                                  std::int64_t num_slots) {
  std::unordered_map<std::int64_t, std::int64_t> seen;
  for (std::int64_t t = 0; t < static_cast<std::int64_t>(slots.size()); ++t) {
    const std::int64_t s = slots[static_cast<std::size_t>(t)];
    if (s < 0 || s >= num_slots) continue;
    const auto [it, inserted] = seen.emplace(s, t);
    if (!inserted) return std::pair(it->second, t);
  }
  return std::nullopt;
}

TEST(LaunchContract, DuplicateDetectionAgreesWithAReferenceOnRandomMappings) {
  std::mt19937_64 rng(test_seed("LaunchContract.DuplicateDetectionAgreesWithAReferenceOnRandomMappings"));
  int bitmap_runs = 0, hash_runs = 0, refused = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const auto n = static_cast<std::int64_t>(rng() % 3000);
    // A small cache (the bitmap), a paged cache a few times the tokens (either), or up to
    // 2^40 slots (the hash set: a bitmap would be 128 GiB).
    std::int64_t num_slots = 0;
    switch (trial % 3) {
      case 0: num_slots = 1 + static_cast<std::int64_t>(rng() % 64); break;
      case 1: num_slots = 1 + static_cast<std::int64_t>(rng() % (200 * (n + 1))); break;
      default: num_slots = (std::int64_t{1} << 40) - static_cast<std::int64_t>(rng() % 1000); break;
    }
    // Distinct slots (a shuffled range spread over the cache), then padding, out-of-range
    // slots and, in half the trials, one planted repeat.
    // (Fewer slots than tokens: random slots, repeats all but certain.)
    std::vector<std::int64_t> slots(static_cast<std::size_t>(n));
    const std::int64_t step = num_slots / std::max<std::int64_t>(n, 1);
    for (std::int64_t t = 0; t < n; ++t)
      slots[static_cast<std::size_t>(t)] = step > 0 ? t * step : static_cast<std::int64_t>(rng() % num_slots);
    std::shuffle(slots.begin(), slots.end(), rng);
    for (auto& s : slots) {
      const auto r = rng() % 16;
      if (r == 0) s = -1 - static_cast<std::int64_t>(rng() % 3);
      if (r == 1) s = num_slots + static_cast<std::int64_t>(rng() % 3);
    }
    if (n >= 2 && trial % 2 == 0) {
      const auto from = rng() % static_cast<std::uint64_t>(n), to = rng() % static_cast<std::uint64_t>(n);
      slots[to] = slots[from];
    }
    jc::WriterParams p{};
    p.slot_mapping = slots.data();
    p.num_tokens = n;
    p.num_slots = num_slots;
    std::int64_t in_range = 0;
    for (auto s : slots) in_range += s >= 0 && s < num_slots;
    if (in_range >= 2) {
      const auto capacity = std::bit_ceil(2 * static_cast<std::uint64_t>(in_range));
      (static_cast<std::uint64_t>(num_slots) <= 64 * capacity ? bitmap_runs : hash_runs)++;
    }
    const Status got = check_distinct_slots(p);
    const auto want = first_repeat(slots, num_slots);
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + std::to_string(n) + " tokens, " +
                 std::to_string(num_slots) + " slots");
    if (!want) {
      EXPECT_OK(got);
      continue;
    }
    ++refused;
    ASSERT_FALSE(got);
    EXPECT_EQ(got.error().message,
              duplicate_message(slots[static_cast<std::size_t>(want->second)], want->first, want->second));
  }
  // Both structures and both outcomes were exercised.
  EXPECT_GT(bitmap_runs, 50);
  EXPECT_GT(hash_runs, 50);
  EXPECT_GT(refused, 50);
}

TEST(LaunchContract, DuplicateDetectionOfAMillionTokensIsLinear) {
  // 2^20 distinct slots spread over 2^40, then the same with the last token repeating the
  // first: a hash set of 2^21 cells (16 MiB), one pass.
  constexpr std::int64_t n = std::int64_t{1} << 20;
  std::vector<std::int64_t> slots(n);
  for (std::int64_t t = 0; t < n; ++t) slots[t] = (t * 1048573) % (std::int64_t{1} << 40);
  jc::WriterParams p{};
  p.slot_mapping = slots.data();
  p.num_tokens = n;
  p.num_slots = std::int64_t{1} << 40;
  EXPECT_OK(check_distinct_slots(p));
  slots[n - 1] = slots[0];
  const Status status = check_distinct_slots(p);
  ASSERT_FALSE(status);
  EXPECT_EQ(status.error().message, duplicate_message(0, 0, n - 1));
  // A dense paged cache: the bitmap (num_slots / 8 bytes).
  for (std::int64_t t = 0; t < n; ++t) slots[t] = n - 1 - t;
  p.num_slots = n;
  EXPECT_OK(check_distinct_slots(p));
}

// ---- through the C ABI ------------------------------------------------------------------

TEST(LaunchContract, TheCHostExecutorRefusesDuplicatesAndOverlaps) {
  const std::vector<std::int64_t> slots = {0, 2, 1, 2};
  HostBatch batch(4, 4);
  const jc::WriterParams p = batch.params(slots, 4);
  jitcache_writer_launch w{};
  w.kv_c = reinterpret_cast<std::uintptr_t>(p.kv_c);
  w.kv_c_stride = 576;
  w.k_pe = reinterpret_cast<std::uintptr_t>(p.k_pe);
  w.k_pe_stride = 576;
  w.slot_mapping = reinterpret_cast<std::uintptr_t>(p.slot_mapping);
  w.num_tokens = 4;
  w.cache = reinterpret_cast<std::uintptr_t>(p.cache);
  w.num_slots = 4;
  EXPECT_EQ(jitcache_host_write(1.0f, JITCACHE_ROPE_BF16, &w), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(jitcache_last_error()), "jitcache_host_write: " + duplicate_message(2, 1, 3));
  EXPECT_TRUE(batch.cache_untouched());

  // The cache over the tokens' last row.
  const std::vector<std::int64_t> distinct = {0, 3, 1, 2};
  w.slot_mapping = reinterpret_cast<std::uintptr_t>(distinct.data());
  EXPECT_EQ(jitcache_host_write(1.0f, JITCACHE_ROPE_BF16, &w), JITCACHE_OK) << jitcache_last_error();
  w.cache = w.kv_c + 3 * 1152;
  EXPECT_EQ(jitcache_host_write(1.0f, JITCACHE_ROPE_BF16, &w), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_CONTAINS(std::string(jitcache_last_error()),
                  "jitcache_host_write: kernel parameter 'cache': [" + hex(w.cache) +
                      ", +1728 bytes) overlaps 'kv_c' [" + hex(w.kv_c) + ", +4480 bytes)");

  // A gather writing over its own slots.
  std::vector<jc::Vec16> rows(4 * 1152 / 16);
  auto* slots32 = reinterpret_cast<std::int32_t*>(rows.data()) + 4 * 1152 / 4 - 4;  // out's last 16 bytes
  for (int i = 0; i < 4; ++i) slots32[i] = i;
  jitcache_gather_launch g{};
  g.cache = reinterpret_cast<std::uintptr_t>(p.cache);
  g.num_slots = 4;
  g.slots = reinterpret_cast<std::uintptr_t>(slots32);
  g.num_rows = 4;
  g.out = reinterpret_cast<std::uintptr_t>(rows.data());
  EXPECT_EQ(jitcache_host_gather(1.0f, JITCACHE_ROPE_BF16, &g), JITCACHE_ERROR_INVALID_ARGUMENT);
  EXPECT_CONTAINS(std::string(jitcache_last_error()), "kernel parameter 'out'");
  EXPECT_CONTAINS(std::string(jitcache_last_error()), "overlaps 'slots'");
}

}  // namespace
}  // namespace jitcache
