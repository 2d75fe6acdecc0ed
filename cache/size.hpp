// Sizes as people write them: the --max-size option and JITCACHE_MAX_SIZE, and the sizes
// the CLI prints.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "jitcache/error.hpp"

namespace jitcache::cache {

// Parses a size such as 500M, 2G, 1.5GiB or 4096 (bytes); K/M/G/T are powers of 1024.
Result<std::uint64_t> parse_size(std::string_view text);
// 1536 -> "1.5 KiB".
std::string format_size(std::uint64_t bytes);

}  // namespace jitcache::cache
