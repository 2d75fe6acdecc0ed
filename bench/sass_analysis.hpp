// Static analysis of a kernel's SASS, as nvdisasm prints it (`nvdisasm -c`, optionally
// `-g` for source lines): instructions, basic blocks, and the instructions one warp issues
// for an ordinary token.
//
// The ordinary path. A kernel's code holds the work every token does plus rare paths:
// launch errors and out-of-range slots reported through an atomic on the status word,
// early exits, a zero row for a padding slot, NaN handling, the slow path of a correctly
// rounded division. The path one warp takes for an ordinary token (finite inputs, no
// error, slot in range, all 32 lanes active) is found without knowing the source text:
// every conditional branch is classified by what its two sides do (classify_branch),
// the side that only a rare input takes is cut, and what stays reachable from the entry
// is the path. A branch whose sides depend on the lane (the RoPE lanes, lane 0's padding
// store) keeps both sides: a warp issues the instructions of every side some active lane
// takes. Each instruction on the path is counted once (the kernels have no loops; a loop
// on the path is reported, not unrolled). The rules read only the SASS, so they need no
// markers in nvfp4_mla.cuh and keep working while it changes; `kernel_report --explain`
// prints every branch's verdict and every instruction left off, for a check by hand.
//
// Limits, each worth at most the own code of one branch side: a rare side the rules do not
// recognise is counted (today only the E4M3 NaN-code test, whose rare side has no code of
// its own); a lane-dependent branch whose one side only exits would lose that EXIT (the
// compiler predicates those exits today).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "jitcache/error.hpp"

namespace jitcache::sass {

struct Instruction {
  std::uint32_t address = 0;
  std::string guard;                  // "P0", "!P0", "UP1"... (no '@'); empty when unguarded
  std::string opcode;                 // "LDG.E.128", "ISETP.GT.U32.AND", ...
  std::vector<std::string> operands;  // as printed, split at top-level commas
  std::string target;                 // the label or function in `(...)`, if any
  int line = 0;                       // source line (nvdisasm -g); 0 when unknown
  std::string file;                   // source file name (no directory) for `line`

  // The opcode up to its first modifier: "LDG" for "LDG.E.128".
  std::string family() const;
  bool has_modifier(std::string_view modifier) const;
  // Operands and target as one string, for comparing two listings.
  std::string text() const;
};

struct Function {
  std::string name;
  std::vector<Instruction> instructions;
  std::map<std::string, std::size_t> labels;  // local label -> index of the instruction it names
};

struct Listing {
  std::vector<Function> functions;  // in the order printed; kernels and their subroutines
  const Function* find(std::string_view name) const;
};

// Parses nvdisasm's text output (`-c`, with or without `-g`). A listing without any
// function, or an instruction line that cannot be read, is an error naming the line.
Result<Listing> parse_listing(std::string_view text);

// What kind of memory instruction this is, and how wide: "LDG.128", "STG.U8", "ATOM.32".
// Empty for instructions that do not access memory through an address (LDC included:
// constant bank reads are not memory traffic of the kernel).
std::string memory_access_key(const Instruction& instruction);
bool is_global_or_generic_store(const Instruction& instruction);  // STG, ST
bool is_atomic(const Instruction& instruction);                   // ATOM*, RED*, not REDUX
bool is_control(const Instruction& instruction);                  // BRA, BSSY, BSYNC, EXIT, CALL, RET, ...

// Why one side of a conditional branch is left off the ordinary path.
enum class Cold {
  none,           // both sides stay (lane-dependent, or nothing says one side is rare)
  slow_division,  // the guard is FCHK's "fast division may be inexact" result
  status_report,  // the side reports through an atomic (the status word) and stores nothing
  nan_input,      // the guard tests for NaN (an unsigned compare with the fp32 infinity bits, FSETP.NAN/NUM)
  early_exit,     // the side leaves the kernel without a store while the other side stores
  zero_fill,      // the side only stores zeros and leaves, while the other side stores computed data
  diverged_warp,  // BRA.DIV's target: the fallback for a warp not converged at a warp-wide operation
                  // (a full-mask shuffle); an ordinary token's warp is converged there
};
const char* to_string(Cold cold);

struct BranchVerdict {
  std::size_t instruction = 0;  // index of the branch in its function
  Cold cold = Cold::none;
  bool taken_is_cold = false;    // which side is cut (meaningful when cold != none)
  std::string predicate_source;  // the instruction that set the guard, for reports
  // Instructions only the taken / only the fall-through side reaches (its own code).
  int taken_region_instructions = 0, fall_region_instructions = 0;
};

struct BasicBlock {
  std::size_t begin = 0, end = 0;       // instruction indices [begin, end)
  std::vector<std::size_t> successors;  // block indices
};

struct MemoryTally {
  std::map<std::string, int> by_kind;  // memory_access_key -> count
  int global_loads = 0, global_stores = 0, atomics = 0, total = 0;
};

struct FunctionAnalysis {
  std::string name;
  std::vector<BasicBlock> blocks;
  std::vector<BranchVerdict> branches;  // every conditional branch
  std::vector<bool> on_path;            // per block
  int total_instructions = 0;           // the kernel and its subroutines, without NOP padding
  int entry_instructions = 0;           // the kernel's own function only
  int path_instructions = 0;            // this function's own path, callees included
  int path_control_instructions = 0;
  bool path_has_loop = false;
  MemoryTally memory_total;         // every memory instruction in the function
  MemoryTally memory_path;          // those on the path (callees included)
  std::vector<std::string> called;  // functions called from the path
};

// Analyses `entry` and, for calls on its path, the functions it calls. An unknown entry,
// a branch to an unknown label or an indirect branch is an error.
Result<FunctionAnalysis> analyse(const Listing& listing, std::string_view entry);

// Source lines of the path's instructions, most frequent first: (file:line, count).
std::vector<std::pair<std::string, int>> path_lines(const Listing& listing, const FunctionAnalysis& analysis);

// True when two listings hold the same instructions (opcodes, guards, operands) in the
// same functions; line annotations are ignored. On false, `difference` says where.
bool same_code(const Listing& a, const Listing& b, std::string* difference = nullptr);

}  // namespace jitcache::sass
