// What NVRTC may read for CUDA C++: nothing from disk. A cache key holds the source, the
// named headers and the options; a header NVRTC found on disk would not be in it, and
// editing that header would leave the key, and so the cached kernel, unchanged (a stale
// kernel served as verified). NVRTC 13 has no dependency output, so the key cannot learn
// afterwards what was read; the reads are prevented instead:
//
// - Options that make NVRTC read or write files are refused, naming the option and
//   --include-header (the named headers): include paths (-I, --include-path), pre-includes
//   (-include, --pre-include), precompiled headers (--pch, --create-pch, --use-pch,
//   --pch-dir, ...), timing and trace files (--time, --fdevice-time-trace), and the
//   make jobserver.
// - The source and every named header are scanned (comments and string literals skipped,
//   line continuations joined) for #include, #include_next, #embed, #import and
//   __has_include(_next): an absolute name, a name with a `..` component, or a name computed
//   by a macro is refused, naming the file and line. Any other name that is not a named
//   header is left to NVRTC, which fails with "cannot open source file" naming it: the
//   tool worker compiles from an empty private working directory (tool_worker.hpp), so a
//   relative name finds nothing on disk. (NVRTC's built-in headers, <cuda_fp16.h> and
//   the like, are part of the NVRTC build, which the key holds by fingerprint.)
// - A NUL byte in the source or a header is refused, naming the file and offset: NVRTC
//   reads text up to it, the key hashes all of it.
// - Two named headers with one name are refused, naming it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "jitcache/error.hpp"

namespace jitcache {

// ErrorCode::invalid_argument for any rule above that `text` (named `name`), `headers`
// or `options` break.
Status check_cuda_input(const std::string& text, const std::vector<std::pair<std::string, std::string>>& headers,
                        const std::vector<std::string>& options, const std::string& name);

// The option that makes NVRTC touch files, if `option` is one: "-I", "--pre-include", ...
std::string file_option_of(const std::string& option);

}  // namespace jitcache
