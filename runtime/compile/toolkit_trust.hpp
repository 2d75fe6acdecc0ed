// What makes a compiler library fit to be loaded into this process and to key its kernels:
// a compiler is what its bytes are. Its identity in every key is a digest of the whole file
// (not its GNU build-id, which a patched copy keeps), and before a library is opened or
// keyed it must be a whole shared library of this machine (a file cut short by an
// interrupted install would kill the process with SIGBUS at its first compile) that no
// user but the caller and root can replace (a co-tenant's library is code execution in
// the serving process, and a cache keyed by it serves its output to everyone after).
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace jitcache {

// Why the library `file` (followed to its real file) must be neither loaded nor keyed with,
// or std::nullopt when it may:
//   - the real file and the directory holding it are owned by the caller or by root, and
//     neither is writable by group or others (the rule of the cache root and the key files);
//   - it is a whole ELF shared library of this machine (elf_library_problem).
std::optional<std::string> library_refusal(const std::filesystem::path& file);

// Why `path` (a file or directory, not followed if a symbolic link) could be replaced by a
// user other than the caller and root: owned by another user, or writable by group or
// others; std::nullopt when it cannot (or does not exist: the caller's read says so).
std::optional<std::string> replaceable_by_another_user(const std::filesystem::path& path);

// library_refusal, warned about once per file and process ("skipping <file> (<origin>): why;
// looking further"); true when the file may be used.
bool usable_library(const std::filesystem::path& file, std::string_view origin);

// "dev:ino size N mtime S.NS ctime S.NS": what tells that a file's bytes have not changed
// since they were last digested (rewriting a file changes its mtime and ctime, replacing it
// its inode, and ctime cannot be set back). std::nullopt when it cannot be stat'ed.
std::optional<std::string> file_stat_identity(const std::filesystem::path& file);

// XXH3-128 (32 hex digits) of every byte of `file`, read once per process for each stat
// identity (the fingerprint memo keeps it across processes); std::nullopt when the file
// cannot be read whole. About 10-30 ms for NVRTC's ~100 MB.
std::optional<std::string> file_content_digest(const std::filesystem::path& file);

}  // namespace jitcache
