#include "runtime/compile/cubin_elf.hpp"

#include <elf.h>

#include <charconv>
#include <cstring>

namespace jitcache {
namespace {

constexpr std::uint16_t k_em_cuda = 190;
// CUDA 12.8 moved the SM from e_flags' low byte to its second byte, and marked the new
// layout with ELF ABI version 8.
constexpr int k_abi_sm_in_second_byte = 8;

std::unexpected<Error> bad_elf(const std::string& what) {
  return make_error(ErrorCode::invalid_input, "cubin: " + what);
}

template <class T>
Result<T> read_at(std::span<const std::uint8_t> image, std::uint64_t offset, const char* what) {
  if (offset > image.size() || image.size() - offset < sizeof(T))
    return bad_elf(std::string(what) + " lies outside the image");
  T value;
  std::memcpy(&value, image.data() + offset, sizeof(T));
  return value;
}

}  // namespace

Result<CubinInfo> read_cubin_info(std::span<const std::uint8_t> image) {
  const auto header = JC_TRY(read_at<Elf64_Ehdr>(image, 0, "ELF header"));
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) return bad_elf("not an ELF image");
  if (header.e_ident[EI_CLASS] != ELFCLASS64) return bad_elf("not a 64-bit ELF image");
  if (header.e_ident[EI_DATA] != ELFDATA2LSB) return bad_elf("not a little-endian ELF image");
  if (header.e_machine != k_em_cuda)
    return bad_elf("machine " + std::to_string(header.e_machine) + " is not EM_CUDA (190)");
  if (header.e_shentsize != sizeof(Elf64_Shdr)) return bad_elf("unexpected section header size");

  CubinInfo info;
  info.flags = header.e_flags;
  info.abi_version = header.e_ident[EI_ABIVERSION];
  info.sm = static_cast<int>(info.abi_version >= k_abi_sm_in_second_byte ? (info.flags >> 8) & 0xff
                                                                          : info.flags & 0xff);

  auto section = [&](std::uint32_t index) -> Result<Elf64_Shdr> {
    if (index >= header.e_shnum) return bad_elf("section index " + std::to_string(index) + " out of range");
    return read_at<Elf64_Shdr>(image, header.e_shoff + std::uint64_t(index) * sizeof(Elf64_Shdr), "section header");
  };
  auto within = [&](const Elf64_Shdr& s) {
    return s.sh_offset <= image.size() && s.sh_size <= image.size() - s.sh_offset;
  };
  for (std::uint32_t i = 0; i < header.e_shnum; ++i) {
    const Elf64_Shdr symtab = JC_TRY(section(i));
    if (symtab.sh_type != SHT_SYMTAB) continue;
    if (symtab.sh_entsize != sizeof(Elf64_Sym)) return bad_elf("unexpected symbol size");
    if (!within(symtab)) return bad_elf("symbol table lies outside the image");
    const Elf64_Shdr strtab = JC_TRY(section(symtab.sh_link));
    if (strtab.sh_type != SHT_STRTAB || !within(strtab)) return bad_elf("string table lies outside the image");
    const auto* names = reinterpret_cast<const char*>(image.data() + strtab.sh_offset);
    for (std::uint64_t at = 0; at + sizeof(Elf64_Sym) <= symtab.sh_size; at += sizeof(Elf64_Sym)) {
      const auto sym = JC_TRY(read_at<Elf64_Sym>(image, symtab.sh_offset + at, "symbol"));
      if (ELF64_ST_TYPE(sym.st_info) != STT_FUNC) continue;
      if (sym.st_name >= strtab.sh_size) return bad_elf("symbol name lies outside the string table");
      // The name must end inside the string table: no read runs past it.
      const void* end = std::memchr(names + sym.st_name, '\0', strtab.sh_size - sym.st_name);
      if (end == nullptr) return bad_elf("symbol name is not terminated inside the string table");
      info.functions.emplace_back(names + sym.st_name, static_cast<const char*>(end));
    }
  }
  return info;
}

int target_sm(const std::string& target) {
  if (target.rfind("sm_", 0) != 0) return 0;
  int sm = 0;
  const char* first = target.data() + 3;
  const auto [end, ec] = std::from_chars(first, target.data() + target.size(), sm);
  return ec == std::errc() && end != first ? sm : 0;
}

Status check_entry(const CubinInfo& info, const std::string& entry, const std::string& what) {
  for (const std::string& f : info.functions)
    if (f == entry) return {};
  std::string listed;
  for (const std::string& f : info.functions) listed += (listed.empty() ? "" : ", ") + f;
  return make_error(ErrorCode::compile, "entry '" + entry + "' is not a function of " + what + " (functions: " +
                                            (listed.empty() ? "none" : listed) + ")");
}

}  // namespace jitcache
