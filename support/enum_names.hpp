// The printed name of an enum's value, from one list of names in declaration order:
//
//   const char* to_string(Tier tier) { return enum_name(tier, {"memory", "disk", "provider", "remote"}); }
//
// The list is checked against the enum when it is compiled: the enum's enumerators must be
// 0, 1, ..., N-1 and the list must have exactly one name for each, so an enumerator added
// without its name stops the build, as -Werror=switch-enum did for the switch statements
// this replaces (top CMakeLists.txt). A value that is no enumerator (a cast, a corrupt
// byte) reads "?".
//
// How the enumerators are counted: GCC and Clang spell a non-type template argument that
// is a named enumerator as `ns::E::name` in __PRETTY_FUNCTION__ and any other value as
// `(ns::E)7`. Values from 0 to k_enum_probe_limit - 1 are probed; an enum meant for this
// has fewer enumerators than that.
#pragma once

#include <cstddef>
#include <string_view>
#include <type_traits>
#include <utility>

namespace jitcache {

namespace enum_names_detail {

inline constexpr std::size_t k_enum_probe_limit = 64;

template <auto V>
constexpr std::string_view spelling() {
  return __PRETTY_FUNCTION__;
}

// Whether V is one of its enum's named enumerators.
template <auto V>
constexpr bool is_enumerator() {
  constexpr std::string_view text = spelling<V>();
  constexpr std::size_t at = text.find("V = ");
  static_assert(at != std::string_view::npos && at + 4 < text.size(),
                "enum_name: this compiler does not spell template arguments as GCC and Clang do");
  return text[at + 4] != '(';
}

template <class E, std::size_t... I>
constexpr bool dense(std::size_t count, std::index_sequence<I...>) {
  return ((is_enumerator<static_cast<E>(I)>() == (I < count)) && ...);
}

// Whether E's enumerators are exactly 0, 1, ..., count-1.
template <class E, std::size_t count>
constexpr bool has_dense_enumerators() {
  static_assert(std::is_enum_v<E>);
  static_assert(count < k_enum_probe_limit, "enum_name: too many enumerators to check");
  return dense<E>(count, std::make_index_sequence<k_enum_probe_limit>{});
}

}  // namespace enum_names_detail

template <class E, std::size_t N>
constexpr const char* enum_name(E value, const char* const (&names)[N]) {
  static_assert(enum_names_detail::has_dense_enumerators<E, N>(),
                "enum_name: the names must be one per enumerator, in declaration order, and the "
                "enumerators 0, 1, 2, ...");
  const auto index = static_cast<std::size_t>(std::to_underlying(value));
  return index < N ? names[index] : "?";
}

}  // namespace jitcache
