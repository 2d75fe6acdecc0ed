// The address of a Redis server, as JITCACHE_REMOTE and --remote give it:
//
//   redis://[user[:password]@]host[:port][/db]
//
// host is a name, an IPv4 address or a bracketed IPv6 address ([::1]); port defaults to
// 6379 and db to 0. user and password may be percent-encoded (%40 for '@'); the user info
// ends at the last '@', so a password may also hold '@', ':' and '/' as they are. A password in
// the URL is accepted but a password file (JITCACHE_REMOTE_PASSWORD_FILE) is better: a URL
// ends up in process listings and logs, which is why display() never shows it.
#pragma once

#include <string>
#include <string_view>

#include "jitcache/error.hpp"

namespace jitcache::remote {

struct RedisUrl {
  std::string host;
  int port = 6379;
  int db = 0;
  std::string user;      // empty: the default user
  std::string password;  // empty: no AUTH

  // The URL without its password, for logs and reports: redis://user:***@host:port/db.
  std::string display() const;
};

// Errors (ErrorCode::invalid_input) name `source` (the variable or option) and the part
// that is wrong; they quote nothing of the user info, so no part of the password appears
// in them, however malformed the rest is.
Result<RedisUrl> parse_redis_url(std::string_view text, std::string_view source);

}  // namespace jitcache::remote
