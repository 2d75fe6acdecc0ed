// The grammar of remote names: which prefix a name belongs to. Two fleets' prefixes may
// nest ("jitcache:" and "jitcache:b:") or not end in ':'; a name is still one prefix's.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "remote/remote_names.hpp"

namespace jitcache::remote {
namespace {

const std::string k_hex(32, 'a');

TEST(RemoteNamesTest, EntriesLeasesAndProbesOfThePrefix) {
  const ParsedName entry = parse_name("jitcache:", "jitcache:v1:entry:" + k_hex);
  EXPECT_EQ(entry.kind, NameKind::entry);
  ASSERT_TRUE(entry.key);
  EXPECT_EQ(entry.key->to_hex(), k_hex);
  EXPECT_EQ(parse_name("jitcache:", "jitcache:v1:lease:" + k_hex).kind, NameKind::lease);
  EXPECT_EQ(parse_name("jitcache:", "jitcache:v1:probe:0123abcd").kind, NameKind::probe);
  EXPECT_EQ(make_name("jitcache:", "entry", k_hex), "jitcache:v1:entry:" + k_hex);
  EXPECT_EQ(parse_name("", make_name("", "lease", k_hex)).kind, NameKind::lease);
}

TEST(RemoteNamesTest, ANameOfANestedPrefixIsNotTheOuterPrefixs) {
  for (const std::string kind : {"entry", "lease", "probe"}) {
    const std::string name = make_name("jitcache:b:", kind, k_hex);
    EXPECT_EQ(parse_name("jitcache:", name).kind, NameKind::not_ours) << name;
    EXPECT_NE(parse_name("jitcache:b:", name).kind, NameKind::not_ours) << name;
  }
  // Prefixes that do not end in ':' nest too.
  EXPECT_EQ(parse_name("jc", make_name("jcx", "entry", k_hex)).kind, NameKind::not_ours);
  EXPECT_EQ(parse_name("jc", make_name("jcv", "entry", k_hex)).kind, NameKind::not_ours);
  EXPECT_EQ(parse_name("jc", make_name("jc1", "entry", k_hex)).kind, NameKind::not_ours);
  // A prefix that looks like a version: "jitcache:v2:" holds "jitcache:v2:v1:entry:..",
  // which is not jitcache:'s (three colons), and jitcache:'s "jitcache:v2:entry:.." is not
  // "jitcache:v2:"'s.
  EXPECT_EQ(parse_name("jitcache:", make_name("jitcache:v2:", "entry", k_hex)).kind, NameKind::not_ours);
  EXPECT_EQ(parse_name("jitcache:v2:", "jitcache:v2:entry:" + k_hex).kind, NameKind::not_ours);
  EXPECT_EQ(parse_name("jitcache:", "jitcache:v2:entry:" + k_hex).kind, NameKind::other_version);
}

// Every name is claimed by at most one of a set of nested prefixes.
TEST(RemoteNamesTest, AtMostOnePrefixClaimsAName) {
  const std::vector<std::string> prefixes{"", "j", "jitcache", "jitcache:", "jitcache:b", "jitcache:b:",
                                          "jitcache:v1:", "jitcache:v1:entry:", "jitcache:v2"};
  std::vector<std::string> names;
  for (const std::string& p : prefixes)
    for (const std::string kind : {"entry", "lease", "probe", "other"})
      names.push_back(make_name(p, kind, k_hex));
  names.push_back("jitcache:v9:entry:0123");
  for (const std::string& name : names) {
    int claimed = 0;
    for (const std::string& p : prefixes) claimed += parse_name(p, name).kind != NameKind::not_ours;
    EXPECT_LE(claimed, 1) << name;
    EXPECT_GE(claimed, 1) << name;
  }
}

TEST(RemoteNamesTest, NamesThisBuildDoesNotWrite) {
  const std::string p = "jitcache:";
  EXPECT_EQ(parse_name(p, "jitcache:v1:entry:" + std::string(32, 'A')).kind, NameKind::malformed);
  EXPECT_EQ(parse_name(p, "jitcache:v1:entry:0123").kind, NameKind::malformed);
  EXPECT_EQ(parse_name(p, "jitcache:v1:lease:0123").kind, NameKind::malformed);
  EXPECT_EQ(parse_name(p, "jitcache:v1:other:" + k_hex).kind, NameKind::malformed);
  EXPECT_EQ(parse_name(p, "jitcache:v1:probe:").kind, NameKind::malformed);
  EXPECT_EQ(parse_name(p, "jitcache:v12:entry:anything").kind, NameKind::other_version);
  const std::vector<std::string> not_ours{"jitcache:",
                                          "jitcache:v1",
                                          "jitcache:v1:entry",
                                          "jitcache:v:entry:" + k_hex,
                                          "jitcache:V1:entry:" + k_hex,
                                          "jitcache:v1:Entry:" + k_hex,
                                          "jitcache:v1::" + k_hex,
                                          "jitcache:v1:entry:" + k_hex + ":x",
                                          "jitcache:b:v1:entry:" + k_hex,
                                          "other:v1:entry:" + k_hex,
                                          "jitcache"};
  for (const std::string& name : not_ours)
    EXPECT_EQ(parse_name(p, name).kind, NameKind::not_ours) << name;
}

}  // namespace
}  // namespace jitcache::remote
