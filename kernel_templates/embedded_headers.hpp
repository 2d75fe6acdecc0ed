// The kernel template headers, embedded into the library at build time
// (cmake/embed_headers.cmake) so that NVRTC compiles exactly the text the host executor
// was built from, and so their bytes can be hashed into cache keys.
#pragma once

#include <span>
#include <string_view>

namespace jitcache::kernel_templates {

struct EmbeddedHeader {
  std::string_view include_name;  // as written in #include, e.g. "jitcache/nvfp4_mla.cuh"
  std::string_view text;
};

std::span<const EmbeddedHeader> embedded_headers();

}  // namespace jitcache::kernel_templates
