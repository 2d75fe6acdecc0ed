// The one reader of regular files (support/regular_file.hpp): it never blocks on what sits
// at a path, refuses everything but a regular file by name, and the output check refuses
// to replace anything but a regular file or to overwrite an input.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "support/regular_file.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;

class RegularFileTest : public testing::TempDirTest {
 protected:
  fs::path write(const char* name, const std::string& text) {
    std::ofstream(dir() / name, std::ios::binary) << text;
    return dir() / name;
  }
};

TEST_F(RegularFileTest, ReadsAWholeFileUpToTheCap) {
  const fs::path file = write("f", std::string(100, 'x'));
  const auto read = read_regular_file(file, 100);
  ASSERT_OK(read);
  EXPECT_EQ(*read, std::string(100, 'x'));
  const auto refused = read_regular_file(file, 99);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::invalid_input);
  EXPECT_EQ(refused.error().message,
            file.string() + ": file is 100 bytes, over the limit of 99 bytes for this kind of file");
}

TEST_F(RegularFileTest, ReadsAnEmptyFileAndBytesAtOffsets) {
  ASSERT_OK(read_regular_file(write("empty", ""), 0));
  const auto opened = RegularFile::open(write("f", "0123456789"));
  ASSERT_OK(opened);
  EXPECT_EQ(opened->size(), 10u);
  char got[4] = {};
  ASSERT_OK(opened->read_at(3, got, 4));
  EXPECT_EQ(std::string(got, 4), "3456");
  const auto past_end = opened->read_at(8, got, 4);
  ASSERT_FALSE(past_end);
  EXPECT_NE(past_end.error().message.find("unexpected end of file"), std::string::npos);
}

TEST_F(RegularFileTest, AFifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo((dir() / "pipe").c_str(), 0600), 0);
  const testing::HangGuard guard(10);
  const auto refused = read_regular_file(dir() / "pipe", 100, "shown-name");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::invalid_input);
  EXPECT_EQ(refused.error().message, "shown-name: not a regular file (a FIFO)");
}

TEST_F(RegularFileTest, ASocketADeviceAndADirectoryAreRefusedByKind) {
  ASSERT_TRUE(testing::make_unix_socket(dir() / "sock"));
  ASSERT_TRUE(fs::create_directory(dir() / "sub"));
  const testing::HangGuard guard(10);
  struct Case {
    fs::path path;
    const char* kind;
  };
  // Reading /dev/null is harmless: only writes could damage it.
  for (const Case& c : {Case{dir() / "sock", "a socket"}, Case{"/dev/null", "a character device"},
                        Case{dir() / "sub", "a directory"}}) {
    const auto refused = read_regular_file(c.path, 100);
    ASSERT_FALSE(refused) << c.path;
    EXPECT_EQ(refused.error().code, ErrorCode::invalid_input) << c.path;
    EXPECT_EQ(refused.error().message, c.path.string() + ": not a regular file (" + c.kind + ")");
  }
}

TEST_F(RegularFileTest, ASymlinkIsFollowedOnlyWhenAsked) {
  const fs::path file = write("f", "data");
  fs::create_symlink(file, dir() / "link");
  ASSERT_OK(read_regular_file(dir() / "link", 10));
  const auto refused = read_regular_file(dir() / "link", 10, {}, FollowSymlinks::no);
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message,
            (dir() / "link").string() + ": not a regular file (a symbolic link)");
}

TEST_F(RegularFileTest, MissingIsNotFound) {
  const auto missing = RegularFile::open(dir() / "absent");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::not_found);
  EXPECT_NE(missing.error().message.find("absent: cannot open"), std::string::npos);
}

TEST_F(RegularFileTest, AdoptRefusesADescriptorOfAFifo) {
  ASSERT_EQ(::mkfifo((dir() / "pipe").c_str(), 0600), 0);
  const int fd = ::open((dir() / "pipe").c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const auto refused = RegularFile::adopt(fd, "the pipe");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().message, "the pipe: not a regular file (a FIFO)");
  EXPECT_EQ(::fcntl(fd, F_GETFD), -1) << "the descriptor is closed on failure";
}

// ---------------------------------------------------------------------------------------
// check_output_target: a pure check, so /dev/null can be named without any risk to it.

TEST_F(RegularFileTest, OutputMayBeNewOrARegularFile) {
  EXPECT_OK(check_output_target(dir() / "new"));
  const fs::path existing = write("old", "x");
  const fs::path input = write("in", "y");
  EXPECT_OK(check_output_target(existing, std::vector{input}));
  EXPECT_OK(check_output_target(dir() / "new", std::vector{input, dir() / "absent-input"}));
}

TEST_F(RegularFileTest, OutputThatIsNotARegularFileIsRefused) {
  ASSERT_EQ(::mkfifo((dir() / "pipe").c_str(), 0600), 0);
  ASSERT_TRUE(testing::make_unix_socket(dir() / "sock"));
  ASSERT_TRUE(fs::create_directory(dir() / "sub"));
  fs::create_symlink(write("target", "x"), dir() / "link");
  struct Case {
    fs::path path;
    const char* kind;
  };
  for (const Case& c : {Case{dir() / "pipe", "a FIFO"}, Case{dir() / "sock", "a socket"},
                        Case{"/dev/null", "a character device"}, Case{dir() / "sub", "a directory"},
                        Case{dir() / "link", "a symbolic link"}}) {
    const Status refused = check_output_target(c.path);
    ASSERT_FALSE(refused) << c.path;
    EXPECT_EQ(refused.error().code, ErrorCode::invalid_input);
    EXPECT_EQ(refused.error().message, c.path.string() + ": the output exists and is " + c.kind +
                                           ", not a regular file; refusing to replace it (name a "
                                           "new file or a regular one)");
  }
}

TEST_F(RegularFileTest, OutputThatIsAnInputIsRefusedHoweverSpelt) {
  const fs::path input = write("x.npy", "data");
  ASSERT_EQ(::link(input.c_str(), (dir() / "hard.npy").c_str()), 0);
  const fs::path spellings[] = {input, dir() / "." / "x.npy", dir() / "sub" / ".." / "x.npy",
                                dir() / "hard.npy"};
  ASSERT_TRUE(fs::create_directory(dir() / "sub"));
  for (const fs::path& output : spellings) {
    const Status refused = check_output_target(output, std::vector{dir() / "other", input});
    ASSERT_FALSE(refused) << output;
    EXPECT_EQ(refused.error().code, ErrorCode::invalid_input);
    EXPECT_EQ(refused.error().message,
              output.string() + ": the output is the same file as the input '" + input.string() +
                  "'; refusing to overwrite an input (name another output)");
  }
}

TEST_F(RegularFileTest, OutputCheckFromTheWorkingDirectory) {
  const fs::path before = fs::current_path();
  fs::current_path(dir());
  write("x", "data");
  const Status refused = check_output_target("./x", std::vector<fs::path>{"x"});
  fs::current_path(before);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("./x: the output is the same file as the input 'x'"),
            std::string::npos);
}

}  // namespace
}  // namespace jitcache
