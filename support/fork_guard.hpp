// fork() while another thread is inside a third-party tool or library (NVRTC holds its own
// mutexes while it compiles, SQLite its allocator's and its file list's) leaves the child
// with a lock no thread will ever release: the child's first compile or first open of a
// cache waits for ever. A ToolSection marks a stretch of calls into such a tool;
// fork() waits, in a pthread_atfork handler, until no thread is inside one, and no thread
// enters one until fork() has returned in the parent and in the child. So a forked child
// finds every tool in a state a single thread left it in.
//
// Sections nest on one thread (the outermost one holds the lock). They are shared: any
// number of threads compile at once; only fork() waits for them all.
#pragma once

namespace jitcache {

class ToolSection {
 public:
  ToolSection();
  ~ToolSection();
  ToolSection(const ToolSection&) = delete;
  ToolSection& operator=(const ToolSection&) = delete;
};

}  // namespace jitcache
