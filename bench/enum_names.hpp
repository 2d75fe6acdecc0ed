// An enum's names as one table in the enum's order, so that its to_string is a lookup
// instead of a switch of one case per value.
#pragma once

#include <array>
#include <cstddef>

namespace jitcache::bench {

// `value`'s name in `names`, which lists one name per value of Enum in declaration order
// (Enum's values 0, 1, ...); "?" for a value past the table.
template <typename Enum, std::size_t N>
constexpr const char* enum_name(const std::array<const char*, N>& names, Enum value) {
  const auto index = static_cast<std::size_t>(value);
  return index < N ? names[index] : "?";
}

}  // namespace jitcache::bench
