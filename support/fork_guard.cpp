#include "support/fork_guard.hpp"

#include <pthread.h>

#include <cstdlib>
#include <mutex>

namespace jitcache {
namespace {

// Writer-preferring, so that a stream of compiles cannot keep fork() waiting for ever: once
// fork() asks, new sections wait for it.
pthread_rwlock_t g_tool_lock;

void init_tool_lock() {
  pthread_rwlockattr_t attr;
  pthread_rwlockattr_init(&attr);
  pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  if (pthread_rwlock_init(&g_tool_lock, &attr) != 0) std::abort();
  pthread_rwlockattr_destroy(&attr);
}

// Sections this thread is inside: only the outermost takes the lock (a writer-preferring
// lock taken twice for reading deadlocks when fork() asks in between).
thread_local int t_depth = 0;
// Whether the forking thread took the lock in the prepare handler (it cannot when it is
// itself inside a section, as a log callback that forks would be).
bool g_held_for_fork = false;

void before_fork() {
  if (t_depth > 0) return;
  pthread_rwlock_wrlock(&g_tool_lock);
  g_held_for_fork = true;
}

void after_fork_in_parent() {
  if (!g_held_for_fork) return;
  g_held_for_fork = false;
  pthread_rwlock_unlock(&g_tool_lock);
}

// The child has one thread, inside no section (or the one it forked from). The lock's word
// still counts the parent's threads that waited to read; unlocking would hand it to them,
// who are not here. So it starts afresh.
void after_fork_in_child() {
  if (!g_held_for_fork) return;
  g_held_for_fork = false;
  init_tool_lock();
}

void install_fork_handlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    init_tool_lock();
    pthread_atfork(&before_fork, &after_fork_in_parent, &after_fork_in_child);
  });
}

}  // namespace

ToolSection::ToolSection() {
  if (t_depth++ > 0) return;
  install_fork_handlers();
  pthread_rwlock_rdlock(&g_tool_lock);
}

ToolSection::~ToolSection() {
  if (--t_depth > 0) return;
  pthread_rwlock_unlock(&g_tool_lock);
}

}  // namespace jitcache
