// The SASS reader and the ordinary-path analysis of the kernel report, on a small listing
// in nvdisasm's format (tests/bench/data/sample_kernel.sass) whose every block was counted
// by hand: a status report, a predicated exit, a zero fill, a correctly rounded division
// with its slow-path call, a NaN test whose NaN side has code of its own, a branch with
// two conditions, the RoPE lanes' predicated exits, and a subroutine.
#include "bench/sass_analysis.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "test_support.hpp"

namespace jitcache::sass {
namespace {

std::string sample_text() {
  const auto path = testing::source_dir() / "tests" / "bench" / "data" / "sample_kernel.sass";
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_FALSE(text.str().empty()) << "cannot read " << path;
  return text.str();
}

Listing sample() {
  auto listing = parse_listing(sample_text());
  EXPECT_TRUE(listing.has_value()) << listing.error().to_string();
  return listing.value_or(Listing{});
}

const BranchVerdict* verdict_at(const FunctionAnalysis& a, const Function& fn, std::uint32_t address) {
  for (const auto& b : a.branches)
    if (fn.instructions[b.instruction].address == address) return &b;
  return nullptr;
}

TEST(SassListing, ReadsFunctionsLabelsAndInstructions) {
  const Listing listing = sample();
  ASSERT_EQ(listing.functions.size(), 2u);
  const Function& kernel = listing.functions[0];
  EXPECT_EQ(kernel.name, "sample_kernel");
  // 57 instructions, the self-branch and two NOPs of padding.
  EXPECT_EQ(kernel.instructions.size(), 60u);
  EXPECT_EQ(listing.functions[1].name, "$__internal_0_$__cuda_sm3x_div_rn_noftz_f32_slowpath");
  EXPECT_EQ(listing.functions[1].instructions.size(), 4u);
  ASSERT_EQ(kernel.labels.count(".L_x_0"), 1u);
  EXPECT_EQ(kernel.instructions[kernel.labels.at(".L_x_0")].address, 0x2f0u);
  EXPECT_EQ(kernel.labels.at(".L_x_12"), 60u);  // a label after the last instruction

  const Instruction& branch = kernel.instructions[5];
  EXPECT_EQ(branch.address, 0x50u);
  EXPECT_EQ(branch.guard, "P0");
  EXPECT_EQ(branch.opcode, "BRA");
  EXPECT_TRUE(branch.operands.empty());
  EXPECT_EQ(branch.target, ".L_x_0");
  EXPECT_EQ(branch.line, 527);
  EXPECT_EQ(branch.file, "nvfp4_mla.cuh");

  const Instruction& two_conditions = kernel.instructions[0x200 / 0x10];
  EXPECT_EQ(two_conditions.guard, "!P0");
  EXPECT_EQ(two_conditions.operands, std::vector<std::string>{"P1"});
  EXPECT_EQ(two_conditions.target, ".L_x_7");

  const Instruction& store = kernel.instructions[0x230 / 0x10];
  EXPECT_EQ(store.family(), "STG");
  EXPECT_TRUE(store.has_modifier("U8"));
  EXPECT_FALSE(store.has_modifier("E.U8"));
  EXPECT_EQ(store.operands, (std::vector<std::string>{"desc[UR6][R16.64+0x100]", "R13"}));

  const Instruction& bssy = kernel.instructions[0xe0 / 0x10];
  EXPECT_EQ(bssy.operands, std::vector<std::string>{"B0"});
  EXPECT_EQ(bssy.target, ".L_x_2");
  EXPECT_EQ(kernel.instructions[0].line, 373);
  EXPECT_EQ(listing.functions[1].instructions[2].target, "sample_kernel");
}

TEST(SassListing, MemoryAccessKeysByWidth) {
  const auto key = [](const char* opcode) {
    Instruction ins;
    ins.opcode = opcode;
    return memory_access_key(ins);
  };
  const std::pair<const char*, const char*> cases[] = {
      {"LDG.E.128", "LDG.128"},
      {"LDG.E.64.CONSTANT", "LDG.64"},
      {"LDG.E", "LDG.32"},
      {"LDG.E.U8", "LDG.U8"},
      {"STG.E.S16", "STG.S16"},
      {"ST.E.64", "ST.64"},
      {"STL.128", "STL.128"},
      {"REDG.E.OR.STRONG.GPU", "REDG.32"},
      {"LDC.64", ""},  // constant bank: not memory traffic
      {"REDUX.OR", ""},
      {"IMAD.WIDE.U32", ""},
  };
  for (const auto& [opcode, expected] : cases) EXPECT_EQ(key(opcode), expected) << opcode;

  Instruction redux;
  redux.opcode = "REDUX.OR";
  EXPECT_FALSE(is_atomic(redux));
  Instruction red;
  red.opcode = "REDG.E.OR.STRONG.GPU";
  EXPECT_TRUE(is_atomic(red));
  Instruction bsync;
  bsync.opcode = "BSYNC";
  EXPECT_TRUE(is_control(bsync));
  Instruction fsel;
  fsel.opcode = "FSEL";
  EXPECT_FALSE(is_control(fsel));
}

TEST(SassPath, SampleKernelCountedByHand) {
  const Listing listing = sample();
  auto analysis = analyse(listing, "sample_kernel");
  ASSERT_OK(analysis);
  const auto& a = *analysis;
  // 57 in the kernel (padding left out) and 3 in the subroutine.
  EXPECT_EQ(a.total_instructions, 60);
  EXPECT_EQ(a.entry_instructions, 57);
  // Off the path: the slow-division call (2), the NaN side (1), the zero fill (3) and the
  // status report (4 + 6); the subroutine is only called from the slow path.
  EXPECT_EQ(a.path_instructions, 41);
  EXPECT_EQ(a.path_control_instructions, 14);
  EXPECT_FALSE(a.path_has_loop);
  EXPECT_TRUE(a.called.empty());

  EXPECT_EQ(a.memory_path.global_loads, 2);
  EXPECT_EQ(a.memory_path.global_stores, 4);
  EXPECT_EQ(a.memory_path.atomics, 0);
  EXPECT_EQ(a.memory_path.by_kind,
            (std::map<std::string, int>{
                {"LDG.128", 1}, {"LDG.64", 1}, {"STG.128", 2}, {"STG.64", 1}, {"STG.U8", 1}}));
  EXPECT_EQ(a.memory_total.total, 9);
  EXPECT_EQ(a.memory_total.by_kind.at("STG.128"), 4);
  EXPECT_EQ(a.memory_total.atomics, 1);
}

TEST(SassPath, EachBranchClassifiedByWhatItsSidesDo) {
  const Listing listing = sample();
  auto analysis = analyse(listing, "sample_kernel");
  ASSERT_OK(analysis);
  const Function& fn = listing.functions[0];
  ASSERT_EQ(analysis->branches.size(), 5u);

  const auto* report = verdict_at(*analysis, fn, 0x50);
  ASSERT_NE(report, nullptr);
  EXPECT_EQ(report->cold, Cold::status_report);
  EXPECT_TRUE(report->taken_is_cold);
  EXPECT_EQ(report->taken_region_instructions, 10);
  EXPECT_EQ(report->predicate_source, "FSETP.NEU.AND P0, PT, R0, 1, PT");

  const auto* zero = verdict_at(*analysis, fn, 0xb0);
  ASSERT_NE(zero, nullptr);
  EXPECT_EQ(zero->cold, Cold::zero_fill);
  EXPECT_TRUE(zero->taken_is_cold);
  EXPECT_EQ(zero->taken_region_instructions, 3);

  // @!P0 BRA skips the slow path: FCHK's "true" is the fall-through.
  const auto* division = verdict_at(*analysis, fn, 0x110);
  ASSERT_NE(division, nullptr);
  EXPECT_EQ(division->cold, Cold::slow_division);
  EXPECT_FALSE(division->taken_is_cold);
  EXPECT_EQ(division->predicate_source, "FCHK P0, R8, R0");
  EXPECT_EQ(division->taken_region_instructions, 0);
  EXPECT_EQ(division->fall_region_instructions, 2);

  // The guard's definition is found past an instruction that sets another predicate.
  const auto* nan = verdict_at(*analysis, fn, 0x190);
  ASSERT_NE(nan, nullptr);
  EXPECT_EQ(nan->cold, Cold::nan_input);
  EXPECT_TRUE(nan->taken_is_cold);
  EXPECT_EQ(nan->predicate_source, "ISETP.GT.U32.AND P1, PT, R10, 0x7f800000, PT");
  EXPECT_EQ(nan->taken_region_instructions, 1);

  const auto* both = verdict_at(*analysis, fn, 0x200);
  ASSERT_NE(both, nullptr);
  EXPECT_EQ(both->cold, Cold::none);
  EXPECT_EQ(both->taken_region_instructions, 0);
  EXPECT_EQ(both->fall_region_instructions, 1);
}

TEST(SassPath, SourceLinesOfThePath) {
  const Listing listing = sample();
  auto analysis = analyse(listing, "sample_kernel");
  ASSERT_OK(analysis);
  const auto lines = path_lines(listing, *analysis);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], (std::pair<std::string, int>{"nvfp4_mla.cuh:440", 32}));
  EXPECT_EQ(lines[1], (std::pair<std::string, int>{"nvfp4_mla.cuh:373", 5}));
  EXPECT_EQ(lines[2], (std::pair<std::string, int>{"nvfp4_mla.cuh:527", 4}));
}

// The same kernel without line annotations and with the labels numbered differently (as
// a listing of a cubin built without -lineinfo may be) is the same code; a changed operand
// is not.
TEST(SassListing, SameCodeIgnoresLinesAndLabelNames) {
  std::string text = sample_text();
  std::string plain;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.find("//## File") != std::string::npos) continue;
    for (std::size_t at; (at = line.find(".L_x_")) != std::string::npos;) line.replace(at, 5, ".L_y_");
    plain += line + "\n";
  }
  auto a = parse_listing(text);
  auto b = parse_listing(plain);
  ASSERT_OK(a);
  ASSERT_OK(b);
  EXPECT_EQ(b->functions[0].instructions[5].line, 0);
  std::string difference;
  EXPECT_TRUE(same_code(*a, *b, &difference)) << difference;

  std::string changed = plain;
  changed.replace(changed.find("FFMA R6, R5, -R0, 1"), 19, "FFMA R6, R5, -R0, 2");
  auto c = parse_listing(changed);
  ASSERT_OK(c);
  EXPECT_FALSE(same_code(*a, *c, &difference));
  EXPECT_NE(difference.find("instruction 16"), std::string::npos) << difference;

  std::string retargeted = plain;
  retargeted.replace(retargeted.find("@P1 BRA `(.L_y_5)"), 17, "@P1 BRA `(.L_y_6)");
  auto d = parse_listing(retargeted);
  ASSERT_OK(d);
  EXPECT_FALSE(same_code(*a, *d, &difference));
}

constexpr const char* k_header = "        .type           k,@function\nk:\n";

// One function in nvdisasm's layout: its header, then `lines`, an instruction at each
// next address 0x10 apart from `first_address` (a guard right-aligned before the opcode
// column, as nvdisasm writes it), and a line ending in ':' a label.
std::string sass_function(std::string_view name, std::initializer_list<std::string_view> lines,
                          std::uint32_t first_address = 0) {
  std::string text = "        .type           " + std::string(name) + ",@function\n" + std::string(name) + ":\n";
  std::uint32_t address = first_address;
  for (std::string_view line : lines) {
    if (line.ends_with(':')) {
      text += std::string(line) + "\n";
      continue;
    }
    std::string_view guard;
    if (line.starts_with('@')) {
      guard = line.substr(0, line.find(' ') + 1);
      line.remove_prefix(guard.size());
    }
    char at[16];
    std::snprintf(at, sizeof at, "/*%04x*/", address);
    text += "        " + std::string(at) + std::string(19 - guard.size(), ' ') + std::string(guard) +
            std::string(line) + " ;\n";
    address += 0x10;
  }
  return text;
}

// Reads `text` and analyses its function `entry`; an error of either step is the result.
Result<FunctionAnalysis> analyse_text(const std::string& text, std::string_view entry = "k") {
  const Listing listing = JC_TRY(parse_listing(text));
  return analyse(listing, entry);
}

TEST(SassPath, CallOnThePathCountsTheCallee) {
  const std::string text = sass_function("k", {"MOV R4, 0x20", "CALL.REL.NOINC `(helper)", "EXIT"}) +
                           sass_function("helper", {"FADD R0, R0, 1", "RET.REL.NODEC R4 `(k)"}, 0x30);
  auto a = analyse_text(text);
  ASSERT_OK(a);
  EXPECT_EQ(a->path_instructions, 5);
  EXPECT_EQ(a->total_instructions, 5);
  EXPECT_EQ(a->path_control_instructions, 3);
  EXPECT_EQ(a->called, std::vector<std::string>{"helper"});
}

TEST(SassPath, LoopOnThePathIsReported) {
  auto a = analyse_text(sass_function("k", {
                                               "MOV R0, RZ",
                                               ".L_x_0:",
                                               "IADD3 R0, R0, 0x1, RZ",
                                               "ISETP.NE.AND P0, PT, R0, 0x10, PT",
                                               "@P0 BRA `(.L_x_0)",
                                               "EXIT",
                                           }));
  ASSERT_OK(a);
  EXPECT_TRUE(a->path_has_loop);
  EXPECT_EQ(a->path_instructions, 5);
}

TEST(SassListing, RejectsWhatItCannotRead) {
  auto none = parse_listing("\t.target\tsm_90\n\t.elftype\t@\"ET_EXEC\"\n");
  ASSERT_FALSE(none.has_value());
  EXPECT_NE(none.error().message.find("no function"), std::string::npos);

  auto outside = parse_listing("        /*0000*/                   EXIT ;\n");
  ASSERT_FALSE(outside.has_value());
  EXPECT_NE(outside.error().message.find("line 1"), std::string::npos);

  auto bad_opcode = parse_listing(std::string(k_header) + "        /*0000*/                   @P0 ;\n");
  ASSERT_FALSE(bad_opcode.has_value());
  EXPECT_NE(bad_opcode.error().message.find("line 3"), std::string::npos) << bad_opcode.error().message;
}

TEST(SassPath, RejectsWhatItCannotFollow) {
  auto unknown_label = parse_listing(sass_function("k", {"@P0 BRA `(.L_x_7)", "EXIT"}));
  ASSERT_OK(unknown_label);
  auto a = analyse(*unknown_label, "k");
  ASSERT_FALSE(a.has_value());
  EXPECT_NE(a.error().message.find(".L_x_7"), std::string::npos);

  auto b = analyse_text(sass_function("k", {"BRX R2 -0x10"}));
  ASSERT_FALSE(b.has_value());
  EXPECT_NE(b.error().message.find("indirect"), std::string::npos);

  auto unknown_callee = parse_listing(sass_function("k", {"CALL.REL `(nowhere)", "EXIT"}));
  ASSERT_OK(unknown_callee);
  auto c = analyse(*unknown_callee, "k");
  ASSERT_FALSE(c.has_value());
  EXPECT_NE(c.error().message.find("nowhere"), std::string::npos);

  auto d = analyse(*unknown_callee, "not_there");
  ASSERT_FALSE(d.has_value());
  EXPECT_EQ(d.error().code, ErrorCode::not_found);
}

// A NaN test chained with another predicate is not a pure NaN test: both sides stay.
TEST(SassPath, ChainedNanTestKeepsBothSides) {
  auto a = analyse_text(sass_function("k", {
                                               "ISETP.GT.U32.AND P1, PT, R10, 0x7f800000, P2",
                                               "@P1 BRA `(.L_x_0)",
                                               "FADD R0, R0, 1",
                                               ".L_x_0:",
                                               "STG.E desc[UR4][R2.64], R0",
                                               "EXIT",
                                           }));
  ASSERT_OK(a);
  ASSERT_EQ(a->branches.size(), 1u);
  EXPECT_EQ(a->branches[0].cold, Cold::none);
  EXPECT_EQ(a->path_instructions, 5);
}

// The compiler's fallback for a warp that is not converged at a full-mask shuffle is not
// what an ordinary token's warp runs.
TEST(SassPath, DivergedWarpFallbackIsCut) {
  auto a = analyse_text(sass_function("k", {
                                               "BRA.DIV UR4, `(.L_x_1)",
                                               "SHFL.BFLY PT, R1, R0, 0x1, 0x1f",
                                               ".L_x_0:",
                                               "STG.E desc[UR4][R2.64], R1",
                                               "EXIT",
                                               ".L_x_1:",
                                               "WARPSYNC.ALL",
                                               "SHFL.BFLY PT, R1, R0, 0x1, 0x1f",
                                               "BRA `(.L_x_0)",
                                           }));
  ASSERT_OK(a);
  ASSERT_EQ(a->branches.size(), 1u);
  EXPECT_EQ(a->branches[0].cold, Cold::diverged_warp);
  EXPECT_TRUE(a->branches[0].taken_is_cold);
  EXPECT_EQ(a->path_instructions, 4);
  EXPECT_EQ(a->total_instructions, 7);
}

// A predicate written as a second result (a carry) replaces FCHK's verdict: the branch is
// no longer the slow-division test.
TEST(SassPath, PredicateRedefinedByACarry) {
  auto a = analyse_text(sass_function("k", {
                                               "FCHK P0, R8, R0",
                                               "IADD3 R8, P0, R8, R12, RZ",
                                               "@!P0 BRA `(.L_x_0)",
                                               "FADD R0, R0, 1",
                                               ".L_x_0:",
                                               "EXIT",
                                           }));
  ASSERT_OK(a);
  ASSERT_EQ(a->branches.size(), 1u);
  EXPECT_EQ(a->branches[0].predicate_source, "IADD3 R8, P0, R8, R12, RZ");
  EXPECT_EQ(a->branches[0].cold, Cold::none);
  EXPECT_EQ(a->path_instructions, 5);
}

}  // namespace
}  // namespace jitcache::sass
