// The GNU build-id note of an ELF file (NT_GNU_BUILD_ID, what `readelf -n` shows as "Build
// ID"): the linker's hash of the build, the same in every copy of one library wherever it
// was installed (the CUDA toolkit's libnvrtc.so.13 and the pip package's carry the same
// one), and different for another build. Read from the file, without loading it.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace jitcache {

// The build-id as lower-case hex, or std::nullopt when the file cannot be read, is not a
// 64-bit little-endian ELF file, or has no build-id note. Reads the headers and the note
// segments only (a few kilobytes), never the whole file.
std::optional<std::string> read_build_id(const std::filesystem::path& file);

}  // namespace jitcache

namespace jitcache {

// Why `file` is not a whole shared library of this machine's kind, or std::nullopt when it
// is: a regular file, a 64-bit little-endian ELF shared object for the machine this build
// runs on, whose program headers, every segment they name and the section header table
// all lie within the file. A library cut short (a pip install interrupted) passes dlopen's
// own checks and dies with SIGBUS at its first use of a page past the end: this is asked
// before any compiler library is opened in the caller's process.
std::optional<std::string> elf_library_problem(const std::filesystem::path& file);

}  // namespace jitcache
