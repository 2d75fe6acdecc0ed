// The owning descriptor and the whole-buffer loops (support/unique_fd.hpp).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "support/unique_fd.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

// The errno of a failed read, 0 for a successful one.
int errno_of(const std::expected<std::size_t, int>& read) { return read ? 0 : read.error(); }

bool is_open(int fd) { return ::fcntl(fd, F_GETFD) != -1; }

// A descriptor number that is certainly closed now.
int closed_fd_number() {
  const int fd = ::open("/", O_RDONLY | O_CLOEXEC);
  ::close(fd);
  return fd;
}

std::span<const std::byte> bytes_of(const std::string& text) { return std::as_bytes(std::span(text)); }

class UniqueFdTest : public testing::TempDirTest {
 protected:
  int open_file(const char* name, const std::string& content = {}) {
    std::ofstream(dir() / name, std::ios::binary) << content;
    return ::open((dir() / name).c_str(), O_RDWR | O_CLOEXEC);
  }
};

TEST_F(UniqueFdTest, ClosesWhenTheOwnerGoes) {
  const int raw = open_file("f");
  ASSERT_GE(raw, 0);
  {
    const UniqueFd fd(raw);
    EXPECT_TRUE(fd);
    EXPECT_EQ(fd.get(), raw);
    EXPECT_TRUE(is_open(raw));
  }
  EXPECT_FALSE(is_open(raw));
  EXPECT_FALSE(UniqueFd());
  EXPECT_EQ(UniqueFd().get(), -1);
}

TEST_F(UniqueFdTest, MovingTransfersOwnershipOnce) {
  const int first = open_file("a");
  const int second = open_file("b");
  UniqueFd a(first);
  UniqueFd b(std::move(a));
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): the moved-from state is the point
  EXPECT_EQ(b.get(), first);
  UniqueFd c(second);
  c = std::move(b);  // the descriptor c held is closed, b's is now c's
  EXPECT_FALSE(is_open(second));
  EXPECT_TRUE(is_open(first));
  EXPECT_EQ(c.get(), first);
  UniqueFd& same = c;
  c = std::move(same);  // assigning an owner to itself keeps the descriptor
  EXPECT_TRUE(is_open(first));
}

TEST_F(UniqueFdTest, ResetReleaseAndClose) {
  const int first = open_file("a");
  const int second = open_file("b");
  UniqueFd fd(first);
  fd.reset(second);
  EXPECT_FALSE(is_open(first));
  EXPECT_EQ(fd.get(), second);
  const int released = fd.release();
  EXPECT_FALSE(fd);
  EXPECT_TRUE(is_open(released)) << "release hands over without closing";
  UniqueFd again(released);
  EXPECT_EQ(again.close(), 0);
  EXPECT_FALSE(again);
  EXPECT_FALSE(is_open(released));
  EXPECT_EQ(again.close(), 0) << "closing nothing is not an error";
  UniqueFd stale(closed_fd_number());
  EXPECT_EQ(stale.close(), EBADF) << "close's own error is reported";
  EXPECT_FALSE(stale);
}

TEST_F(UniqueFdTest, WriteFullyAndReadFullyAtRoundTrip) {
  const UniqueFd fd(open_file("f"));
  std::string text(3 << 20, '\0');
  for (std::size_t i = 0; i < text.size(); ++i) text[i] = static_cast<char>(i * 7 + i / 1000);
  ASSERT_EQ(write_fully(fd.get(), bytes_of(text)), 0);
  EXPECT_EQ(fsync_retrying(fd.get()), 0);
  std::vector<std::byte> back(text.size());
  const auto n = read_fully_at(fd.get(), 0, back);
  ASSERT_TRUE(n.has_value()) << std::strerror(n.error());
  EXPECT_EQ(*n, text.size());
  EXPECT_EQ(std::memcmp(back.data(), text.data(), text.size()), 0);
  // At an offset, and past the end: short only at the end of the file.
  std::vector<std::byte> tail(100);
  EXPECT_EQ(read_fully_at(fd.get(), text.size() - 40, tail).value_or(0), 40u);
  EXPECT_EQ(read_fully_at(fd.get(), text.size() + 5, tail).value_or(1), 0u);
  EXPECT_EQ(read_fully_at(fd.get(), 0, {}).value_or(1), 0u);
}

TEST_F(UniqueFdTest, FailuresReportTheErrno) {
  const int stale = closed_fd_number();
  EXPECT_EQ(write_fully(stale, bytes_of("x")), EBADF);
  EXPECT_EQ(fsync_retrying(stale), EBADF);
  std::vector<std::byte> buffer(4);
  EXPECT_EQ(errno_of(read_fully_at(stale, 0, buffer)), EBADF);
  // A pipe has no offsets; a directory cannot be read as bytes.
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
  EXPECT_EQ(errno_of(read_fully_at(read_end.get(), 0, buffer)), ESPIPE);
  const UniqueFd directory(::open(dir().c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  EXPECT_EQ(errno_of(read_fully_at(directory.get(), 0, buffer)), EISDIR);
  // Writing to a descriptor opened for reading only.
  EXPECT_EQ(write_fully(directory.get(), bytes_of("x")), EBADF);
  EXPECT_EQ(write_fully(directory.get(), {}), 0) << "nothing to write is never an error";
}

}  // namespace
}  // namespace jitcache
