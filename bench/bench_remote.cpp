// Remote tier figures (issue 13), against a redis-server this program starts on a free
// loopback port:
//   1. a remote hit of a 40 KiB entry: GETRANGE, signature and digest checks, and the
//      backfill into the local disk tier (target <= 300 us), with its parts measured apart
//      (the round trip, decode + HMAC + digest, the local index miss, the disk publish);
//   2. what a reachable but empty remote adds to a miss (get miss, lease SET NX PX,
//      recheck, upload, lease release), against the same miss with no remote;
//   3. what a dead remote adds to 100 lookups: nothing listening (connection refused), a
//      connect that is never answered (a listener whose accept queue is full), a server
//      that accepts but never answers (a silent listener; a real server under CLIENT
//      PAUSE): the first lookup pays one timeout, the rest nothing while the breaker is open;
//   4. a fleet cold start: 4 nodes (cache directories) x 8 `jitcache warm` processes on a
//      cold remote (target: compiles == distinct variants, fleet-wide), against the same
//      fleet without the remote (each node compiles every variant).
// The blackhole is local on purpose: a non-routable address (10.255.255.1) is not dead
// everywhere (a sandbox's proxy may accept the connect), a full accept queue is.
// The backfill publishes the blob with full durability, as the runtime does: two fsyncs
// (file, directory), whose cost is the disk's, not the remote tier's; the table shows
// the same hit with relaxed durability and without the disk, and each part alone. Wall
// time on a busy machine includes waiting for a turn (redis-server, the disk); the table
// gives this thread's CPU time beside it.
// A summary table follows the benchmark output. Every figure also checks what it
// measures (a hit came from the remote, the fleet compiled each variant once); a failed
// check makes the program exit 1.
//
//   bench_remote [--smoke] [--checkpoint=DIR] [--jitcache-cli=PATH] [benchmark flags]
//
// --smoke: a few iterations of each, and a fleet of 2 nodes x 2 processes (ctest's
// bench_remote_smoke).
#include <benchmark/benchmark.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_support.hpp"
#include "cli_bench_main.hpp"
#include "cache/store.hpp"
#include "jitcache/log.hpp"
#include "redis_server.hpp"
#include "remote/remote_tier.hpp"
#include "remote/signed_entry.hpp"
#include "support/enum_names.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using namespace jitcache;
using namespace jitcache::cache;
using Clock = std::chrono::steady_clock;

constexpr std::size_t k_entry_bytes = 40 << 10;
constexpr const char* k_target = "sm_90";

struct Config : bench::CliBenchPaths {
  bool smoke = false;
};
Config g_config;

std::unique_ptr<testing::RedisServer> g_server;
std::string g_fleet_key;  // the bytes of g_key_file
fs::path g_key_file;
std::map<std::string, std::vector<double>> g_samples;
std::vector<std::string> g_failures;

using bench::us_since;

// CPU time of the calling thread: what the lookup itself costs, apart from waiting for
// redis-server, the disk or a turn on a loaded machine (wall time includes all three).
double thread_cpu_us() { return bench::cpu_us(CLOCK_THREAD_CPUTIME_ID); }

// One sample of a figure: wall time under `name`, this thread's CPU time under name.cpu.
struct Timer {
  Clock::time_point wall = Clock::now();
  double cpu = thread_cpu_us();
  void record(const std::string& name) const {
    const double cpu_now = thread_cpu_us();
    g_samples[name].push_back(us_since(wall));
    g_samples[name + ".cpu"].push_back(cpu_now - cpu);
  }
};

void fail(benchmark::State& state, const std::string& what) {
  g_failures.push_back(what);
  state.SkipWithError(what.c_str());
}

// Facts of the shape the kernel cache stores, one distinct key per id.
// A fresh id for every entry this program makes: no lookup finds an earlier one by chance.
Facts fresh_facts(const std::string& label) {
  static int counter = 0;
  return bench::sample_kernel_facts(label + "-" + std::to_string(++counter), k_target, "bf16");
}

const Bytes& entry_bytes() {
  static const Bytes bytes = [] {
    std::mt19937_64 rng(13);
    Bytes b(k_entry_bytes);
    for (auto& x : b) x = static_cast<std::byte>(rng() & 0xFF);
    return b;
  }();
  return bytes;
}

// A producer that costs nothing but the copy of its bytes: the miss figures measure the
// cache, not a compiler.
const Producer& trivial_producer() {
  static const Producer producer = [] { return Result<Produced>(Produced{entry_bytes(), 1.0}); };
  return producer;
}

// The remote tier as the runtime opens it, with the client's default timeouts (connect
// 200 ms, operation 500 ms, breaker 30 s).
std::shared_ptr<remote::RemoteTier> remote_tier(const std::string& host, int port) {
  remote::RemoteTierOptions options;
  options.redis.url.host = host;
  options.redis.url.port = port;
  options.fleet_key = g_fleet_key;
  return std::make_shared<remote::RemoteTier>(std::move(options));
}
std::shared_ptr<remote::RemoteTier> live_tier() { return remote_tier("127.0.0.1", g_server->port()); }

std::unique_ptr<Store> open_store(const std::string& name, Durability durability,
                                  std::shared_ptr<StorageTier> extra = nullptr) {
  StoreOptions options;
  options.durability = durability;
  if (extra) options.extra_tiers.push_back(std::move(extra));
  auto store = Store::open(bench::fresh_dir(g_config.scratch, name), options);
  if (!store) {
    std::fprintf(stderr, "bench_remote: opening a store: %s\n", store.error().to_string().c_str());
    std::exit(2);
  }
  return std::move(*store);
}

const char* durability_name(Durability d) { return d == Durability::full ? "full" : "relaxed"; }

int iterations(int full) { return g_config.smoke ? std::min(full, 10) : full; }

// ---- 1. a remote hit and its parts ---------------------------------------------------------

// Every lookup is a remote hit: node A uploaded one entry per iteration beforehand, and
// this store (node B, empty disk) has never seen any of them, so each get misses memory
// and disk, reads and verifies the remote value and publishes it on disk.
void BM_RemoteHit_Backfill(benchmark::State& state, Durability durability) {
  const std::size_t n = static_cast<std::size_t>(state.max_iterations);
  auto uploader = live_tier();
  std::vector<CacheKey> keys;
  for (std::size_t i = 0; i < n; ++i) {
    const Facts facts = fresh_facts("hit");
    if (auto up = uploader->upload(facts.key(), facts, entry_bytes(), 1500.0); !up || !*up)
      return fail(state, "uploading the entries for the remote-hit figure failed");
    keys.push_back(facts.key());
  }
  auto store = open_store("hit", durability, live_tier());
  const std::string name = std::string("hit.backfill_") + durability_name(durability);
  std::size_t i = 0;
  for (auto _ : state) {
    const Timer t;
    auto hit = store->get(keys[i++]);
    t.record(name);
    if (!hit || !*hit || (*hit)->tier != Tier::remote || (*hit)->bytes->size() != k_entry_bytes)
      return fail(state, "a lookup that should have been a remote hit was not");
  }
  // The backfill happened: the entries are on disk now.
  for (const CacheKey& key : keys)
    if (auto on_disk = store->contains(key); !on_disk || !*on_disk)
      return fail(state, "a remote hit was not backfilled into the disk tier");
  state.SetLabel(std::string("40 KiB, disk durability ") + durability_name(durability));
}

// The same lookup without the disk: RemoteTier::get reads and verifies the value.
void BM_RemoteHit_NoBackfill(benchmark::State& state) {
  auto tier = live_tier();
  const Facts facts = fresh_facts("nobackfill");
  if (auto up = tier->upload(facts.key(), facts, entry_bytes(), 1500.0); !up || !*up)
    return fail(state, "upload failed");
  for (auto _ : state) {
    const Timer t;
    auto hit = tier->get(facts.key());
    t.record("hit.no_backfill");
    if (!hit || !*hit || (*hit)->bytes->size() != k_entry_bytes) return fail(state, "the remote get missed");
  }
  state.SetLabel("RemoteTier::get: GETRANGE + STRLEN, decode, HMAC, digest");
}

// Part: the round trip that carries the value (the tier's own pipeline).
void BM_Part_GetRangeRoundTrip(benchmark::State& state) {
  auto tier = live_tier();
  const Facts facts = fresh_facts("getrange");
  if (auto up = tier->upload(facts.key(), facts, entry_bytes(), 1500.0); !up || !*up)
    return fail(state, "upload failed");
  const std::string name = tier->entry_name(facts.key());
  const std::string last = std::to_string(tier->options().max_entry_bytes);
  for (auto _ : state) {
    const Timer t;
    auto replies = tier->client().pipeline({{"GETRANGE", name, "0", last}, {"STRLEN", name}});
    t.record("part.getrange");
    if (!replies || (*replies)[0].str.size() < k_entry_bytes) return fail(state, "GETRANGE failed");
  }
  state.SetLabel("GETRANGE + STRLEN, one pipeline");
}

// Part: decoding and verifying a value already in memory.
void BM_Part_DecodeVerify(benchmark::State& state) {
  const Facts facts = fresh_facts("decode");
  const std::string name = "jitcache:v1:entry:" + facts.key().to_hex();
  const std::string value = remote::encode_signed_entry(name, g_fleet_key, facts, entry_bytes(), 1500.0);
  for (auto _ : state) {
    const Timer t;
    auto entry = remote::decode_signed_entry(name, g_fleet_key, value, facts.key());
    t.record("part.decode");
    if (!entry) return fail(state, "decode failed: " + entry.error().to_string());
    benchmark::DoNotOptimize(entry);
  }
  state.SetLabel("facts JSON, HMAC-SHA256 over 40 KiB, XXH3-128 digest");
}

// Part: the local lookup that precedes the remote one (memory and index miss).
void BM_Part_LocalMiss(benchmark::State& state) {
  auto store = open_store("localmiss", Durability::full);
  for (int i = 0; i < 64; ++i) {
    const Facts facts = fresh_facts("present");
    if (!store->put(facts.key(), facts, entry_bytes(), 1.0)) return fail(state, "put failed");
  }
  std::vector<CacheKey> absent;
  for (int i = 0; i < 256; ++i) absent.push_back(fresh_facts("absent").key());
  std::size_t i = 0;
  for (auto _ : state) {
    const Timer t;
    auto miss = store->get(absent[i++ % absent.size()]);
    t.record("part.local_miss");
    if (!miss || *miss) return fail(state, "the local lookup did not miss");
  }
}

// Part: publishing a 40 KiB entry on disk, what the backfill does (blob file written and,
// with full durability, fsync'ed with its directory; then the index row).
void BM_Part_DiskPublish(benchmark::State& state, Durability durability) {
  auto store = open_store("publish", durability);
  const std::string name = std::string("part.publish_") + durability_name(durability);
  for (auto _ : state) {
    state.PauseTiming();
    const Facts facts = fresh_facts("publish");
    const CacheKey key = facts.key();
    state.ResumeTiming();
    const Timer t;
    auto stored = store->put(key, facts, entry_bytes(), 1.0);
    t.record(name);
    if (!stored) return fail(state, "put failed: " + stored.error().to_string());
  }
  state.SetLabel(std::string("40 KiB, durability ") + durability_name(durability));
}

// ---- 2. a miss with an empty remote --------------------------------------------------------

// get_or_create of a key no tier has, with a producer that costs nothing: with the remote,
// the miss also asks it, takes and releases the lease (after rechecking) and uploads.
// Relaxed durability for both stores, so that the difference is the remote's, not fsync
// noise; and the two misses alternate, one of each per iteration, so that both see the
// same machine (the cost of creating files drifts as the filesystem churns). Memory-only
// stores give the remote's share without any disk at all.
void BM_Miss(benchmark::State& state, bool on_disk) {
  std::unique_ptr<Store> plain, shared;
  if (on_disk) {
    plain = open_store("miss-plain", Durability::relaxed);
    shared = open_store("miss-remote", Durability::relaxed, live_tier());
  } else {
    plain = Store::open_memory_only();
    StoreOptions options;
    options.extra_tiers.push_back(live_tier());
    shared = Store::open_memory_only(options);
  }
  const std::string prefix = on_disk ? "miss." : "miss_memory.";
  bool remote_first = false;
  for (auto _ : state) {
    remote_first = !remote_first;
    for (int turn = 0; turn < 2; ++turn) {
      const bool with_remote = (turn == 0) == remote_first;
      const Facts facts = fresh_facts("miss");
      const CacheKey key = facts.key();
      Store& store = with_remote ? *shared : *plain;
      const Timer t;
      auto fetched = store.get_or_create(key, facts, trivial_producer());
      t.record(prefix + (with_remote ? "empty_remote" : "no_remote"));
      if (!fetched || fetched->source != Source::produced) return fail(state, "the miss was not produced");
    }
  }
  const Counters c = shared->session_counters();
  if (c.remote_uploads != static_cast<std::uint64_t>(state.iterations()))
    return fail(state, "the misses were not all uploaded");
  state.SetLabel("one miss without and one with a reachable, empty remote");
}

// The remote operations of a miss, one at a time.
void BM_Part_RemoteGetMiss(benchmark::State& state) {
  auto tier = live_tier();
  const CacheKey key = fresh_facts("getmiss").key();
  for (auto _ : state) {
    const Timer t;
    auto got = tier->get(key);
    t.record("part.remote_get_miss");
    if (!got || *got) return fail(state, "the remote get did not miss");
  }
}

void BM_Part_ClaimRelease(benchmark::State& state) {
  auto tier = live_tier();
  for (auto _ : state) {
    state.PauseTiming();
    const CacheKey key = fresh_facts("claim").key();
    state.ResumeTiming();
    const Timer t;
    {
      auto claim = tier->claim(key, "bench");
      if (!claim || !claim->lease) return fail(state, "no lease");
    }  // released here: the renewer thread joined, EVAL of the release script
    t.record("part.claim_release");
  }
  state.SetLabel("SET NX PX, renewer thread, recheck GETRANGE, release EVAL");
}

void BM_Part_Upload(benchmark::State& state) {
  auto tier = live_tier();
  for (auto _ : state) {
    state.PauseTiming();
    const Facts facts = fresh_facts("upload");
    state.ResumeTiming();
    const Timer t;
    auto up = tier->upload(facts.key(), facts, entry_bytes(), 1.0);
    t.record("part.upload");
    if (!up || !*up) return fail(state, "upload failed");
  }
  state.SetLabel("sign + SET NX of 40 KiB");
}

// ---- 3. a dead remote -----------------------------------------------------------------------

// A loopback TCP endpoint that misbehaves in one way, for as long as it lives.
class DeadEndpoint {
 public:
  enum class Kind { refused, unanswered_connect, silent };
  explicit DeadEndpoint(Kind kind) {
    m_listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (::bind(m_listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::getsockname(m_listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0)
      std::abort();
    m_port = ntohs(addr.sin_port);
    switch (kind) {
      case Kind::refused:
        // Bound, never listening: the port stays ours, and a connect is refused (RST).
        break;
      case Kind::silent:
        // Listening, never accepting, never reading: the kernel completes the handshake,
        // so the client connects and then waits for a reply that never comes.
        if (::listen(m_listener, 64) != 0) std::abort();
        break;
      case Kind::unanswered_connect:
        // An accept queue of one, filled: the kernel drops every further SYN, so a
        // connect is never answered (what a blackholed address does).
        if (::listen(m_listener, 0) != 0) std::abort();
        for (int i = 0; i < 2; ++i) {
          const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
          (void)::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
          m_fillers.push_back(fd);
        }
        ::usleep(50'000);  // the fillers' handshakes complete
        break;
    }
  }
  ~DeadEndpoint() {
    for (int fd : m_fillers) ::close(fd);
    ::close(m_listener);
  }
  int port() const { return m_port; }

 private:
  int m_listener = -1;
  int m_port = 0;
  std::vector<int> m_fillers;
};

enum class Dead { none, refused, unanswered_connect, silent, paused };

const char* dead_name(Dead dead) {
  return enum_name(dead, {"none", "refused", "unanswered_connect", "silent", "paused"});
}

// 100 lookups that miss locally (each produced by the trivial producer), with a remote that
// is dead in the given way: what the warm of 100 variants would pay for it.
void BM_DeadRemote(benchmark::State& state, Dead dead) {
  const int lookups = g_config.smoke ? 10 : 100;
  std::unique_ptr<DeadEndpoint> endpoint;
  std::unique_ptr<testing::RedisServer> paused_server;
  std::shared_ptr<remote::RemoteTier> tier;
  switch (dead) {
    case Dead::none: break;
    case Dead::refused:
      endpoint = std::make_unique<DeadEndpoint>(DeadEndpoint::Kind::refused);
      break;
    case Dead::unanswered_connect:
      endpoint = std::make_unique<DeadEndpoint>(DeadEndpoint::Kind::unanswered_connect);
      break;
    case Dead::silent:
      endpoint = std::make_unique<DeadEndpoint>(DeadEndpoint::Kind::silent);
      break;
    case Dead::paused: {
      // A server of its own, so the pause holds up nothing else.
      auto started = testing::RedisServer::start();
      if (!started) return fail(state, started.error().to_string());
      paused_server = std::move(*started);
      break;
    }
  }
  if (endpoint) tier = remote_tier("127.0.0.1", endpoint->port());
  if (paused_server) tier = remote_tier("127.0.0.1", paused_server->port());
  auto store = open_store(std::string("dead-") + dead_name(dead), Durability::relaxed, tier);
  std::vector<Facts> facts;
  for (int i = 0; i < lookups; ++i) facts.push_back(fresh_facts("dead"));
  for (auto _ : state) {
    if (paused_server) {
      if (auto paused = paused_server->pause(std::chrono::milliseconds(5000)); !paused)
        return fail(state, "CLIENT PAUSE failed: " + paused.error().to_string());
    }
    std::vector<double> each;
    const auto start = Clock::now();
    for (const Facts& f : facts) {
      const auto t = Clock::now();
      auto fetched = store->get_or_create(f.key(), f, trivial_producer());
      each.push_back(us_since(t));
      if (!fetched || fetched->source != Source::produced) return fail(state, "a lookup failed");
    }
    const double total = us_since(start);
    state.SetIterationTime(total / 1e6);
    const std::string name = std::string("dead.") + dead_name(dead);
    g_samples[name + ".first"].push_back(each.front());
    g_samples[name + ".rest_mean"].push_back(
        std::accumulate(each.begin() + 1, each.end(), 0.0) / static_cast<double>(each.size() - 1));
    g_samples[name + ".rest_max"].push_back(*std::max_element(each.begin() + 1, each.end()));
    g_samples[name + ".total"].push_back(total);
  }
  if (tier) {
    const Counters c = store->session_counters();
    if (c.remote_hits + c.remote_uploads != 0) return fail(state, "a dead remote served or stored something");
  }
  state.SetLabel(std::to_string(lookups) + " lookups, remote " + dead_name(dead));
}

// ---- 4. a fleet cold start -----------------------------------------------------------------

std::vector<std::string> child_environment(bool with_remote) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry = *e;
    // Nothing of this shell's remote or cache settings reaches the nodes.
    if (entry.starts_with("JITCACHE_REMOTE") || entry.starts_with("JITCACHE_DIR=")) continue;
    env.emplace_back(entry);
  }
  if (with_remote) env.push_back("JITCACHE_REMOTE_KEY_FILE=" + g_key_file.string());
  return env;
}

// `nodes` cache directories, `per_node` processes each, all started at once, every one a
// cold `jitcache warm` of the bundled checkpoint; with the remote, on an emptied Redis.
void BM_FleetColdStart(benchmark::State& state, bool with_remote) {
  const int nodes = g_config.smoke ? 2 : 4;
  const int per_node = g_config.smoke ? 2 : 8;
  if (g_config.cli.empty() || !fs::exists(g_config.cli))
    return fail(state, "no jitcache CLI at '" + g_config.cli.string() + "'; pass --jitcache-cli=PATH");
  const std::vector<std::string> env = child_environment(with_remote);
  const std::string key = with_remote ? "fleet.remote" : "fleet.local";
  for (auto _ : state) {
    if (with_remote) {
      if (auto flushed = g_server->command({"FLUSHALL"}); !flushed)
        return fail(state, "FLUSHALL failed: " + flushed.error().to_string());
    }
    const fs::path fleet = bench::fresh_dir(g_config.scratch, with_remote ? "fleet-remote" : "fleet-local");
    std::vector<bench::ChildProcess> children;
    const auto start = Clock::now();
    for (int node = 0; node < nodes; ++node) {
      const fs::path cache = fleet / ("node" + std::to_string(node));
      for (int p = 0; p < per_node; ++p) {
        std::vector<std::string> args = {g_config.cli.string(), "--cache-dir", cache.string()};
        if (with_remote) {
          args.push_back("--remote");
          args.push_back(g_server->url());
        }
        for (const char* a : {"warm", "--checkpoint"}) args.emplace_back(a);
        args.push_back(g_config.checkpoint.string());
        for (const char* a : {"--arch", k_target, "--json"}) args.emplace_back(a);
        const fs::path err = fleet / ("node" + std::to_string(node) + "-" + std::to_string(p) + ".stderr");
        children.push_back(bench::spawn_child(args, &env, err));
      }
    }
    double compiles = 0, variants = 0;
    for (const bench::ChildProcess& child : children) {
      const bench::ChildExit r = bench::finish_child(child);
      if (r.exit_code != 0)
        return fail(state, "a warming process exited with " + std::to_string(r.exit_code) + ": " + r.err);
      const auto doc = nlohmann::json::parse(r.out);
      compiles += doc.value("compiled", 0.0);
      variants = doc.value("variants_needed", 0.0);
    }
    const double wall_ms = us_since(start) / 1e3;
    state.SetIterationTime(wall_ms / 1e3);
    // What the remote saw: every node's counters (jitcache stats --json).
    double uploads = 0, hits = 0, waits = 0;
    if (with_remote) {
      for (int node = 0; node < nodes; ++node) {
        const fs::path cache = fleet / ("node" + std::to_string(node));
        const bench::ChildExit r = bench::finish_child(bench::spawn_child(
            {g_config.cli.string(), "--cache-dir", cache.string(), "stats", "--json"}, &env, fleet / "stats.stderr"));
        if (r.exit_code != 0) return fail(state, "jitcache stats failed: " + r.err);
        const auto doc = nlohmann::json::parse(r.out);
        const auto& remote = doc.contains("totals") ? doc["totals"]["remote"] : doc["remote"];
        uploads += remote.value("uploads", 0.0);
        hits += remote.value("hits", 0.0);
        waits += remote.value("lease_waits", 0.0);
      }
    }
    g_samples[key + ".nodes"].push_back(nodes);
    g_samples[key + ".processes"].push_back(nodes * per_node);
    g_samples[key + ".compiles"].push_back(compiles);
    g_samples[key + ".variants"].push_back(variants);
    g_samples[key + ".wall_ms"].push_back(wall_ms);
    g_samples[key + ".uploads"].push_back(uploads);
    g_samples[key + ".hits"].push_back(hits);
    g_samples[key + ".lease_waits"].push_back(waits);
    state.counters["compiles"] = compiles;
    state.counters["variants"] = variants;
    const double expected = with_remote ? variants : variants * nodes;
    if (variants == 0 || compiles != expected)
      return fail(state, key + ": " + std::to_string(compiles) + " compiles, expected " + std::to_string(expected));
  }
  state.SetLabel(std::to_string(nodes) + " nodes x " + std::to_string(per_node) + " jitcache warm, " +
                 (with_remote ? "shared remote" : "no remote"));
}

// ---- the summary ---------------------------------------------------------------------------

void print_summary() {
  auto m = [](const std::string& name) { return bench::median(g_samples[name]); };
  auto p90 = [](const std::string& name) { return bench::percentile(g_samples[name], 0.9); };
  auto have = [](const std::string& name) { return !g_samples[name].empty(); };
  auto row = [&](const char* what, const std::string& name, const char* note) {
    if (!have(name)) return;
    std::printf("  %-56s %9.1f us %9.1f us %9.1f us  %s\n", what, m(name), p90(name), m(name + ".cpu"), note);
  };
  double load[3] = {0, 0, 0};
  (void)::getloadavg(load, 3);
  std::printf("\nRemote tier figures (loopback redis-server, %zu KiB entries; %ld cores, load average %.1f)\n",
              k_entry_bytes >> 10, ::sysconf(_SC_NPROCESSORS_ONLN), load[0]);
  std::printf("  %-56s %12s %12s %12s\n", "wall time unless said", "median", "p90", "CPU median");
  const bool hit_ok = m("hit.backfill_full") <= 300.0;
  row("remote hit + verify + backfill (fsync'ed, the default)", "hit.backfill_full",
      hit_ok ? "target <= 300 us: meets" : "target <= 300 us: MISSES (fsync, below)");
  row("remote hit + verify + backfill (relaxed durability)", "hit.backfill_relaxed",
      m("hit.backfill_relaxed") <= 300.0 ? "meets 300 us" : "misses 300 us");
  row("remote hit + verify, no backfill (RemoteTier::get)", "hit.no_backfill",
      m("hit.no_backfill") <= 300.0 ? "meets 300 us" : "misses 300 us");
  row("  part: local lookup, memory + index miss", "part.local_miss", "");
  row("  part: GETRANGE + STRLEN round trip", "part.getrange", "");
  row("  part: decode + HMAC-SHA256 + digest", "part.decode", "");
  row("  part: disk publish, fsync'ed (file + directory)", "part.publish_full", "");
  row("  part: disk publish, relaxed", "part.publish_relaxed", "");
  auto added = [&](const char* what, const std::string& prefix) {
    if (!have(prefix + "no_remote") || !have(prefix + "empty_remote")) return;
    std::printf("  %-56s %9.1f us %12s %9.1f us\n", what, m(prefix + "empty_remote") - m(prefix + "no_remote"), "",
                m(prefix + "empty_remote.cpu") - m(prefix + "no_remote.cpu"));
  };
  row("miss, no remote (disk, relaxed; trivial producer)", "miss.no_remote", "");
  row("miss, reachable empty remote (disk, relaxed)", "miss.empty_remote", "");
  added("  what the empty remote adds to a miss (disk)", "miss.");
  row("miss, no remote (memory-only store: no disk)", "miss_memory.no_remote", "");
  row("miss, reachable empty remote (memory-only store)", "miss_memory.empty_remote", "");
  added("  what the empty remote adds to a miss (no disk)", "miss_memory.");
  row("  part: remote get, miss", "part.remote_get_miss", "");
  row("  part: lease SET NX PX + recheck + release", "part.claim_release", "");
  row("  part: upload (sign + SET NX)", "part.upload", "");

  if (have("dead.none.total")) {
    std::printf("\n  dead remote, %s lookups each (timeouts: connect 200 ms, operation 500 ms, breaker 30 s)\n",
                g_config.smoke ? "10" : "100");
    std::printf("  %-24s %12s %14s %14s %12s %14s\n", "remote", "first (ms)", "rest mean (us)", "rest max (us)",
                "total (ms)", "added (ms)");
    const double base = m("dead.none.total");
    for (Dead d : {Dead::none, Dead::refused, Dead::unanswered_connect, Dead::silent, Dead::paused}) {
      const std::string name = std::string("dead.") + dead_name(d);
      if (!have(name + ".total")) continue;
      std::printf("  %-24s %12.2f %14.1f %14.1f %12.1f %14.1f\n", dead_name(d), m(name + ".first") / 1e3,
                  m(name + ".rest_mean"), m(name + ".rest_max"), m(name + ".total") / 1e3,
                  (m(name + ".total") - base) / 1e3);
    }
  }
  for (const char* key : {"fleet.local", "fleet.remote"}) {
    const std::string k = key;
    if (!have(k + ".wall_ms")) continue;
    const bool remote = k == "fleet.remote";
    std::printf("\n  fleet cold start, %s: %.0f nodes x %.0f processes: %.0f compiles for %.0f variants, wall %.0f ms",
                remote ? "shared remote" : "no remote", m(k + ".nodes"), m(k + ".processes") / m(k + ".nodes"),
                m(k + ".compiles"), m(k + ".variants"), m(k + ".wall_ms"));
    if (remote)
      std::printf("\n    remote uploads %.0f, remote hits %.0f, lease waits %.0f (target: compiles == variants: %s)",
                  m(k + ".uploads"), m(k + ".hits"), m(k + ".lease_waits"),
                  m(k + ".compiles") == m(k + ".variants") ? "meets" : "MISSES");
  }
  std::printf("\n");
  if (!g_failures.empty()) {
    std::printf("\nFAILED checks:\n");
    for (const auto& f : g_failures) std::printf("  %s\n", f.c_str());
  }
}

void register_benchmarks() {
  using benchmark::RegisterBenchmark;
  const auto us = benchmark::kMicrosecond;
  RegisterBenchmark("BM_RemoteHit_Backfill/full", BM_RemoteHit_Backfill, Durability::full)
      ->Iterations(iterations(300))->Unit(us);
  RegisterBenchmark("BM_RemoteHit_Backfill/relaxed", BM_RemoteHit_Backfill, Durability::relaxed)
      ->Iterations(iterations(1000))->Unit(us);
  RegisterBenchmark("BM_RemoteHit_NoBackfill", BM_RemoteHit_NoBackfill)->Iterations(iterations(2000))->Unit(us);
  RegisterBenchmark("BM_Part_LocalMiss", BM_Part_LocalMiss)->Iterations(iterations(2000))->Unit(us);
  RegisterBenchmark("BM_Part_GetRangeRoundTrip", BM_Part_GetRangeRoundTrip)->Iterations(iterations(2000))->Unit(us);
  RegisterBenchmark("BM_Part_DecodeVerify", BM_Part_DecodeVerify)->Iterations(iterations(2000))->Unit(us);
  RegisterBenchmark("BM_Part_DiskPublish/full", BM_Part_DiskPublish, Durability::full)
      ->Iterations(iterations(300))->Unit(us);
  RegisterBenchmark("BM_Part_DiskPublish/relaxed", BM_Part_DiskPublish, Durability::relaxed)
      ->Iterations(iterations(1000))->Unit(us);
  RegisterBenchmark("BM_Miss/disk", BM_Miss, true)->Iterations(iterations(1000))->Unit(us);
  RegisterBenchmark("BM_Miss/memory_only", BM_Miss, false)->Iterations(iterations(1000))->Unit(us);
  RegisterBenchmark("BM_Part_RemoteGetMiss", BM_Part_RemoteGetMiss)->Iterations(iterations(2000))->Unit(us);
  RegisterBenchmark("BM_Part_ClaimRelease", BM_Part_ClaimRelease)->Iterations(iterations(1000))->Unit(us);
  RegisterBenchmark("BM_Part_Upload", BM_Part_Upload)->Iterations(iterations(1000))->Unit(us);
  for (Dead d : {Dead::none, Dead::refused, Dead::unanswered_connect, Dead::silent, Dead::paused})
    RegisterBenchmark((std::string("BM_DeadRemote/") + dead_name(d)).c_str(), BM_DeadRemote, d)
        ->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
  RegisterBenchmark("BM_FleetColdStart/no_remote", BM_FleetColdStart, false)
      ->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
  RegisterBenchmark("BM_FleetColdStart/remote", BM_FleetColdStart, true)
      ->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
}

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest = {argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (bench::take_path_option(arg, g_config)) continue;
    if (arg == "--smoke") g_config.smoke = true;
    else rest.push_back(argv[i]);
  }
  if (!bench::complete_paths(g_config, "bench_remote")) return 2;

  auto server = testing::RedisServer::start();
  if (!server) {
    std::fprintf(stderr, "bench_remote: %s\n", server.error().to_string().c_str());
    std::error_code ec;
    fs::remove_all(g_config.scratch, ec);
    return 2;
  }
  g_server = std::move(*server);
  g_key_file = testing::write_fleet_key(g_config.scratch);
  g_fleet_key = read_file(g_key_file);

  register_benchmarks();
  // The dead-remote figures log one warning per episode by design; the table says enough.
  if (!bench::run_benchmarks(rest, LogLevel::error, print_summary)) return 2;
  g_server.reset();
  std::error_code ec;
  fs::remove_all(g_config.scratch, ec);
  return g_failures.empty() ? 0 : 1;
}
