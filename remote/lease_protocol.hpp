// What a lease is on the wire, shared by the tier (remote_tier.cpp) and its access probe
// (remote_probe.cpp): a random token, taken with SET NX PX, and the scripts that renew and
// release it only while it still holds the token.
#pragma once

#include <sys/random.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace jitcache::remote {

// Deletes or extends the lease only while it still holds our token: a lease that expired
// and was taken by another node is theirs.
inline constexpr std::string_view k_release_script =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end";
inline constexpr std::string_view k_renew_script =
    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) "
    "else return 0 end";

// 32 lowercase hex digits from the kernel's random source.
inline std::string random_token() {
  unsigned char bytes[16];
  std::size_t got = 0;
  while (got < sizeof bytes) {
    const ssize_t n = ::getrandom(bytes + got, sizeof bytes - got, 0);
    if (n > 0) got += static_cast<std::size_t>(n);
  }
  static constexpr char k_digits[] = "0123456789abcdef";
  std::string token;
  for (unsigned char b : bytes) {
    token += k_digits[b >> 4];
    token += k_digits[b & 15];
  }
  return token;
}

}  // namespace jitcache::remote
