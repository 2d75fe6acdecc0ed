#include "remote/remote_config.hpp"

#include <mutex>

#include "jitcache/log.hpp"
#include "support/env.hpp"
#include "support/secret_file.hpp"

namespace jitcache::remote {

Result<std::optional<std::string>> load_fleet_key() {
  const auto path = env::get(env::jitcache_remote_key_file);
  if (!path) return std::optional<std::string>();
  SecretRules rules;
  rules.what = "fleet key";
  rules.source = env::jitcache_remote_key_file.name;
  rules.min_bytes = k_min_fleet_key_bytes;
  rules.max_bytes = 4096;
  return std::optional<std::string>(JC_TRY(read_secret_file(*path, rules)));
}

namespace {

// Where the remote's URL comes from: `url` when given (named `url_source`), else
// JITCACHE_REMOTE.
std::pair<std::optional<std::string>, std::string> remote_url(const std::optional<std::string>& url,
                                                              std::string_view url_source) {
  if (url && !url->empty()) return {url, std::string(url_source)};
  return {env::get(env::jitcache_remote), std::string(env::jitcache_remote.name)};
}

}  // namespace

Result<std::optional<RemoteTierOptions>> remote_settings(const std::optional<std::string>& url,
                                                         std::string_view url_source) {
  const auto [text, source] = remote_url(url, url_source);
  if (!text || text->empty()) return std::optional<RemoteTierOptions>();
  RemoteTierOptions options;
  options.redis.url = JC_TRY(parse_redis_url(*text, source));
  if (const auto password_file = env::get(env::jitcache_remote_password_file)) {
    SecretRules rules;
    rules.what = "Redis password";
    rules.source = env::jitcache_remote_password_file.name;
    rules.strip_final_newline = true;
    options.redis.url.password = JC_TRY(read_secret_file(*password_file, rules));
  }
  options.redis.connect_timeout = std::chrono::milliseconds(JC_TRY(env::get_uint(env::jitcache_remote_connect_timeout_ms)));
  options.redis.op_timeout = std::chrono::milliseconds(JC_TRY(env::get_uint(env::jitcache_remote_timeout_ms)));
  options.redis.breaker = std::chrono::milliseconds(JC_TRY(env::get_uint(env::jitcache_remote_breaker_ms)));
  options.lease = std::chrono::milliseconds(JC_TRY(env::get_uint(env::jitcache_remote_lease_ms)));
  options.wait = std::chrono::milliseconds(JC_TRY(env::get_uint(env::jitcache_remote_wait_ms)));
  options.max_entry_bytes = JC_TRY(env::get_uint(env::jitcache_remote_max_entry_bytes));
  if (options.redis.connect_timeout.count() == 0 || options.redis.op_timeout.count() == 0)
    return make_error(ErrorCode::invalid_input, "remote cache timeouts must be at least 1 ms (" +
                                                    std::string(env::jitcache_remote_connect_timeout_ms.name) + ", " +
                                                    std::string(env::jitcache_remote_timeout_ms.name) + ")");
  if (options.lease.count() < 30)
    return make_error(ErrorCode::invalid_input,
                      std::string(env::jitcache_remote_lease_ms.name) + " must be at least 30 ms");
  if (options.max_entry_bytes < 1024)
    return make_error(ErrorCode::invalid_input,
                      std::string(env::jitcache_remote_max_entry_bytes.name) + " must be at least 1024");
  if (auto prefix = env::get(env::jitcache_remote_prefix)) options.prefix = *prefix;
  else options.prefix = std::string(env::jitcache_remote_prefix.default_value);
  return std::optional<RemoteTierOptions>(std::move(options));
}

Result<std::optional<RemoteTierOptions>> remote_options(const std::optional<std::string>& url,
                                                        std::string_view url_source) {
  const auto [text, from] = remote_url(url, url_source);
  if (!text || text->empty()) return std::optional<RemoteTierOptions>();
  const std::string source = from;
  // The URL and the password file are checked before the key: a malformed URL is an error
  // even on a node without a key.
  auto options = JC_TRY(remote_settings(url, url_source));
  auto key = JC_TRY(load_fleet_key());
  if (!key) {
    static std::once_flag warned;
    std::call_once(warned, [&] {
      log_warning("remote cache " + options->redis.url.display() + " (" + source + ") is not used: no fleet key (" +
                  std::string(env::jitcache_remote_key_file.name) +
                  "); remote entries are signed, and a node without the key can neither check nor sign them");
    });
    return std::optional<RemoteTierOptions>();
  }
  options->fleet_key = std::move(*key);
  return options;
}

}  // namespace jitcache::remote
