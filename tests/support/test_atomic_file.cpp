// The one atomic file writer (support/atomic_file.hpp): a reader sees the old file or the
// whole new one; a writer that is not committed leaves nothing; what the rename may land
// on is the caller's rule; every step can be made to fail, and each failure says which.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "support/atomic_file.hpp"
#include "test_support.hpp"

namespace jitcache {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Sets the process umask for a scope and restores the one before.
class UmaskScope {
 public:
  explicit UmaskScope(mode_t mask) : m_before(::umask(mask)) {}
  UmaskScope(const UmaskScope&) = delete;
  UmaskScope& operator=(const UmaskScope&) = delete;
  ~UmaskScope() { ::umask(m_before); }

 private:
  mode_t m_before;
};

class AtomicFileTest : public testing::TempDirTest {
 protected:
  // The names in a directory, sorted.
  static std::vector<std::string> names_in(const fs::path& directory) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(directory)) names.push_back(entry.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

  fs::path write(const char* name, const std::string& text) {
    std::ofstream(dir() / name, std::ios::binary) << text;
    return dir() / name;
  }

  static mode_t mode_of(const fs::path& path) {
    struct stat st {};
    EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
    return st.st_mode;
  }

  // A writer of `text` for `target`, ready to commit.
  static AtomicFileWriter written(const fs::path& target, const std::string& text,
                                  AtomicFileOptions options = {}) {
    auto writer = AtomicFileWriter::create(target, std::move(options));
    EXPECT_TRUE(writer.has_value()) << writer.error().to_string();
    EXPECT_OK(writer->write(text));
    return std::move(*writer);
  }
};

TEST_F(AtomicFileTest, CreatesANewFileAndLeavesNoTemporary) {
  AtomicFileWriter writer = written(dir() / "out.txt", "hello");
  const fs::path temp = writer.temp_path();
  EXPECT_EQ(temp.parent_path(), dir());
  EXPECT_TRUE(temp.filename().string().starts_with(".out.txt.tmp-")) << temp;
  EXPECT_FALSE(fs::exists(dir() / "out.txt")) << "nothing is visible before the commit";
  ASSERT_OK(writer.commit());
  EXPECT_EQ(read_text(dir() / "out.txt"), "hello");
  EXPECT_EQ(names_in(dir()), std::vector<std::string>{"out.txt"});
  EXPECT_TRUE(writer.temp_path().empty());
}

TEST_F(AtomicFileTest, ReplacesARegularFileWithANewOne) {
  const fs::path target = write("out.txt", "old content");
  struct stat before {};
  ASSERT_EQ(::stat(target.c_str(), &before), 0);
  AtomicFileWriter writer = written(target, "new");
  EXPECT_EQ(read_text(target), "old content") << "the old file stays whole until the rename";
  ASSERT_OK(writer.commit());
  EXPECT_EQ(read_text(target), "new");
  struct stat after {};
  ASSERT_EQ(::stat(target.c_str(), &after), 0);
  EXPECT_NE(before.st_ino, after.st_ino) << "a new file, renamed in; never the old one rewritten";
  EXPECT_EQ(names_in(dir()), std::vector<std::string>{"out.txt"});
}

TEST_F(AtomicFileTest, AWriterNotCommittedLeavesNothing) {
  const fs::path target = write("kept.txt", "before");
  {
    AtomicFileWriter writer = written(target, "never seen");
    ASSERT_OK(writer.finish());
    EXPECT_EQ(read_text(writer.temp_path()), "never seen");
  }
  EXPECT_EQ(read_text(target), "before");
  EXPECT_EQ(names_in(dir()), std::vector<std::string>{"kept.txt"});
  {
    AtomicFileWriter writer = written(dir() / "new.txt", "never seen");
  }
  EXPECT_EQ(names_in(dir()), std::vector<std::string>{"kept.txt"});
}

TEST_F(AtomicFileTest, AMovedWriterKeepsItsTemporaryFile) {
  auto created = AtomicFileWriter::create(dir() / "out.txt");
  ASSERT_OK(created);
  AtomicFileWriter moved(std::move(*created));
  created = std::unexpected(Error{});  // destroys the moved-from writer
  EXPECT_TRUE(fs::exists(moved.temp_path())) << "the moved-from writer removed it";
  ASSERT_OK(moved.write("data"));
  ASSERT_OK(moved.commit());
  EXPECT_EQ(read_text(dir() / "out.txt"), "data");
}

TEST_F(AtomicFileTest, PartsAreWrittenInOrder) {
  const std::uint8_t a[] = {'a', 'b'};
  const std::uint8_t b[] = {'c'};
  const std::span<const std::uint8_t> parts[] = {a, {}, b};
  ASSERT_OK(write_file_atomic(dir() / "abc", parts));
  EXPECT_EQ(read_text(dir() / "abc"), "abc");
  ASSERT_OK(write_file_atomic(dir() / "empty", {}));
  EXPECT_EQ(fs::file_size(dir() / "empty"), 0u);
}

TEST_F(AtomicFileTest, TheModeFollowsTheUmaskUnlessExact) {
  const UmaskScope umask(027);
  ASSERT_OK(write_file_atomic(dir() / "plain", {}));
  EXPECT_EQ(mode_of(dir() / "plain") & 07777, 0640u);
  AtomicFileOptions exact;
  exact.mode = 0604;
  exact.mode_rule = ModeRule::exact;
  AtomicFileWriter writer = written(dir() / "exact", "x", exact);
  ASSERT_OK(writer.commit());
  EXPECT_EQ(mode_of(dir() / "exact") & 07777, 0604u);
}

// ---------------------------------------------------------------------------------------
// What the rename may land on.

TEST_F(AtomicFileTest, RegularFileOnlyRefusesEveryOtherKindAndLeavesItAsItWas) {
  ASSERT_EQ(::mkfifo((dir() / "pipe").c_str(), 0600), 0);
  ASSERT_TRUE(testing::make_unix_socket(dir() / "sock"));
  ASSERT_TRUE(fs::create_directory(dir() / "sub"));
  fs::create_symlink(write("target", "x"), dir() / "link");
  const testing::HangGuard guard(10);
  const std::vector<std::string> before = names_in(dir());
  struct Case {
    const char* name;
    const char* kind;
  };
  for (const Case& c : {Case{"pipe", "a FIFO"}, Case{"sock", "a socket"}, Case{"sub", "a directory"},
                        Case{"link", "a symbolic link"}}) {
    SCOPED_TRACE(c.name);
    AtomicFileWriter writer = written(dir() / c.name, "data");
    const Status refused = writer.commit();
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().code, ErrorCode::invalid_input);
    EXPECT_EQ(refused.error().message, (dir() / c.name).string() + ": the output exists and is " + c.kind +
                                           ", not a regular file; refusing to replace it (name a new "
                                           "file or a regular one)");
  }
  EXPECT_TRUE(S_ISFIFO(mode_of(dir() / "pipe")));
  EXPECT_TRUE(S_ISSOCK(mode_of(dir() / "sock")));
  EXPECT_TRUE(S_ISDIR(mode_of(dir() / "sub")));
  EXPECT_TRUE(S_ISLNK(mode_of(dir() / "link")));
  EXPECT_EQ(read_text(dir() / "target"), "x");
  EXPECT_EQ(names_in(dir()), before) << "no temporary file left";
}

TEST_F(AtomicFileTest, AnythingReplacesAFifoAndASymlinkButNotItsTarget) {
  ASSERT_EQ(::mkfifo((dir() / "pipe").c_str(), 0600), 0);
  fs::create_symlink(write("target", "x"), dir() / "link");
  AtomicFileOptions options;
  options.replace = ReplaceRule::anything;
  for (const char* name : {"pipe", "link"}) {
    AtomicFileWriter writer = written(dir() / name, name, options);
    ASSERT_OK(writer.commit());
    EXPECT_TRUE(S_ISREG(mode_of(dir() / name))) << name;
    EXPECT_EQ(read_text(dir() / name), name);
  }
  EXPECT_EQ(read_text(dir() / "target"), "x") << "the link was replaced, not followed";
}

TEST_F(AtomicFileTest, ARenameOntoADirectoryFailsWhateverTheRule) {
  fs::create_directories(dir() / "taken" / "child");
  AtomicFileOptions options;
  options.replace = ReplaceRule::anything;
  Status failed;
  {
    AtomicFileWriter writer = written(dir() / "taken", "data", options);
    failed = writer.commit();
  }
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, ErrorCode::io);
  EXPECT_EQ(failed.error().message.rfind((dir() / "taken").string() +
                                             ": cannot rename the temporary file into place: ",
                                         0),
            0u)
      << failed.error().message;
  EXPECT_TRUE(fs::is_directory(dir() / "taken" / "child"));
  EXPECT_EQ(names_in(dir()), std::vector<std::string>{"taken"});
}

// ---------------------------------------------------------------------------------------
// Directories: missing, vanishing, and a temporary directory apart from the destination.

TEST_F(AtomicFileTest, AMissingDirectoryIsNamed) {
  const auto refused = AtomicFileWriter::create(dir() / "no" / "x.npy");
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::io);
  EXPECT_EQ(refused.error().message, (dir() / "no" / "x.npy").string() +
                                         ": cannot create a temporary file in '" + (dir() / "no").string() +
                                         "': " + std::strerror(ENOENT));
  EXPECT_FALSE(AtomicFileWriter::create(dir() / "x" / ".."));
  EXPECT_FALSE(AtomicFileWriter::create(""));
}

TEST_F(AtomicFileTest, ADirectoryThatVanishesBeforeTheCommitFailsCleanly) {
  fs::create_directory(dir() / "sub");
  AtomicFileWriter writer = written(dir() / "sub" / "out", "data");
  fs::remove_all(dir() / "sub");
  const Status failed = writer.commit();
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, ErrorCode::io);
  EXPECT_NE(failed.error().message.find(std::strerror(ENOENT)), std::string::npos) << failed.error().message;
  EXPECT_TRUE(names_in(dir()).empty());
}

TEST_F(AtomicFileTest, ATemporaryDirectoryApartFromTheDestination) {
  fs::create_directory(dir() / "tmp");
  fs::create_directory(dir() / "dest");
  const UniqueFd tmp(::open((dir() / "tmp").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  const UniqueFd dest(::open((dir() / "dest").c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  AtomicFileOptions options;
  options.temp_stem = "blob";
  auto writer = AtomicFileWriter::create_in(DirRef{tmp.get(), dir() / "tmp"}, options);
  ASSERT_OK(writer);
  EXPECT_TRUE(writer->temp_path().filename().string().starts_with("blob.tmp-")) << writer->temp_path();
  EXPECT_EQ(writer->temp_path().parent_path(), dir() / "tmp");
  ASSERT_OK(writer->write("payload"));
  const Status no_target = writer->commit();
  ASSERT_FALSE(no_target);
  EXPECT_EQ(no_target.error().code, ErrorCode::invalid_argument);
  ASSERT_OK(writer->commit_into(DirRef{dest.get(), dir() / "dest"}, "named"));
  EXPECT_EQ(read_text(dir() / "dest" / "named"), "payload");
  EXPECT_TRUE(names_in(dir() / "tmp").empty());
  // Used up: nothing more can be written or committed.
  EXPECT_EQ(writer->write("more").error().code, ErrorCode::invalid_argument);
  EXPECT_FALSE(writer->commit_into(DirRef{dest.get(), dir() / "dest"}, "again"));
  EXPECT_FALSE(fs::exists(dir() / "dest" / "again"));
}

TEST_F(AtomicFileTest, CreateInABadDescriptorFails) {
  const auto refused = AtomicFileWriter::create_in(DirRef{-1, dir() / "gone"}, {});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::io);
  EXPECT_NE(refused.error().message.find((dir() / "gone").string()), std::string::npos);
}

// ---------------------------------------------------------------------------------------
// Every step failing (the test seam), in both wordings.

struct StepFailure {
  AtomicWriteStep step;
  const char* target_first;     // what the message starts with after "<target>: "
  const char* operation_first;  // what it starts with
  bool committed;               // the file is in place although the step failed
};

constexpr StepFailure k_step_failures[] = {
    {AtomicWriteStep::temp_create, "cannot create a temporary file in '", "creating a temporary file in ",
     false},
    {AtomicWriteStep::temp_write, "write failed: ", "writing ", false},
    {AtomicWriteStep::temp_fsync, "fsync failed: ", "fsync ", false},
    {AtomicWriteStep::rename, "cannot rename the temporary file into place: ", "renaming ", false},
    {AtomicWriteStep::dir_fsync, "written, but cannot fsync its directory '", "fsync ", true},
};

TEST_F(AtomicFileTest, EveryStepCanFailAndSaysWhich) {
  for (const ErrorWording wording : {ErrorWording::target_first, ErrorWording::operation_first}) {
    for (const StepFailure& f : k_step_failures) {
      SCOPED_TRACE(std::string(to_string(f.step)) +
                   (wording == ErrorWording::target_first ? ", target first" : ", operation first"));
      const fs::path root =
          dir() / (std::string(to_string(f.step)) + std::to_string(static_cast<int>(wording)));
      fs::create_directory(root);
      const fs::path target = root / "out";
      AtomicFileOptions options;
      options.wording = wording;
      options.fault = [&](AtomicWriteStep at) { return at == f.step ? EIO : 0; };
      auto writer = AtomicFileWriter::create(target, options);
      Status status = writer ? Status() : Status(std::unexpected(writer.error()));
      if (status) status = writer->write("some data");
      if (status) status = writer->commit();
      ASSERT_FALSE(status);
      EXPECT_EQ(status.error().code, ErrorCode::io);
      const std::string& message = status.error().message;
      const std::string expected_start = wording == ErrorWording::target_first
                                             ? target.string() + ": " + f.target_first
                                             : std::string(f.operation_first);
      EXPECT_EQ(message.rfind(expected_start, 0), 0u) << message;
      EXPECT_NE(message.find(std::strerror(EIO)), std::string::npos) << message;
      EXPECT_NE(message.find(root.string()), std::string::npos) << message;
      if (writer) writer = std::unexpected(Error{});  // the writer goes: its temporary with it
      if (f.committed) {
        EXPECT_EQ(read_text(target), "some data");
        EXPECT_EQ(names_in(root), std::vector<std::string>{"out"});
      } else {
        EXPECT_TRUE(names_in(root).empty()) << "a temporary file or a partial output was left";
      }
    }
  }
}

TEST_F(AtomicFileTest, AFailingWriteHasWrittenPartOfItsData) {
  AtomicFileOptions options;
  options.fault = [](AtomicWriteStep at) { return at == AtomicWriteStep::temp_write ? ENOSPC : 0; };
  auto writer = AtomicFileWriter::create(dir() / "out", options);
  ASSERT_OK(writer);
  const Status failed = writer->write(std::string(1000, 'x'));
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().message, (dir() / "out").string() + ": write failed: " + std::strerror(ENOSPC));
  EXPECT_EQ(fs::file_size(writer->temp_path()), 500u) << "as a full disk does";
}

TEST_F(AtomicFileTest, OnlyTheSyncsTheRuleAsksForAreMade) {
  struct Case {
    SyncRule sync;
    std::vector<AtomicWriteStep> steps;
  };
  using S = AtomicWriteStep;
  for (const Case& c : {Case{SyncRule::none, {S::temp_create, S::temp_write, S::rename}},
                        Case{SyncRule::file, {S::temp_create, S::temp_write, S::temp_fsync, S::rename}},
                        Case{SyncRule::file_and_directory,
                             {S::temp_create, S::temp_write, S::temp_fsync, S::rename, S::dir_fsync}}}) {
    std::vector<AtomicWriteStep> seen;
    AtomicFileOptions options;
    options.sync = c.sync;
    options.fault = [&](AtomicWriteStep at) {
      seen.push_back(at);
      return 0;
    };
    AtomicFileWriter writer = written(dir() / "out", "data", options);
    ASSERT_OK(writer.commit());
    EXPECT_EQ(seen, c.steps) << static_cast<int>(c.sync);
  }
}

TEST_F(AtomicFileTest, TheOperationFirstWordingNamesEachFile) {
  AtomicFileOptions options;
  options.wording = ErrorWording::operation_first;
  options.fault = [](AtomicWriteStep at) { return at == AtomicWriteStep::rename ? EROFS : 0; };
  AtomicFileWriter writer = written(dir() / "out", "data", options);
  const std::string temp = writer.temp_path().string();
  const Status failed = writer.commit();
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().message,
            "renaming " + temp + " to " + (dir() / "out").string() + ": " + std::strerror(EROFS));
}

}  // namespace
}  // namespace jitcache
