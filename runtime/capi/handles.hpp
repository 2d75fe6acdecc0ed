// The C ABI's handles and how they end (jitcache.h, "Handles and threads"). A runtime or a
// model may be closed while other threads call it: the handle's gate refuses calls that
// start afterwards, close waits for the calls in flight, then frees what the handle held.
// The handle itself stays, a few bytes for the process's life, so that a call racing the
// close reads a closed handle and fails cleanly instead of reading freed memory.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "jitcache/jitcache.h"
#include "jitcache/runtime.hpp"
#include "support/call_gate.hpp"

struct jitcache_runtime {
  std::unique_ptr<jitcache::Runtime> runtime;
  // Held here so the strings handed out stay valid for the process's life.
  jitcache::DeviceStatus device;
  std::string cache_dir;
  std::string cache_reason;
  jitcache_cache_mode cache_mode = JITCACHE_CACHE_READ_WRITE;
  std::atomic<bool> closed{false};
};

struct jitcache_model {
  std::shared_ptr<const jitcache::PreparedModel> model;
  mutable jitcache::CallGate gate;
};

struct jitcache_kernel {
  jitcache::CompiledKernel kernel;
};

namespace jitcache::capi {

// Closes the runtime (Runtime::close: waits for the calls in flight) and keeps the closed
// handle. Idempotent.
void close_runtime(jitcache_runtime* runtime);

// Waits for the calls in flight on the model, releases it and keeps the closed handle.
// Idempotent.
void release_model(jitcache_model* model);

}  // namespace jitcache::capi
