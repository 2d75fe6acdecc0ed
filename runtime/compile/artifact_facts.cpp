#include "runtime/compile/artifact_facts.hpp"

#include <elf.h>

#include <charconv>
#include <cstring>

#include "kernel_templates/generator.hpp"

namespace jitcache {
namespace {

Error bad_elf(const std::string& what) { return Error{ErrorCode::invalid_input, "cubin: " + what, {}}; }

template <class T>
Result<T> read_at(std::span<const std::uint8_t> image, std::uint64_t offset, const char* what) {
  if (offset > image.size() || image.size() - offset < sizeof(T))
    return std::unexpected(bad_elf(std::string(what) + " lies outside the image"));
  T value;
  std::memcpy(&value, image.data() + offset, sizeof(T));
  return value;
}

}  // namespace

Result<FactMap> parse_embedded_facts(std::string_view text) {
  FactMap facts;
  while (!text.empty()) {
    const auto end = text.find(';');
    if (end == std::string_view::npos)
      return make_error(ErrorCode::invalid_input, "embedded facts: missing ';' after '" + std::string(text) + "'");
    const std::string_view item = text.substr(0, end);
    const auto eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0)
      return make_error(ErrorCode::invalid_input, "embedded facts: '" + std::string(item) + "' is not name=value");
    if (!facts.emplace(std::string(item.substr(0, eq)), std::string(item.substr(eq + 1))).second)
      return make_error(ErrorCode::invalid_input,
                        "embedded facts: '" + std::string(item.substr(0, eq)) + "' appears twice");
    text.remove_prefix(end + 1);
  }
  return facts;
}

Result<FactMap> facts_from_cubin(std::span<const std::uint8_t> image) {
  const auto header = JC_TRY(read_at<Elf64_Ehdr>(image, 0, "ELF header"));
  if (std::memcmp(header.e_ident, ELFMAG, SELFMAG) != 0) return std::unexpected(bad_elf("not an ELF image"));
  if (header.e_ident[EI_CLASS] != ELFCLASS64) return std::unexpected(bad_elf("not a 64-bit ELF image"));
  if (header.e_shentsize != sizeof(Elf64_Shdr)) return std::unexpected(bad_elf("unexpected section header size"));
  auto section = [&](std::uint32_t index) -> Result<Elf64_Shdr> {
    if (index >= header.e_shnum) return std::unexpected(bad_elf("section index out of range"));
    return read_at<Elf64_Shdr>(image, header.e_shoff + std::uint64_t(index) * sizeof(Elf64_Shdr),
                               "section header");
  };
  for (std::uint32_t i = 0; i < header.e_shnum; ++i) {
    const Elf64_Shdr symtab = JC_TRY(section(i));
    if (symtab.sh_type != SHT_SYMTAB) continue;
    if (symtab.sh_entsize != sizeof(Elf64_Sym)) return std::unexpected(bad_elf("unexpected symbol size"));
    const Elf64_Shdr strtab = JC_TRY(section(symtab.sh_link));
    if (symtab.sh_offset > image.size() || symtab.sh_size > image.size() - symtab.sh_offset)
      return std::unexpected(bad_elf("symbol table lies outside the image"));
    for (std::uint64_t at = 0; at + sizeof(Elf64_Sym) <= symtab.sh_size; at += sizeof(Elf64_Sym)) {
      const auto sym = JC_TRY(read_at<Elf64_Sym>(image, symtab.sh_offset + at, "symbol"));
      if (sym.st_name >= strtab.sh_size) continue;
      const std::uint64_t name_at = strtab.sh_offset + sym.st_name;
      if (name_at >= image.size()) return std::unexpected(bad_elf("symbol name outside the image"));
      const std::string_view name(k_facts_symbol);
      if (image.size() - name_at < name.size() + 1 ||
          std::memcmp(image.data() + name_at, name.data(), name.size()) != 0 ||
          image[name_at + name.size()] != 0)
        continue;
      const Elf64_Shdr data = JC_TRY(section(sym.st_shndx));
      if (data.sh_type == SHT_NOBITS) return std::unexpected(bad_elf("facts symbol has no initializer"));
      if (sym.st_value > data.sh_size || sym.st_size > data.sh_size - sym.st_value ||
          data.sh_offset > image.size() || data.sh_size > image.size() - data.sh_offset)
        return std::unexpected(bad_elf("facts symbol lies outside its section"));
      const auto* bytes = reinterpret_cast<const char*>(image.data() + data.sh_offset + sym.st_value);
      std::string_view text(bytes, sym.st_size);
      if (!text.empty() && text.back() == '\0') text.remove_suffix(1);
      return parse_embedded_facts(text);
    }
  }
  return make_error(ErrorCode::not_found, std::string("cubin has no ") + k_facts_symbol + " symbol");
}

Result<FactMap> facts_from_ptx(std::string_view ptx) {
  const std::string marker = std::string(" ") + k_facts_symbol + "[";
  const auto at = ptx.find(marker);
  if (at == std::string_view::npos)
    return make_error(ErrorCode::not_found, std::string("PTX has no ") + k_facts_symbol + " variable");
  const auto open = ptx.find('{', at);
  const auto close = ptx.find('}', at);
  if (open == std::string_view::npos || close == std::string_view::npos || close < open)
    return make_error(ErrorCode::invalid_input, std::string("PTX: ") + k_facts_symbol + " has no initializer");
  std::string text;
  std::string_view list = ptx.substr(open + 1, close - open - 1);
  while (!list.empty()) {
    while (!list.empty() && (list.front() == ' ' || list.front() == ',' || list.front() == '\n')) list.remove_prefix(1);
    if (list.empty()) break;
    unsigned value = 0;
    const auto [end, ec] = std::from_chars(list.data(), list.data() + list.size(), value);
    if (ec != std::errc() || value > 255)
      return make_error(ErrorCode::invalid_input, std::string("PTX: malformed initializer of ") + k_facts_symbol);
    if (value != 0) text += static_cast<char>(value);
    list.remove_prefix(static_cast<std::size_t>(end - list.data()));
  }
  return parse_embedded_facts(text);
}

}  // namespace jitcache
