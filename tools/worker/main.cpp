// jitcache-tool-worker: compiles kernels from outside for the library, in a child process
// (runtime/compile/tool_worker.hpp). Not a command for people: it serves one caller on
// file descriptor 3.
#include "runtime/compile/tool_worker.hpp"

int main(int argc, char** argv) { return jitcache::tool_worker_main(argc, argv); }
