// One run of a piece of work per key at a time within a process: the first caller of a
// key leads and runs it; callers arriving while it runs wait and get the leader's result.
// (Across processes the disk tier's key locks do the same: cache/key_lock.hpp.)
#pragma once

#include <future>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace jitcache::cache {

template <class Key, class Value>
class SingleFlight {
 public:
  enum class Role { led, waited };
  struct Outcome {
    Value value;
    Role role;
  };

  // Runs `work` unless another thread runs it for `key`, in which case waits for that
  // run's value. `work` must not throw (turn exceptions into a Value first).
  template <class Work>
  Outcome run(const Key& key, Work&& work) {
    std::shared_ptr<Flight> flight;
    bool leader = false;
    {
      std::lock_guard lock(m_mutex);
      auto [it, inserted] = m_flights.try_emplace(key);
      if (inserted) it->second = std::make_shared<Flight>();
      flight = it->second;
      leader = inserted;
    }
    if (!leader) return Outcome{flight->future.get(), Role::waited};
    Value value = work();
    // Waiters get the value before the key leaves the table: a caller arriving after the
    // erase finds the result where the work put it (a tier) instead.
    flight->promise.set_value(value);
    {
      std::lock_guard lock(m_mutex);
      m_flights.erase(key);
    }
    return Outcome{std::move(value), Role::led};
  }

 private:
  struct Flight {
    std::promise<Value> promise;
    std::shared_future<Value> future = promise.get_future().share();
  };
  std::mutex m_mutex;
  std::unordered_map<Key, std::shared_ptr<Flight>> m_flights;
};

}  // namespace jitcache::cache
