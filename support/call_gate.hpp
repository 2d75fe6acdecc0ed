// Closing an object that other threads are calling: a CallGate counts the calls inside it,
// refuses new ones once it is closed, and lets the closer wait until the last call in flight
// has left. Entering and leaving are one atomic add each: no lock, no allocation, so the
// gate can sit on a launch path.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <utility>

namespace jitcache {

class CallGate {
 public:
  // One call inside the gate, until it is destroyed.
  class Pass {
   public:
    explicit Pass(CallGate* gate) : m_gate(gate) {}
    Pass(Pass&& other) noexcept : m_gate(std::exchange(other.m_gate, nullptr)) {}
    Pass& operator=(Pass&&) = delete;
    Pass(const Pass&) = delete;
    ~Pass() {
      if (m_gate != nullptr) m_gate->leave();
    }

   private:
    CallGate* m_gate;
  };

  // A pass, or nullopt once the gate is closed.
  std::optional<Pass> enter() {
    if (m_state.fetch_add(1, std::memory_order_acquire) & k_closed) {
      leave();
      return std::nullopt;
    }
    return std::optional<Pass>(std::in_place, this);
  }

  // Refuses every later call; returns at once. True for the call that closed it.
  bool close() { return (m_state.fetch_or(k_closed, std::memory_order_acq_rel) & k_closed) == 0; }

  // Closes, then waits until every call that entered before has left. True for the call
  // that closed it.
  bool close_and_drain() {
    const bool first = close();
    for (std::uint32_t v = m_state.load(std::memory_order_acquire); v != k_closed;
         v = m_state.load(std::memory_order_acquire))
      m_state.wait(v, std::memory_order_acquire);
    return first;
  }

  bool closed() const { return (m_state.load(std::memory_order_acquire) & k_closed) != 0; }

 private:
  static constexpr std::uint32_t k_closed = 1u << 31;

  void leave() {
    if (m_state.fetch_sub(1, std::memory_order_release) == (k_closed | 1u)) m_state.notify_all();
  }

  std::atomic<std::uint32_t> m_state{0};
};

}  // namespace jitcache
