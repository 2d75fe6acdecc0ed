// Helpers shared by the cache tests: sample facts and blobs, a counting producer, and
// direct reads of the index with sqlite3 (what an operator would see).
#pragma once

#include <sqlite3.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cache/store.hpp"

namespace jitcache::cache::testing {

inline Bytes make_bytes(std::size_t size, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes bytes(size);
  for (auto& b : bytes) b = static_cast<std::byte>(rng() & 0xFF);
  return bytes;
}

// A fact set shaped like the runtime's, varied by `id`.
inline Facts sample_facts(const std::string& id, const std::string& latent_scale = "dynamic") {
  return Facts{{"kernel", "nvfp4_mla_kv_write"},
               {"latent_scale", latent_scale},
               {"rope", "fp8"},
               {"target", "sm_120a"},
               {"nvrtc_version", "12.8"},
               {"id", id}};
}

// Counts its calls; returns `bytes` after an optional delay.
struct CountingProducer {
  Bytes bytes;
  double compile_ms = 12.5;
  std::chrono::milliseconds delay{0};
  std::atomic<int> calls{0};

  Producer producer() {
    return [this]() -> Result<Produced> {
      ++calls;
      if (delay.count() > 0) std::this_thread::sleep_for(delay);
      return Produced{bytes, compile_ms};
    };
  }
};

// Runs one query with the sqlite3 C API, as an operator's sqlite3 shell would; returns
// the first column of every row as text ("" for NULL), or "ERROR: ..." on failure.
inline std::vector<std::string> sql_query(const std::filesystem::path& db, const std::string& sql) {
  sqlite3* handle = nullptr;
  std::vector<std::string> rows;
  if (sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr) != SQLITE_OK) {
    rows.push_back(std::string("ERROR: ") + sqlite3_errmsg(handle));
    sqlite3_close(handle);
    return rows;
  }
  sqlite3_busy_timeout(handle, 5000);
  char* error = nullptr;
  auto callback = [](void* out, int, char** values, char**) {
    static_cast<std::vector<std::string>*>(out)->push_back(values[0] ? values[0] : "");
    return 0;
  };
  if (sqlite3_exec(handle, sql.c_str(), callback, &rows, &error) != SQLITE_OK) {
    rows.push_back(std::string("ERROR: ") + (error ? error : "?"));
    sqlite3_free(error);
  }
  sqlite3_close(handle);
  return rows;
}

inline void write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline std::size_t count_files(const std::filesystem::path& dir) {
  std::error_code ec;
  std::size_t n = 0;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir, ec))
    if (entry.is_regular_file()) ++n;
  return n;
}

}  // namespace jitcache::cache::testing
