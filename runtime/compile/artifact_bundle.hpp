// The bytes a compiled kernel is stored as in the cache: one self-describing, versioned,
// checksummed bundle holding the cubin, its PTX, the facts it was built with and what the
// compiler reported. The cache verifies the blob's digest; the bundle's own checksum and
// strict parser make a blob from another version or a buggy writer a clean error.
//
// Grammar (integers little-endian):
//
//   bundle   := magic version count section{count} checksum
//   magic    := "JCKBNDL1"                               8 bytes
//   version  := u32 k_bundle_format_version
//   count    := u32 number of sections (each tag at most once, ascending)
//   section  := tag:u32 length:u64 bytes{length}
//   checksum := u64 XXH3-64 of every byte before it
//
//   tags: 1 facts (JSON object of strings)   2 entry name   3 cubin   4 PTX
//         5 compiler log   6 compile options (one per line)
//         7 resource usage (4 x i32: registers, stack frame, spill stores, spill loads)
//         8 compile time (f64 milliseconds)
//
// Required sections: facts, entry, cubin, PTX, resource usage. Unknown tags are an error
// (a newer writer must bump the version).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "jitcache/error.hpp"
#include "runtime/compile/compiler.hpp"

namespace jitcache {

// Bump when the grammar above changes; tests/runtime/compile/test_artifact_bundle.cpp holds a
// golden bundle that fails when you forget.
inline constexpr std::uint32_t k_bundle_format_version = 1;

std::vector<std::byte> serialize_bundle(const CompiledArtifact& artifact);

// What parse_bundle copies out: everything, or only what loading a kernel needs (the PTX
// and the compiler log, most of a bundle's bytes, are then left empty). Either way every
// section is bounds-checked and the checksum verified.
enum class BundleText { load, skip };

// The artifact back. `artifact.spec` is rebuilt from the facts (kernel, latent_scale,
// rope, target); a bundle whose facts do not name a valid spec is an error.
Result<CompiledArtifact> parse_bundle(std::span<const std::byte> bytes, BundleText text = BundleText::load);

// The same bundle format for a kernel that is not one of jitcache's own (an engine's
// source, runtime/compile/source_cache.hpp): every check of parse_bundle except that the
// facts need not name a KernelSpec; `artifact.spec` is left default and means nothing.
// The caller checks the facts against its own key.
Result<CompiledArtifact> parse_source_bundle(std::span<const std::byte> bytes, BundleText text = BundleText::load);

}  // namespace jitcache
