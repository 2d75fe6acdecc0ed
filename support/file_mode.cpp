#include "support/file_mode.hpp"

#include <cstdio>

namespace jitcache {

std::string mode_text(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

}  // namespace jitcache
