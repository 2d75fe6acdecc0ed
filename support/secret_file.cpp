#include "support/secret_file.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include "support/file_mode.hpp"
#include "support/regular_file.hpp"

namespace jitcache {

Result<std::string> read_secret_file(const std::filesystem::path& path, const SecretRules& rules) {
  const std::string name = std::string(rules.what) + " file " + path.string() + " (" +
                           std::string(rules.source) + ")";
  auto file = RegularFile::open(path, FollowSymlinks::yes, name);
  if (!file) {
    Error error = std::move(file.error());
    if (error.code == ErrorCode::invalid_input) error.code = ErrorCode::unsafe;
    return std::unexpected(std::move(error));
  }
  const struct stat& st = file->status();
  if (st.st_uid != ::geteuid())
    return make_error(ErrorCode::unsafe, name + ": refused: it is owned by uid " + std::to_string(st.st_uid) +
                                             ", not by the user running jitcache (uid " +
                                             std::to_string(::geteuid()) + ")");
  if ((st.st_mode & 077) != 0)
    return make_error(ErrorCode::unsafe, name + ": refused: mode " + mode_text(st.st_mode) +
                                             " lets group or others read or write it; "
                                             "it must be private to its owner (chmod 600)");
  std::string bytes = JC_TRY(file->read_all(rules.max_bytes));
  if (rules.strip_final_newline && bytes.ends_with('\n')) {
    bytes.pop_back();
    if (bytes.ends_with('\r')) bytes.pop_back();
  }
  if (bytes.size() < rules.min_bytes)
    return make_error(ErrorCode::invalid_input, name + ": holds " + std::to_string(bytes.size()) +
                                                    " bytes; a " + std::string(rules.what) +
                                                    " must have at least " +
                                                    std::to_string(rules.min_bytes));
  return bytes;
}

}  // namespace jitcache
