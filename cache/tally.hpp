// The counters of one Store object: what it did since it opened (its session) and what is
// not yet added to the index's cumulative counters (written at the next flush).
#pragma once

#include <mutex>
#include <utility>
#include <vector>

#include "cache/entry.hpp"
#include "cache/index.hpp"

namespace jitcache::cache {

class Tally {
 public:
  void add(const Counters& delta) {
    std::lock_guard lock(m_mutex);
    m_session += delta;
    m_unflushed += delta;
  }
  Counters session() const {
    std::lock_guard lock(m_mutex);
    return m_session;
  }
  // The counts not yet written, which the caller now writes; they start again from zero.
  Counters take_unflushed() {
    std::lock_guard lock(m_mutex);
    return std::exchange(m_unflushed, Counters{});
  }

 private:
  mutable std::mutex m_mutex;
  Counters m_session;
  Counters m_unflushed;
};

// Uses and counts seen above the disk tier (by the memory tier) and not yet written to
// the index: the disk tier collects them at each flush.
struct PendingUses {
  std::vector<Usage> uses;
  Counters counters;  // memory_hits and the compile_ms_saved of those hits
};

// A delta of one event: one(&Counters::misses).
inline Counters one(std::uint64_t Counters::*field) {
  Counters c;
  c.*field = 1;
  return c;
}

}  // namespace jitcache::cache
