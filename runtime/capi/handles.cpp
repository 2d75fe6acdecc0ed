#include "runtime/capi/handles.hpp"

#include <mutex>
#include <vector>

namespace jitcache::capi {
namespace {

// Closed handles, kept so that a late call finds a closed handle, never freed memory.
// Never destroyed: a thread may still call at exit.
template <class Handle>
void keep(Handle* handle) {
  static std::mutex mutex;
  static auto* kept = new std::vector<Handle*>();
  std::lock_guard lock(mutex);
  kept->push_back(handle);
}

}  // namespace

void close_runtime(jitcache_runtime* runtime) {
  if (runtime->closed.exchange(true)) return;
  (void)runtime->runtime->close();  // from a log callback the caller refused it already
  keep(runtime);
}

void release_model(jitcache_model* model) {
  if (!model->gate.close_and_drain()) return;
  model->model.reset();
  keep(model);
}

}  // namespace jitcache::capi
