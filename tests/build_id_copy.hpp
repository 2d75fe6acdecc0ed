// Copies of compiler libraries for the build-id tests: the same build in another
// directory, or "another build" made by changing one byte of the copy's GNU build-id note
// (the note is data; nothing reads it when the library is loaded).
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "runtime/compile/elf_build_id.hpp"

namespace jitcache::testing {

// `from` copied to `to`; with Build::other, the last byte of its build-id note inverted;
// with Build::patched, one letter of a string in its data changed and the note kept (the
// same build-id, other bytes: what a library patched by someone else looks like).
enum class Build { same, other, patched };
inline void copy_library(const std::filesystem::path& from, const std::filesystem::path& to, Build build) {
  std::filesystem::create_directories(to.parent_path());
  std::filesystem::copy_file(from, to, std::filesystem::copy_options::overwrite_existing);
  if (build == Build::same) return;
  if (build == Build::patched) {
    std::string file;
    {
      std::ifstream in(to, std::ios::binary);
      file.assign(std::istreambuf_iterator<char>(in), {});
    }
    // An error message every NVRTC carries; else the last byte (the section headers, which
    // nothing reads at load).
    const auto at = file.find("NVRTC_ERROR_INVALID_OPTION");
    std::size_t byte = at == std::string::npos ? file.size() - 1 : at + 12;
    file[byte] = static_cast<char>(file[byte] == 'X' ? 'Y' : 'X');
    std::ofstream(to, std::ios::binary | std::ios::trunc) << file;
    return;
  }
  const auto id = read_build_id(from);
  if (!id) throw std::runtime_error(from.string() + " has no build-id note");
  std::string bytes;
  for (std::size_t i = 0; i + 1 < id->size(); i += 2) bytes += static_cast<char>(std::stoi(id->substr(i, 2), nullptr, 16));
  std::string file;
  {
    std::ifstream in(to, std::ios::binary);
    file.assign(std::istreambuf_iterator<char>(in), {});
  }
  // The note's name ("GNU\0") is followed by the ID itself.
  const auto at = file.find(std::string("GNU", 4) + bytes);
  if (at == std::string::npos) throw std::runtime_error(to.string() + ": build-id note not found");
  file[at + 4 + bytes.size() - 1] = static_cast<char>(~file[at + 4 + bytes.size() - 1]);
  std::ofstream(to, std::ios::binary | std::ios::trunc) << file;
}

}  // namespace jitcache::testing
