// What the tests of closing a runtime or a model under calling threads share: the threads,
// their deadline and the tally of how each thread's last call ended.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <thread>
#include <vector>

namespace jitcache::testing {

// How one call of a thread racing a close ended.
enum class CallEnd { answered, refused, other };

struct CloseRaceTally {
  int answered = 0;  // calls answered, by all threads together
  int refused = 0;   // threads whose last call was refused as closed
  int other = 0;     // threads whose last call failed some other way
};

// Runs `threads` threads, each calling `call(its index)` until a call is not answered or
// 20 s have passed, and runs `close` 200 ms in, while they call.
inline CloseRaceTally race_close(int threads, const std::function<CallEnd(int)>& call,
                                 const std::function<void()>& close) {
  using namespace std::chrono_literals;
  std::atomic<int> answered{0}, refused{0}, other{0};
  std::vector<std::thread> running;
  for (int t = 0; t < threads; ++t)
    running.emplace_back([&, t] {
      const auto deadline = std::chrono::steady_clock::now() + 20s;
      while (std::chrono::steady_clock::now() < deadline) {
        const CallEnd end = call(t);
        if (end == CallEnd::answered) {
          ++answered;
          continue;
        }
        ++(end == CallEnd::refused ? refused : other);
        return;
      }
    });
  std::this_thread::sleep_for(200ms);
  close();
  for (auto& t : running) t.join();
  return {answered.load(), refused.load(), other.load()};
}

}  // namespace jitcache::testing
