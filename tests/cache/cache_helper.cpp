// A separate process for the cache tests:
//
//   cache_helper produce ROOT BARRIER_FD PRODUCE_LOG OUT ID DELAY_MS
//       Waits until BARRIER_FD reads end-of-file (all helpers are released together),
//       then get_or_create()s the entry of sample_facts(ID). The producer appends a line
//       to PRODUCE_LOG and sleeps DELAY_MS. Writes "<source> <digest of bytes>" to OUT.
//   cache_helper crash ROOT STEP ID
//       Publishes sample_facts(ID) and SIGKILLs itself at STEP (temp_written, renamed,
//       row_written) through the store's publish hook.
//   cache_helper open ROOT READY_FD BARRIER_FD ID
//       Writes one byte to READY_FD, waits until BARRIER_FD reads end-of-file, then opens
//       the store at ROOT (typically not yet created: ranks cold-starting together) and
//       get_or_create()s a small entry of sample_facts(ID). Prints the error on failure.
//   cache_helper hold ROOT READY_FILE ID
//       Starts producing sample_facts(ID), creates READY_FILE while holding the key's
//       lock, and sleeps until killed.
//
// Exit status: 0 done, 1 a cache call failed, 2 bad arguments.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "cache/store.hpp"
#include "cache_test_support.hpp"

using namespace jitcache;
using namespace jitcache::cache;

namespace {

int produce(int argc, char** argv) {
  if (argc != 8) return 2;
  const std::filesystem::path root = argv[2];
  const int barrier = std::atoi(argv[3]);
  const std::string log_path = argv[4];
  const std::string out_path = argv[5];
  const std::string id = argv[6];
  const int delay_ms = std::atoi(argv[7]);

  auto store = Store::open(root);
  if (!store) {
    std::fprintf(stderr, "open: %s\n", store.error().to_string().c_str());
    return 1;
  }
  char byte;
  while (::read(barrier, &byte, 1) > 0) {
  }
  const Facts facts = testing::sample_facts(id);
  auto result = (*store)->get_or_create(facts.key(), facts, [&]() -> Result<Produced> {
    const int fd = ::open(log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT, 0600);
    const std::string line = std::to_string(::getpid()) + "\n";
    (void)!::write(fd, line.data(), line.size());
    ::close(fd);
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    return Produced{testing::make_bytes(200 * 1024, std::hash<std::string>{}(id)), 250.0};
  });
  if (!result) {
    std::fprintf(stderr, "get_or_create: %s\n", result.error().to_string().c_str());
    return 1;
  }
  std::ofstream(out_path) << to_string(result->source) << " " << BlobDigest::of(*result->bytes).to_hex() << "\n";
  return 0;
}

int open_together(int argc, char** argv) {
  if (argc != 6) return 2;
  ::alarm(60);  // never hang a test run, whatever happens
  const int ready = std::atoi(argv[3]);
  const int barrier = std::atoi(argv[4]);
  const std::string id = argv[5];
  const char byte = 'r';
  if (::write(ready, &byte, 1) != 1) return 2;
  ::close(ready);
  char ignored;
  while (::read(barrier, &ignored, 1) > 0) {
  }
  auto store = Store::open(argv[2]);
  if (!store) {
    std::fprintf(stderr, "open: %s\n", store.error().to_string().c_str());
    return 1;
  }
  const Facts facts = testing::sample_facts(id);
  auto result = (*store)->get_or_create(facts.key(), facts, [&]() -> Result<Produced> {
    return Produced{testing::make_bytes(512, std::hash<std::string>{}(id)), 1.0};
  });
  if (!result) {
    std::fprintf(stderr, "get_or_create: %s\n", result.error().to_string().c_str());
    return 1;
  }
  return 0;
}

int crash(int argc, char** argv) {
  if (argc != 5) return 2;
  const std::string step = argv[3];
  StoreOptions options;
  options.publish_hook = [step](PublishStep at) {
    if (step == to_string(at)) ::kill(::getpid(), SIGKILL);
  };
  auto store = Store::open(argv[2], options);
  if (!store) return 1;
  const Facts facts = testing::sample_facts(argv[4]);
  auto put = (*store)->put(facts.key(), facts, testing::make_bytes(64 * 1024, 7), 10.0);
  return put ? 0 : 1;
}

int hold(int argc, char** argv) {
  if (argc != 5) return 2;
  const std::string ready = argv[3];
  auto store = Store::open(argv[2]);
  if (!store) return 1;
  const Facts facts = testing::sample_facts(argv[4]);
  auto result = (*store)->get_or_create(facts.key(), facts, [&]() -> Result<Produced> {
    std::ofstream(ready) << "holding\n";
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  });
  return result ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  const std::string mode = argv[1];
  if (mode == "produce") return produce(argc, argv);
  if (mode == "crash") return crash(argc, argv);
  if (mode == "open") return open_together(argc, argv);
  if (mode == "hold") return hold(argc, argv);
  return 2;
}
