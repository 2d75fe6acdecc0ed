// libFuzzer target for what the remote tier reads from a server it does not trust, and
// the URL it is configured with: decode_signed_entry (every check before and after the
// signature), peek_facts (which parses a value's facts without a key, for audits) and
// parse_redis_url. Invariants beyond "no crash": a decoded entry's facts hash to the key
// asked for and its bytes to their digest; what display() shows of a URL never depends on its password.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "remote/redis_url.hpp"
#include "remote/signed_entry.hpp"

namespace {

using namespace jitcache;

void require(bool condition) {
  if (!condition) std::abort();
}

const std::string k_key(32, 'k');
const std::string k_name = "jitcache:v1:entry:00000000000000000000000000000000";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const cache::Facts facts{{"kernel", "writer"}};
  // The raw input as a value; and the input signed properly as the bytes of an entry,
  // so the fuzzer also reaches the checks behind the signature.
  (void)remote::decode_signed_entry(k_name, k_key, input, facts.key());
  if (auto peeked = remote::peek_facts(input)) require(peeked->validate().has_value());
  const auto* bytes = reinterpret_cast<const std::byte*>(data);
  const std::string value = remote::encode_signed_entry(k_name, k_key, facts, {bytes, size}, 1.0);
  auto decoded = remote::decode_signed_entry(k_name, k_key, value, facts.key());
  require(decoded.has_value() && decoded->facts == facts && decoded->bytes.size() == size);
  if (size > 0) {
    std::string flipped = value;
    flipped[data[0] % flipped.size()] ^= 0x01;
    require(!remote::decode_signed_entry(k_name, k_key, flipped, facts.key()).has_value());
  }

  const std::string url = "redis://" + std::string(input);
  auto parsed = remote::parse_redis_url(url, "JITCACHE_REMOTE");
  if (parsed) {
    require(parsed->port >= 1 && parsed->port <= 65535 && !parsed->host.empty());
    // What display() shows does not depend on the password, only on whether there is one.
    remote::RedisUrl other = *parsed;
    if (!other.password.empty()) other.password = "x";
    require(other.display() == parsed->display());
  } else {
    require(parsed.error().message.starts_with("JITCACHE_REMOTE: "));
  }
  return 0;
}
