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
#include "support/sha256.hpp"
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

TEST_F(RegularFileTest, ReadsBytesUpToTheCapAndRefusesWhatIsNotAFile) {
  const fs::path file = write("bin", std::string("\x00\xff\x01", 3));
  const auto read = read_regular_file_bytes(file, 3);
  ASSERT_OK(read);
  EXPECT_EQ(*read, (std::vector<std::uint8_t>{0x00, 0xff, 0x01}));
  const auto over = read_regular_file_bytes(file, 2);
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().message,
            file.string() + ": file is 3 bytes, over the limit of 2 bytes for this kind of file");
  ASSERT_EQ(::mkfifo((dir() / "pipe").c_str(), 0600), 0);
  const testing::HangGuard guard(10);
  const auto fifo = read_regular_file_bytes(dir() / "pipe", 100);
  ASSERT_FALSE(fifo);
  EXPECT_EQ(fifo.error().message, (dir() / "pipe").string() + ": not a regular file (a FIFO)");
  EXPECT_EQ(read_regular_file_bytes(dir() / "absent", 100).error().code, ErrorCode::not_found);
}

// A file larger than the first guess of the buffer (its size at open) is read to its end.
TEST_F(RegularFileTest, ReadsAFileThatGrewSinceItWasOpened) {
  const fs::path file = write("grows", "start");
  const auto opened = RegularFile::open(file);
  ASSERT_OK(opened);
  std::ofstream(file, std::ios::binary | std::ios::app) << std::string(200'000, 'y');
  const auto all = opened->read_all(1 << 20);
  ASSERT_OK(all);
  EXPECT_EQ(all->size(), 200'005u);
  const auto capped = opened->read_all(100'000);
  ASSERT_FALSE(capped);
  EXPECT_EQ(capped.error().code, ErrorCode::invalid_input);
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

// The same rule below a directory descriptor, as the atomic writer checks it.
TEST_F(RegularFileTest, ReplaceableAtIsNothingOrARegularFile) {
  const UniqueFd root(::open(dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(root);
  write("old", "x");
  ASSERT_EQ(::mkfifo((dir() / "pipe").c_str(), 0600), 0);
  fs::create_symlink(dir() / "old", dir() / "link");
  EXPECT_OK(check_replaceable_at(root.get(), "new", "shown/new"));
  EXPECT_OK(check_replaceable_at(root.get(), "old", "shown/old"));
  const Status fifo = check_replaceable_at(root.get(), "pipe", "shown/pipe");
  ASSERT_FALSE(fifo);
  EXPECT_EQ(fifo.error().message, "shown/pipe: the output exists and is a FIFO, not a regular file; refusing "
                                  "to replace it (name a new file or a regular one)");
  const Status link = check_replaceable_at(root.get(), "link", "shown/link");
  ASSERT_FALSE(link);
  EXPECT_NE(link.error().message.find("is a symbolic link"), std::string::npos);
  const Status bad = check_replaceable_at(-1, "x", "shown/x");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().code, ErrorCode::io);
  EXPECT_NE(bad.error().message.find("shown/x: cannot stat the output"), std::string::npos);
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

// A file an input pins by sha256 (a checkpoint's sidecar): refused by identity however it is
// spelt, and by its bytes wherever they are; other files, and files too large to be the
// pinned one, are not.
TEST_F(RegularFileTest, OutputThatAPinNamesOrMatchesIsRefused) {
  const fs::path sidecar = write("sidecar.json", "pinned bytes");
  ASSERT_EQ(::link(sidecar.c_str(), (dir() / "hard.json").c_str()), 0);
  const fs::path copy = write("copy.json", "pinned bytes");
  const PinnedFile pin{sidecar, sha256_hex("pinned bytes"), "ckpt/config.json", 1 << 20};
  for (const fs::path& output : {sidecar, dir() / "." / "sidecar.json", dir() / "hard.json"}) {
    const Status refused = check_output_target(output, {}, std::span(&pin, 1));
    ASSERT_FALSE(refused) << output;
    EXPECT_EQ(refused.error().code, ErrorCode::invalid_input);
    EXPECT_EQ(refused.error().message,
              output.string() + ": the output is the same file as '" + sidecar.string() +
                  "', which ckpt/config.json pins by sha256 " + pin.sha256 +
                  "; replacing it would break ckpt/config.json (name another output)");
  }
  const Status bytes = check_output_target(copy, {}, std::span(&pin, 1));
  ASSERT_FALSE(bytes);
  EXPECT_EQ(bytes.error().message,
            copy.string() + ": the output holds the very bytes of '" + sidecar.string() +
                "', which ckpt/config.json pins by sha256 " + pin.sha256 +
                "; replacing it would break ckpt/config.json (name another output)");
  // A missing pinned file pins no path; other bytes, a new name and a file larger than the
  // pin's reader accepts are fine.
  const PinnedFile missing{dir() / "absent.json", pin.sha256, "ckpt/config.json", 4};
  EXPECT_OK(check_output_target(copy, {}, std::span(&missing, 1)));
  EXPECT_OK(check_output_target(write("other.json", "other bytes"), {}, std::span(&pin, 1)));
  EXPECT_OK(check_output_target(dir() / "new.json", {}, std::span(&pin, 1)));
}

}  // namespace
}  // namespace jitcache
