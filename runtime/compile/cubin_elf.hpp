// What a cubin's ELF says about itself, read without a GPU: its SM and the functions in
// its symbol table. libNVVM and nvJitLink know nothing of entries (and LTO silently drops
// a kernel that is not in @llvm.used), so a linked cubin's entry is checked here. Every
// offset is bounds-checked: truncated, garbage or hostile bytes give an error, never a
// crash.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "jitcache/error.hpp"

namespace jitcache {

struct CubinInfo {
  std::uint32_t flags = 0;         // e_flags
  int abi_version = 0;             // e_ident[EI_ABIVERSION]
  int sm = 0;                      // 90 for sm_90 and sm_90a: the "a" is not in every cubin's flags
  std::vector<std::string> functions;  // STT_FUNC names of .symtab, in table order
};

// ErrorCode::invalid_input ("cubin: ...") for anything that is not a well-formed 64-bit
// little-endian EM_CUDA ELF image.
Result<CubinInfo> read_cubin_info(std::span<const std::uint8_t> image);

// The SM number a target names: "sm_100a" -> 100. 0 when it names none.
int target_sm(const std::string& target);

// Status: `entry` is a function of `info`; else ErrorCode::compile listing the functions
// that are there, naming `what` (e.g. "nvJitLink's cubin for sm_90").
Status check_entry(const CubinInfo& info, const std::string& entry, const std::string& what);

}  // namespace jitcache
