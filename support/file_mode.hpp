// A file's permission bits as people read them in messages ("0644").
#pragma once

#include <sys/types.h>

#include <string>

namespace jitcache {

// The permission, set-id and sticky bits of `mode` in four octal digits: "0755", "1777".
std::string mode_text(mode_t mode);

}  // namespace jitcache
