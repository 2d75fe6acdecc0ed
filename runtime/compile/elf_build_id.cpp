#include "runtime/compile/elf_build_id.hpp"

#include <elf.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <vector>

#include "support/unique_fd.hpp"

namespace jitcache {
namespace {

// A note segment larger than this is not one a linker wrote for a shared library.
constexpr std::size_t k_max_note_bytes = 64 * 1024;
constexpr std::size_t k_max_program_headers = 256;

bool read_at(int fd, void* into, std::size_t size, off_t offset) {
  auto* bytes = static_cast<char*>(into);
  while (size > 0) {
    const ssize_t n = ::pread(fd, bytes, size, offset);
    if (n <= 0) return false;
    bytes += n;
    size -= static_cast<std::size_t>(n);
    offset += n;
  }
  return true;
}

std::string hex(const unsigned char* bytes, std::size_t size) {
  static constexpr char k_digits[] = "0123456789abcdef";
  std::string text;
  for (std::size_t i = 0; i < size; ++i) {
    text += k_digits[bytes[i] >> 4];
    text += k_digits[bytes[i] & 0xf];
  }
  return text;
}

std::size_t align4(std::size_t n) { return (n + 3) & ~std::size_t{3}; }

// The build-id in one note segment's bytes.
std::optional<std::string> find_in_notes(const std::vector<unsigned char>& notes) {
  std::size_t at = 0;
  while (at + sizeof(Elf64_Nhdr) <= notes.size()) {
    Elf64_Nhdr header;
    std::memcpy(&header, notes.data() + at, sizeof header);
    const std::size_t name_at = at + sizeof header;
    const std::size_t desc_at = name_at + align4(header.n_namesz);
    const std::size_t end = desc_at + align4(header.n_descsz);
    if (header.n_namesz > notes.size() || header.n_descsz > notes.size() || end > notes.size()) return std::nullopt;
    if (header.n_type == NT_GNU_BUILD_ID && header.n_namesz == 4 && std::memcmp(notes.data() + name_at, "GNU", 4) == 0 &&
        header.n_descsz > 0)
      return hex(notes.data() + desc_at, header.n_descsz);
    at = end;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> read_build_id(const std::filesystem::path& file) {
  const UniqueFd owned(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!owned) return std::nullopt;
  const int fd = owned.get();
  Elf64_Ehdr ehdr;
  if (!read_at(fd, &ehdr, sizeof ehdr, 0)) return std::nullopt;
  if (std::memcmp(ehdr.e_ident, ELFMAG, SELFMAG) != 0 || ehdr.e_ident[EI_CLASS] != ELFCLASS64 ||
      ehdr.e_ident[EI_DATA] != ELFDATA2LSB || ehdr.e_phentsize != sizeof(Elf64_Phdr) ||
      ehdr.e_phnum > k_max_program_headers)
    return std::nullopt;
  std::vector<Elf64_Phdr> phdrs(ehdr.e_phnum);
  if (!phdrs.empty() && !read_at(fd, phdrs.data(), phdrs.size() * sizeof(Elf64_Phdr), static_cast<off_t>(ehdr.e_phoff)))
    return std::nullopt;
  for (const Elf64_Phdr& phdr : phdrs) {
    if (phdr.p_type != PT_NOTE || phdr.p_filesz == 0 || phdr.p_filesz > k_max_note_bytes) continue;
    std::vector<unsigned char> notes(phdr.p_filesz);
    if (!read_at(fd, notes.data(), notes.size(), static_cast<off_t>(phdr.p_offset))) continue;
    if (auto id = find_in_notes(notes)) return id;
  }
  return std::nullopt;
}

namespace {

// The ELF machine of the libraries this build can load.
constexpr Elf64_Half k_host_machine =
#if defined(__x86_64__)
    EM_X86_64;
#elif defined(__aarch64__)
    EM_AARCH64;
#elif defined(__powerpc64__)
    EM_PPC64;
#else
    EM_NONE;
#endif

bool within(std::uint64_t offset, std::uint64_t size, std::uint64_t file_size) {
  return offset <= file_size && size <= file_size - offset;
}

}  // namespace

std::optional<std::string> elf_library_problem(const std::filesystem::path& file) {
  const UniqueFd owned(::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK));
  if (!owned) return std::string("cannot be opened: ") + std::strerror(errno);
  const int fd = owned.get();
  struct stat st {};
  if (::fstat(fd, &st) != 0) return std::string("cannot be stat'ed: ") + std::strerror(errno);
  if (!S_ISREG(st.st_mode)) return std::string("is not a regular file");
  const auto size = static_cast<std::uint64_t>(st.st_size);
  Elf64_Ehdr ehdr;
  if (size < sizeof ehdr || !read_at(fd, &ehdr, sizeof ehdr, 0))
    return "is " + std::to_string(size) + " bytes, too short for an ELF header";
  if (std::memcmp(ehdr.e_ident, ELFMAG, SELFMAG) != 0) return std::string("is not an ELF file");
  if (ehdr.e_ident[EI_CLASS] != ELFCLASS64 || ehdr.e_ident[EI_DATA] != ELFDATA2LSB)
    return std::string("is not a 64-bit little-endian ELF file");
  if (ehdr.e_type != ET_DYN) return "is not a shared library (ELF type " + std::to_string(ehdr.e_type) + ")";
  if (k_host_machine != EM_NONE && ehdr.e_machine != k_host_machine)
    return "is built for another machine (ELF machine " + std::to_string(ehdr.e_machine) + ", this one is " +
           std::to_string(k_host_machine) + ")";
  if (ehdr.e_phentsize != sizeof(Elf64_Phdr) || ehdr.e_phnum == 0 || ehdr.e_phnum > k_max_program_headers)
    return std::string("has no usable program header table");
  const std::uint64_t cut = size;
  const auto truncated = [&](const std::string& what, std::uint64_t end) {
    return "is truncated: " + what + " ends at byte " + std::to_string(end) + ", the file has " +
           std::to_string(cut) + " (an interrupted install? reinstall it)";
  };
  const std::uint64_t ph_bytes = std::uint64_t{ehdr.e_phnum} * sizeof(Elf64_Phdr);
  if (!within(ehdr.e_phoff, ph_bytes, size)) return truncated("the program header table", ehdr.e_phoff + ph_bytes);
  std::vector<Elf64_Phdr> phdrs(ehdr.e_phnum);
  if (!read_at(fd, phdrs.data(), ph_bytes, static_cast<off_t>(ehdr.e_phoff)))
    return std::string("cannot read its program headers");
  for (std::size_t i = 0; i < phdrs.size(); ++i)
    if (!within(phdrs[i].p_offset, phdrs[i].p_filesz, size))
      return truncated("segment " + std::to_string(i), phdrs[i].p_offset + phdrs[i].p_filesz);
  if (ehdr.e_shnum != 0) {
    const std::uint64_t sh_bytes = std::uint64_t{ehdr.e_shnum} * ehdr.e_shentsize;
    if (!within(ehdr.e_shoff, sh_bytes, size)) return truncated("the section header table", ehdr.e_shoff + sh_bytes);
  }
  return std::nullopt;
}

}  // namespace jitcache
