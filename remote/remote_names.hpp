// The grammar of the Redis names jitcache writes, and which prefix a name belongs to.
//
// Every name a node writes is its fleet's prefix (JITCACHE_REMOTE_PREFIX) followed by
//
//   v<digits>:<kind>:<id>      kind: lowercase letters; id: no ':'
//
// today `v1:entry:<key>`, `v1:lease:<key>` (32 lowercase hex digits) and `v1:probe:<hex>`
// (`remote status`'s short-lived test of its permissions). Any later format keeps this
// shape. The shape is what makes a name belong to exactly one prefix: if two prefixes
// P and P+X (X not empty) both claimed a name, X would carry no ':' (both tails have
// exactly two), so the tail's first segment would be X followed by "v<digits>", which
// does not start with 'v' and digits alone. So `jitcache:` never claims a name of
// `jitcache:b:` (its tail there, `b:v1:entry:...`, has three colons), whatever the
// prefixes; a prefix need not end in ':'.
//
// A Redis SCAN of `<prefix>*` also lists other fleets' names (longer prefixes) and names
// of other software: parse_name() says which of them are this prefix's, so that no
// audit or cleanup ever touches the others.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "cache/hash.hpp"

namespace jitcache::remote {

enum class NameKind {
  entry,          // v1:entry:<canonical key>
  lease,          // v1:lease:<canonical key>
  probe,          // v1:probe:<hex>, remote status's test value (expires by itself)
  malformed,      // v1, but no name this build writes (an unknown kind, a key not canonical)
  other_version,  // v<n>:...: this prefix's, in a format this build does not read
  not_ours,       // not under the prefix, or not of the grammar: another prefix's, or not jitcache's
};

struct ParsedName {
  NameKind kind = NameKind::not_ours;
  std::optional<cache::CacheKey> key;  // entry and lease
};

// What `name` is under `prefix`.
ParsedName parse_name(std::string_view prefix, std::string_view name);

// The name of `kind` ("entry", "lease", "probe") for `id` under `prefix` (format v1).
std::string make_name(std::string_view prefix, std::string_view kind, std::string_view id);

}  // namespace jitcache::remote
