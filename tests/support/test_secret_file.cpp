// Secret files (the fleet key, the Redis password): only a private regular file of this
// user is read; every other file is refused with the rule it broke.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "remote/remote_config.hpp"
#include "support/secret_file.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

using jitcache::testing::HangGuard;
using jitcache::testing::ScopedEnv;

class SecretFileTest : public jitcache::testing::TempDirTest {
 protected:
  SecretRules rules() const {
    SecretRules r;
    r.what = "fleet key";
    r.source = "JITCACHE_REMOTE_KEY_FILE";
    r.min_bytes = 32;
    return r;
  }

  std::filesystem::path write(const std::string& name, const std::string& bytes, mode_t mode = 0600) {
    const std::filesystem::path path = dir() / name;
    {
      std::ofstream out(path, std::ios::binary | std::ios::trunc);
      out << bytes;
    }
    EXPECT_EQ(::chmod(path.c_str(), mode), 0);
    return path;
  }

  void expect_refused(const Result<std::string>& read, ErrorCode code, const std::string& says) {
    ASSERT_FALSE(read.has_value()) << "accepted";
    EXPECT_EQ(read.error().code, code) << read.error().to_string();
    EXPECT_NE(read.error().message.find(says), std::string::npos) << read.error().message;
    EXPECT_NE(read.error().message.find("JITCACHE_REMOTE_KEY_FILE"), std::string::npos) << read.error().message;
  }

  const std::string key = std::string(40, 'k');
};

TEST_F(SecretFileTest, PrivateFileIsReadByteForByte) {
  const std::string bytes = std::string(32, 'a') + "\n";
  auto read = read_secret_file(write("key", bytes), rules());
  ASSERT_OK(read);
  EXPECT_EQ(*read, bytes) << "a key keeps its final newline";
  auto owner_read_only = read_secret_file(write("ro", key, 0400), rules());
  ASSERT_OK(owner_read_only);
  EXPECT_EQ(*owner_read_only, key);
}

TEST_F(SecretFileTest, GroupOrOtherAccessIsRefusedNamingTheRule) {
  for (mode_t mode : {0640, 0604, 0620, 0602, 0610, 0601, 0660, 0644, 0666, 0700 | 0007}) {
    auto read = read_secret_file(write("key", key, mode), rules());
    SCOPED_TRACE(std::to_string(mode));
    expect_refused(read, ErrorCode::unsafe, "chmod 600");
  }
}

TEST_F(SecretFileTest, DirectoryFifoAndMissingFileAreRefused) {
  std::filesystem::create_directory(dir() / "adir");
  ::chmod((dir() / "adir").c_str(), 0700);
  expect_refused(read_secret_file(dir() / "adir", rules()), ErrorCode::unsafe, "a directory");

  ASSERT_EQ(::mkfifo((dir() / "fifo").c_str(), 0600), 0);
  {
    HangGuard guard(10);  // opening a FIFO must not wait for a writer
    expect_refused(read_secret_file(dir() / "fifo", rules()), ErrorCode::unsafe, "a FIFO");
  }
  expect_refused(read_secret_file(dir() / "absent", rules()), ErrorCode::not_found, "absent");
}

TEST_F(SecretFileTest, SymlinkToAPrivateFileIsFollowed) {
  const auto target = write("real.key", key);
  std::filesystem::create_symlink(target, dir() / "link.key");
  auto read = read_secret_file(dir() / "link.key", rules());
  ASSERT_OK(read);
  EXPECT_EQ(*read, key);
  // The link's target is what is checked: a link to a readable file is refused.
  ::chmod(target.c_str(), 0644);
  expect_refused(read_secret_file(dir() / "link.key", rules()), ErrorCode::unsafe, "chmod 600");
}

TEST_F(SecretFileTest, SizeBoundsAreChecked) {
  expect_refused(read_secret_file(write("short", std::string(31, 'x')), rules()), ErrorCode::invalid_input,
                 "at least 32");
  expect_refused(read_secret_file(write("empty", ""), rules()), ErrorCode::invalid_input, "holds 0 bytes");
  SecretRules small = rules();
  small.max_bytes = 64;
  expect_refused(read_secret_file(write("long", std::string(65, 'x')), small), ErrorCode::invalid_input,
                 "over the limit");
  ASSERT_OK(read_secret_file(write("exact", std::string(64, 'x')), small));
}

TEST_F(SecretFileTest, PasswordsLoseOneFinalNewlineOnly) {
  SecretRules password;
  password.what = "Redis password";
  password.source = "JITCACHE_REMOTE_PASSWORD_FILE";
  password.strip_final_newline = true;
  struct Case {
    const char* what;  // said with a failure
    const char* file;
    const char* bytes;
    const char* password;
  };
  const Case cases[] = {
      {"unix line", "pw1", "s3cret\n", "s3cret"},
      {"dos line", "pw2", "s3cret\r\n", "s3cret"},
      {"two newlines", "pw3", "s3cret\n\n", "s3cret\n"},
      {"no newline", "pw4", "s3cret", "s3cret"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto read = read_secret_file(write(c.file, c.bytes), password);
    ASSERT_OK(read);
    EXPECT_EQ(*read, c.password);
  }
  // A file holding only a newline holds no password.
  auto empty = read_secret_file(write("pw5", "\n"), password);
  ASSERT_FALSE(empty);
  EXPECT_EQ(empty.error().code, ErrorCode::invalid_input);
}

TEST_F(SecretFileTest, FileOfAnotherUserIsRefused) {
  const auto path = write("theirs.key", key);
  if (::geteuid() != 0) GTEST_SKIP() << "changing a file's owner needs root; not running as root";
  ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
  expect_refused(read_secret_file(path, rules()), ErrorCode::unsafe, "owned by uid 65534");
}

TEST_F(SecretFileTest, FleetKeyComesFromItsVariable) {
  {
    ScopedEnv unset("JITCACHE_REMOTE_KEY_FILE", nullptr);
    auto none = remote::load_fleet_key();
    ASSERT_OK(none);
    EXPECT_FALSE(*none);
  }
  {
    ScopedEnv env("JITCACHE_REMOTE_KEY_FILE", write("good.key", key).string());
    auto loaded = remote::load_fleet_key();
    ASSERT_OK(loaded);
    ASSERT_TRUE(*loaded);
    EXPECT_EQ(**loaded, key);
  }
  {
    ScopedEnv env("JITCACHE_REMOTE_KEY_FILE", write("short.key", std::string(31, 'k')).string());
    auto short_key = remote::load_fleet_key();
    ASSERT_FALSE(short_key);
    EXPECT_EQ(short_key.error().code, ErrorCode::invalid_input);
    EXPECT_NE(short_key.error().message.find("at least 32"), std::string::npos) << short_key.error().message;
    EXPECT_NE(short_key.error().message.find("JITCACHE_REMOTE_KEY_FILE"), std::string::npos);
  }
  {
    ScopedEnv env("JITCACHE_REMOTE_KEY_FILE", write("open.key", key, 0644).string());
    auto open_key = remote::load_fleet_key();
    ASSERT_FALSE(open_key);
    EXPECT_EQ(open_key.error().code, ErrorCode::unsafe);
    EXPECT_NE(open_key.error().message.find("JITCACHE_REMOTE_KEY_FILE"), std::string::npos);
    EXPECT_NE(open_key.error().message.find("chmod 600"), std::string::npos);
  }
}

}  // namespace
}  // namespace jitcache
