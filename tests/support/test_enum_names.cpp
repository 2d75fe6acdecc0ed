#include <gtest/gtest.h>

#include <cstdint>

#include "support/enum_names.hpp"

namespace jitcache {
namespace {

enum class Colour : std::uint8_t { red, green, blue };
enum class Signed : int { first, second };
enum class Gapped { zero, two = 2 };
enum class FromOne { one = 1, two };

namespace nested::deeper {
enum class Deep { only };
}

const char* to_string(Colour colour) { return enum_name(colour, {"red", "green", "blue"}); }

using enum_names_detail::has_dense_enumerators;
using enum_names_detail::is_enumerator;

TEST(EnumNames, TellsANamedEnumeratorFromAnyOtherValue) {
  static_assert(is_enumerator<Colour::red>());
  static_assert(is_enumerator<Colour::blue>());
  static_assert(!is_enumerator<static_cast<Colour>(3)>());
  static_assert(!is_enumerator<static_cast<Colour>(255)>());
  static_assert(is_enumerator<Signed::second>());
  static_assert(!is_enumerator<static_cast<Signed>(-1)>());
  static_assert(is_enumerator<nested::deeper::Deep::only>());
  static_assert(!is_enumerator<static_cast<nested::deeper::Deep>(1)>());
  SUCCEED() << "checked when compiled";
}

TEST(EnumNames, ATableMustNameEveryEnumeratorFromZeroUp) {
  static_assert(has_dense_enumerators<Colour, 3>());
  static_assert(!has_dense_enumerators<Colour, 2>(), "a name missing");
  static_assert(!has_dense_enumerators<Colour, 4>(), "a name too many");
  static_assert(has_dense_enumerators<Signed, 2>());
  static_assert(has_dense_enumerators<nested::deeper::Deep, 1>());
  static_assert(!has_dense_enumerators<Gapped, 2>(), "enumerators with a gap");
  static_assert(!has_dense_enumerators<Gapped, 3>());
  static_assert(!has_dense_enumerators<FromOne, 2>(), "enumerators not starting at 0");
  SUCCEED() << "checked when compiled";
}

TEST(EnumNames, NamesEachValueAndMarksAnyOther) {
  EXPECT_STREQ(to_string(Colour::red), "red");
  EXPECT_STREQ(to_string(Colour::green), "green");
  EXPECT_STREQ(to_string(Colour::blue), "blue");
  EXPECT_STREQ(to_string(static_cast<Colour>(3)), "?");
  EXPECT_STREQ(to_string(static_cast<Colour>(200)), "?");
  EXPECT_STREQ(enum_name(static_cast<Signed>(-1), {"first", "second"}), "?");
  static_assert(enum_name(Colour::green, {"r", "g", "b"})[0] == 'g', "usable in constant expressions");
}

}  // namespace
}  // namespace jitcache
