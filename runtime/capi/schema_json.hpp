// A family's spec schema as the C ABI takes it (jitcache_declare_family): a JSON object
// {"family": ..., "kind": ..., "facts": {name: [allowed values], ...}}.
#pragma once

#include "jitcache/compile.hpp"
#include "jitcache/error.hpp"

namespace jitcache {

// invalid_argument, prefixed with `self`, for anything but such an object: unknown fields,
// wrong types, and a key given twice in one object (JSON parsers disagree on which one
// wins, so neither does).
Result<SpecSchema> read_schema(const char* self, const char* text);

}  // namespace jitcache
