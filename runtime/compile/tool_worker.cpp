// The worker's side of tool isolation (tool_worker.hpp), where it is found, and its
// timeout. The caller's side, the pool, is tool_pool.cpp.
#include "runtime/compile/tool_worker.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "runtime/compile/tool_protocol.hpp"
#include "support/env.hpp"

namespace jitcache {
namespace {

constexpr int k_socket_fd = 3;

// Reads exactly `size` bytes: false at the end of the stream or on an error.
bool receive_exactly(int fd, std::uint8_t* data, std::size_t size) {
  std::size_t got = 0;
  while (got < size) {
    const ssize_t n = ::recv(fd, data + got, size - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    got += static_cast<std::size_t>(n);
  }
  return true;
}

void send_stage(const char* tool, const char* stage) {
  // A caller that is gone makes the next send fail too; the loop ends there.
  (void)tool_protocol::send_frame(k_socket_fd, tool_protocol::encode_stage(tool, stage));
}

// An empty directory that no longer exists, as the working directory: a relative path that
// a tool opens resolves to nothing, not to the caller's files. False if it cannot be made.
bool enter_private_directory() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base != nullptr && *base == '/' ? base : "/tmp") + "/jitcache-worker-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) return false;
  const bool entered = ::chdir(pattern.c_str()) == 0;
  const bool removed = ::rmdir(pattern.c_str()) == 0;
  return entered && removed;
}

std::vector<std::filesystem::path> candidates_beside(const std::filesystem::path& module) {
  const auto dir = module.parent_path();
  return {dir / k_tool_worker_name, dir / ".." / "libexec" / "jitcache" / k_tool_worker_name};
}

// Every descriptor above the socket. The spawner closes them with posix_spawn where glibc
// can (2.34+, tool_pool.cpp); on an older one the worker is started holding the caller's
// inheritable descriptors and told so (k_tool_worker_close_inherited), and closes them
// here, before it reads a request: with close_range (Linux 5.9+) at once, else each one
// /proc/self/fd lists. Not otherwise: what the loader opened itself (LD_DEBUG_OUTPUT's
// file) stays open.
void close_inherited_descriptors() {
#ifdef SYS_close_range
  if (::syscall(SYS_close_range, k_socket_fd + 1, ~0U, 0) == 0) return;
#endif
  std::vector<int> open;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    const int own = ::dirfd(dir);
    while (const dirent* entry = ::readdir(dir)) {
      char* end = nullptr;
      const long fd = std::strtol(entry->d_name, &end, 10);
      if (end != entry->d_name && *end == '\0' && fd > k_socket_fd && fd != own) open.push_back(static_cast<int>(fd));
    }
    ::closedir(dir);
  }
  for (const int fd : open) ::close(fd);
}

}  // namespace

int tool_worker_main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], k_tool_worker_close_inherited) == 0) close_inherited_descriptors();
  const bool private_cwd = enter_private_directory();
  set_stage_observer(&send_stage);
  for (;;) {
    std::uint8_t prefix[4];
    if (!receive_exactly(k_socket_fd, prefix, sizeof prefix)) return 0;  // the caller closed: done
    const std::uint32_t size = prefix[0] | (prefix[1] << 8) | (prefix[2] << 16) | (std::uint32_t{prefix[3]} << 24);
    if (size > tool_protocol::k_max_frame_bytes) return 2;
    tool_protocol::Bytes frame(size);
    if (!receive_exactly(k_socket_fd, frame.data(), size)) return 2;
    auto input = tool_protocol::decode_request(frame);
    Result<SourceOutput> result = make_error(ErrorCode::internal, "unanswered");
    if (!input)
      result = std::unexpected(input.error());
    else if (input->kind == SourceKind::cuda && !private_cwd)
      result = make_error(ErrorCode::unavailable,
                          "the tool worker could not make an empty private working directory (TMPDIR or /tmp); "
                          "CUDA C++ from outside is not compiled without one");
    else
      result = compile_source_in_process(*input);
    if (tool_protocol::send_frame(k_socket_fd, tool_protocol::encode_result(result)) != 0) return 0;
  }
}

Result<std::filesystem::path> find_tool_worker() {
  if (const auto given = env::get(env::jitcache_tool_worker)) {
    std::error_code ec;
    if (std::filesystem::is_regular_file(*given, ec) && ::access(given->c_str(), X_OK) == 0) return *given;
    return make_error(ErrorCode::unavailable, std::string(env::jitcache_tool_worker.name) + "=" + *given +
                                                  " is not an executable file (the tool worker, " + k_tool_worker_name +
                                                  ")");
  }
  std::vector<std::filesystem::path> searched;
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&find_tool_worker), &info) != 0 && info.dli_fname != nullptr &&
      std::strchr(info.dli_fname, '/') != nullptr)
    for (auto& p : candidates_beside(info.dli_fname)) searched.push_back(std::move(p));
  std::error_code ec;
  if (const auto self = std::filesystem::read_symlink("/proc/self/exe", ec); !ec)
    for (auto& p : candidates_beside(self)) searched.push_back(std::move(p));
  std::string places;
  for (const auto& p : searched) {
    if (std::filesystem::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0)
      return p.lexically_normal();
    places += (places.empty() ? "" : ", ") + p.lexically_normal().string();
  }
  return make_error(ErrorCode::unavailable,
                    std::string("the tool worker ") + k_tool_worker_name + " was not found (searched " + places +
                        "); set " + std::string(env::jitcache_tool_worker.name) +
                        " to its path. Sources from outside are compiled only in it");
}

Result<std::chrono::milliseconds> tool_timeout() {
  const std::uint64_t ms = JC_TRY(env::get_uint(env::jitcache_tool_timeout_ms));
  if (ms == 0)
    return make_error(ErrorCode::invalid_input,
                      std::string(env::jitcache_tool_timeout_ms.name) + "=0: expected at least 1 millisecond");
  return std::chrono::milliseconds(ms);
}

}  // namespace jitcache
