// Fault injection: every write step of publishing a blob and of committing the index
// fails in turn with ENOSPC, EIO and EROFS. Each fault must give a clear error or a
// logged warning, leave no partial entry (no row without its complete blob, no
// half-written blob, no temporary file), and a later run without the fault must recover
// and serve the entry from the cache.
#include <gtest/gtest.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <iostream>

#include "cache/store.hpp"
#include "cache_test_support.hpp"
#include "fault_vfs.hpp"
#include "store_checks.hpp"
#include "store_fixture.hpp"
#include "test_support.hpp"

namespace jitcache::cache {
namespace {

using namespace jitcache::cache::testing;
using jitcache::testing::LogCapture;

constexpr int k_errnos[] = {ENOSPC, EIO, EROFS};
constexpr WriteStep k_blob_steps[] = {WriteStep::temp_create, WriteStep::temp_write, WriteStep::temp_fsync,
                                      WriteStep::rename, WriteStep::dir_fsync};

class FaultTest : public StoreFixture {
 protected:
  std::filesystem::path round_root(const std::string& name) const { return dir() / name; }

  static std::unique_ptr<Store> open_at(const std::filesystem::path& root, StoreOptions options = {}) {
    auto store = Store::open(root, std::move(options));
    EXPECT_TRUE(store.has_value()) << store.error().to_string();
    return store ? std::move(*store) : nullptr;
  }

  // Nothing partial is visible: every row's blob is complete and verifies, every blob file
  // (a row's or an orphan's) holds exactly the bytes its name says, tmp/ is empty, and the
  // index itself is sound.
  static void expect_no_partial_state(const std::filesystem::path& root, const std::string& what) {
    SCOPED_TRACE(what);
    EXPECT_EQ(count_files(root / "tmp"), 0u) << "a temporary file was left behind";
    auto store = open_at(root);
    ASSERT_TRUE(store);
    auto report = store->verify();
    ASSERT_OK(report);
    EXPECT_TRUE(report->bad.empty()) << report->bad[0].problem;
    EXPECT_TRUE(report->integrity_problems.empty()) << report->integrity_problems[0];
    auto orphans = store->orphan_blobs();
    ASSERT_OK(orphans);
    for (const StoredBlob& blob : *orphans) {
      auto content = store->read_blob(blob.digest, blob.size);
      ASSERT_OK(content);
      EXPECT_TRUE(content->has_value()) << "a blob file that is not whole: " << content->error().detail;
    }
  }

  // With the fault gone: the entry is served (stored now if it was not before), and a
  // fresh process then finds it on disk.
  static void expect_recovery(const std::filesystem::path& root, const Facts& facts, const Bytes& bytes,
                              const std::string& what) {
    SCOPED_TRACE(what);
    {
      auto store = open_at(root);
      ASSERT_TRUE(store);
      CountingProducer producer{bytes};
      auto served = store->get_or_create(facts.key(), facts, producer.producer());
      ASSERT_OK(served);
      EXPECT_EQ(*served->bytes, bytes);
      EXPECT_LE(producer.calls, 1);
    }
    auto store = open_at(root);
    ASSERT_TRUE(store);
    auto hit = store->get(facts.key());
    ASSERT_OK(hit);
    ASSERT_TRUE(*hit) << "not stored after the fault was gone";
    EXPECT_EQ((*hit)->tier, Tier::disk);
    EXPECT_EQ(*(*hit)->bytes, bytes);
  }

  // What a dry run did through a FaultVfs: the calls of each kind, and their line for the
  // report (" open=2 write=5 ...").
  struct CountedCalls {
    explicit CountedCalls(const FaultVfs& vfs) {
      for (const VfsOp op : k_vfs_ops) {
        calls[static_cast<std::size_t>(op)] = vfs.count(op);
        line += std::string(" ") + to_string(op) + "=" + std::to_string(vfs.count(op));
      }
    }
    int of(VfsOp op) const { return calls[static_cast<std::size_t>(op)]; }

    std::array<int, k_vfs_ops.size()> calls{};
    std::string line;
  };

  // One fault of a counted run: call `nth` of kind `op` fails with `error_number`. `what`
  // says so (and traces every check made for it); `root` is a fresh cache root for it.
  struct Fault {
    VfsOp op;
    int nth;
    int error_number;
    std::string what;
    std::filesystem::path root;
  };
  struct FaultCount {
    int points = 0;  // calls that failed in turn
    int tried = 0;   // faults: points x errnos
  };

  // Every call the dry run counted fails in turn with each errno: `inject` gets each fault,
  // described as "<prefix><op> call <nth> fails with <reason>", at a root `<stem>-<i>`.
  // Stops at the first fatal failure, as a loop in the test body would.
  FaultCount for_each_fault(const CountedCalls& counted, const std::string& prefix, const std::string& stem,
                            const std::function<void(const Fault&)>& inject) const {
    FaultCount n;
    for (const VfsOp op : k_vfs_ops) {
      for (int nth = 0; nth < counted.of(op); ++nth) {
        ++n.points;
        for (const int error_number : k_errnos) {
          const Fault fault{op, nth, error_number,
                            prefix + to_string(op) + " call " + std::to_string(nth) + " fails with " +
                                std::strerror(error_number),
                            round_root(stem + "-" + std::to_string(n.tried++))};
          SCOPED_TRACE(fault.what);
          inject(fault);
          if (::testing::Test::HasFatalFailure()) return n;
        }
      }
    }
    return n;
  }

  std::uint64_t seed = jitcache::testing::test_seed("faults");
};

TEST_F(FaultTest, EveryBlobWriteStepFailingWithEveryErrno) {
  int tried = 0;
  for (const WriteStep step : k_blob_steps) {
    for (const int error_number : k_errnos) {
      const std::string what = std::string(to_string(step)) + " fails with " + std::strerror(error_number);
      SCOPED_TRACE(what);
      const auto root = round_root("blob-" + std::to_string(tried++));
      const Facts facts = sample_facts("blob");
      const Bytes bytes = make_bytes(70'000, seed + static_cast<std::uint64_t>(tried));
      {
        StoreOptions options;
        options.blob_fault_hook = [&](WriteStep at) { return at == step ? error_number : 0; };
        auto store = open_at(root, options);
        ASSERT_TRUE(store);
        // put: the error is returned, naming the file and the system's reason.
        auto put = store->put(facts.key(), facts, bytes, 5.0);
        ASSERT_FALSE(put.has_value());
        EXPECT_EQ(put.error().code, ErrorCode::io);
        EXPECT_NE(put.error().message.find(std::strerror(error_number)), std::string::npos)
            << put.error().message;
        EXPECT_NE(put.error().message.find(root.string()), std::string::npos) << put.error().message;
        // get_or_create: the caller is served, the failure logged.
        LogCapture log;
        CountingProducer producer{bytes};
        auto served = store->get_or_create(facts.key(), facts, producer.producer());
        ASSERT_OK(served);
        EXPECT_EQ(served->source, Source::produced);
        EXPECT_EQ(*served->bytes, bytes);
        EXPECT_EQ(log.count_containing("could not store"), 1u) << log.all();
        EXPECT_EQ(log.count_containing(std::strerror(error_number)), 1u) << log.all();
        auto entries = store->list();
        ASSERT_OK(entries);
        EXPECT_TRUE(entries->empty()) << "a row without its published blob";
      }
      expect_no_partial_state(root, what);
      expect_recovery(root, facts, bytes, what);
    }
  }
  std::cout << "[faults] blob: " << std::size(k_blob_steps) << " write steps x " << std::size(k_errnos)
            << " errnos = " << tried << " faults\n";
}

// The index side: a dry run counts the calls of each kind of write step the publish of one
// entry makes through SQLite; then each of them fails in turn, with each errno.
TEST_F(FaultTest, EveryIndexWriteStepOfAPublishFailingWithEveryErrno) {
  FaultVfs vfs;
  const Facts facts = sample_facts("index");
  const Bytes bytes = make_bytes(5'000, seed);
  const StoreOptions options = without_memory_tier();  // every read goes to the index and the blob
  auto publish = [&](const std::filesystem::path& root) {
    auto store = open_at(root, options);
    if (!store) return false;
    // An older entry, so that the faulted run writes to an index that holds data.
    const Facts before = sample_facts("before");
    EXPECT_OK(store->put(before.key(), before, make_bytes(100, seed + 1), 1.0));
    vfs.count_only();
    CountingProducer producer{bytes};
    auto served = store->get_or_create(facts.key(), facts, producer.producer());
    vfs.disarm();
    EXPECT_OK(served);
    if (served) {
      EXPECT_EQ(*served->bytes, bytes);
    }
    return true;
  };

  ASSERT_TRUE(publish(round_root("dry")));
  const CountedCalls counted(vfs);
  ASSERT_GT(counted.of(VfsOp::write), 0) << "the publish wrote nothing through SQLite?";

  const FaultCount n = for_each_fault(counted, "", "index", [&](const Fault& fault) {
    {
      auto store = open_at(fault.root, options);
      ASSERT_TRUE(store);
      const Facts before = sample_facts("before");
      ASSERT_OK(store->put(before.key(), before, make_bytes(100, seed + 1), 1.0));
      LogCapture log;
      vfs.arm(fault.op, fault.nth, sqlite_code_for(fault.op, fault.error_number), fault.error_number);
      CountingProducer producer{bytes};
      auto served = store->get_or_create(facts.key(), facts, producer.producer());
      const bool fired = vfs.fired();
      vfs.disarm();
      // The caller is always served; a failed commit is logged, naming the index.
      ASSERT_OK(served);
      EXPECT_EQ(*served->bytes, bytes);
      EXPECT_TRUE(fired) << "the same publish made fewer calls than the dry run";
      auto listed = store->list();
      if (!listed || listed->size() < 2) {
        EXPECT_GE(log.count_containing("could not store"), 1u) << log.all();
        EXPECT_GE(log.count_containing("index.db"), 1u) << log.all();
      }
    }
    expect_no_partial_state(fault.root, fault.what);
    expect_recovery(fault.root, facts, bytes, fault.what);
  });
  std::cout << "[faults] index: calls counted in one publish:" << counted.line << "; " << n.points
            << " injection points x " << std::size(k_errnos) << " errnos = " << n.tried << " faults\n";
}

// Closing the last connection checkpoints the WAL into index.db (writes, syncs, truncates):
// a failure there loses nothing, the WAL keeps the data and the next open recovers it.
TEST_F(FaultTest, EveryCheckpointStepAtCloseFailingWithEveryErrno) {
  FaultVfs vfs;
  const Facts facts = sample_facts("close");
  const Bytes bytes = make_bytes(3'000, seed);
  auto fill_and_close = [&](const std::filesystem::path& root,
                            std::optional<std::tuple<VfsOp, int, int>> fault) {
    auto store = open_at(root);
    ASSERT_TRUE(store);
    ASSERT_OK(store->put(facts.key(), facts, bytes, 1.0));
    if (fault) {
      const auto [op, nth, error_number] = *fault;
      vfs.arm(op, nth, sqlite_code_for(op, error_number), error_number);
    } else {
      vfs.count_only();
    }
    store.reset();
    vfs.disarm();
  };
  fill_and_close(round_root("dry"), std::nullopt);
  const CountedCalls counted(vfs);
  const FaultCount n = for_each_fault(counted, "close: ", "close", [&](const Fault& fault) {
    fill_and_close(fault.root, std::make_tuple(fault.op, fault.nth, fault.error_number));
    expect_no_partial_state(fault.root, fault.what);
    auto store = open_at(fault.root);
    ASSERT_TRUE(store);
    auto hit = store->get(facts.key());
    ASSERT_OK(hit);
    ASSERT_TRUE(*hit) << "the committed entry was lost";
    EXPECT_EQ(*(*hit)->bytes, bytes);
  });
  std::cout << "[faults] close: calls counted:" << counted.line << "; " << n.points << " injection points x "
            << std::size(k_errnos) << " errnos = " << n.tried << " faults\n";
}

// Creating the index of a fresh cache: opening index.db and its WAL, writing the schema.
// A fault there is an error naming the index (Store::open fails) or, where SQLite can do
// without the step, nothing; either way the next open creates a sound index.
TEST_F(FaultTest, EveryStepOfCreatingTheIndexFailingWithEveryErrno) {
  FaultVfs vfs;
  const Facts facts = sample_facts("create");
  const Bytes bytes = make_bytes(2'000, seed);
  vfs.count_only();
  { ASSERT_TRUE(open_at(round_root("dry"))); }
  vfs.disarm();
  const CountedCalls counted(vfs);
  int refused = 0;
  const FaultCount n = for_each_fault(counted, "create: ", "create", [&](const Fault& fault) {
    vfs.arm(fault.op, fault.nth, sqlite_code_for(fault.op, fault.error_number), fault.error_number);
    {
      auto store = Store::open(fault.root);
      if (!store) {
        ++refused;
        EXPECT_EQ(store.error().code, ErrorCode::database);
        EXPECT_NE(store.error().message.find("index.db"), std::string::npos) << store.error().message;
      }
    }
    vfs.disarm();
    expect_no_partial_state(fault.root, fault.what);
    expect_recovery(fault.root, facts, bytes, fault.what);
  });
  std::cout << "[faults] create: calls counted:" << counted.line << "; " << n.points << " injection points x "
            << std::size(k_errnos) << " errnos = " << n.tried << " faults (" << refused
            << " refused with an error, the rest absorbed by SQLite)\n";
}

}  // namespace
}  // namespace jitcache::cache
