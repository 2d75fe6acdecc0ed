// Every single-byte corruption of the compile tests' golden NVVM bitcode
// (tests/runtime/compile/golden/axpy_nvvm.bc) and of the axpy's PTX (made by NVRTC from
// golden/axpy.cu for sm_90) through compile_source, which runs libNVVM and nvJitLink in the
// tool worker. Each input gives a cubin or an error; this process must survive all of them.
// Prints the counts: compiled, refused by a tool (by stage), worker exit, worker killed by
// a signal, timeout; and the inputs of the last three kinds. Exits 1 when an input had
// any other outcome (a garbled reply, a timeout, an error of another kind).
//
//   bench_tool_fuzz [--xor HEX]... [--stride N]   (default: --xor ff --xor 01, stride 1)
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bench/bench_support.hpp"
#include "runtime/compile/source_compiler.hpp"

namespace {

using namespace jitcache;

// What became of one input, from compile_source's answer.
std::string outcome(const Result<SourceOutput>& r) {
  if (r) return "compiled";
  const std::string& m = r.error().message;
  if (m.find("did not answer within") != std::string::npos) return "worker timeout";
  if (m.find("was killed by") != std::string::npos) return "worker signal " + m.substr(m.find("SIG"), 7);
  if (m.find("exited with status") != std::string::npos)
    return "worker exit " + m.substr(m.find("exited with status") + 19, m.find(' ', m.find("exited with status") + 19) - m.find("exited with status") - 19) + " at " +
           m.substr(m.find(" at ") + 4, m.find(", compiling") - m.find(" at ") - 4);
  if (m.find("garbled") != std::string::npos) return "garbled reply";
  const auto at = m.find(" at ");
  if (r.error().code == ErrorCode::compile && at != std::string::npos)
    return "refused at " + m.substr(at + 4, m.find(':', at) - at - 4);
  return std::string("refused: ") + to_string(r.error().code) + ": " + m.substr(0, 80);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> patterns;
  std::size_t stride = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--xor") == 0 && i + 1 < argc) {
      patterns.push_back(static_cast<int>(std::strtol(argv[++i], nullptr, 16)));
    } else if (std::strcmp(argv[i], "--stride") == 0 && i + 1 < argc) {
      stride = static_cast<std::size_t>(std::max(1, std::atoi(argv[++i])));
    } else {
      std::fprintf(stderr, "usage: bench_tool_fuzz [--xor HEX]... [--stride N]\n");
      return 2;
    }
  }
  if (patterns.empty()) patterns = {0xff, 0x01};

  SourceInput cu;
  cu.kind = SourceKind::cuda;
  cu.text = bench::golden_kernel(JITCACHE_SOURCE_DIR, "axpy.cu");
  cu.entry = "axpy";
  cu.target = "sm_90";
  auto ptx = compile_source(cu);
  if (!ptx) {
    std::fprintf(stderr, "%s\n", ptx.error().to_string().c_str());
    return 1;
  }
  struct Golden {
    const char* name;
    SourceKind kind;
    std::string text;
  };
  const Golden goldens[] = {{"axpy_nvvm.bc", SourceKind::nvvm, bench::golden_kernel(JITCACHE_SOURCE_DIR, "axpy_nvvm.bc")},
                            {"axpy.ptx (sm_90)", SourceKind::ptx, ptx->ptx}};
  // What a tool may do with a corrupted input: compile it, refuse it, or end its worker.
  // Anything else (a garbled reply, a timeout, an error of another kind) fails the run.
  auto expected = [](const std::string& what) {
    return what == "compiled" || what.starts_with("refused at ") || what.starts_with("refused: compile error: ") ||
           what.starts_with("worker exit ") || what.starts_with("worker signal ");
  };
  int unexpected = 0;
  for (const Golden& g : goldens) {
    std::map<std::string, int> counts;
    std::vector<std::string> notable;
    int total = 0;
    const auto started = std::chrono::steady_clock::now();
    for (int pattern : patterns) {
      for (std::size_t at = 0; at < g.text.size(); at += stride) {
        SourceInput in;
        in.kind = g.kind;
        in.text = g.text;
        in.text[at] = static_cast<char>(in.text[at] ^ pattern);
        in.entry = "axpy";
        in.target = "sm_90";
        const std::string what = outcome(compile_source(in));
        ++counts[what];
        ++total;
        if (!expected(what)) ++unexpected;
        if (what.starts_with("worker") || what.starts_with("garbled")) {
          char label[48];
          std::snprintf(label, sizeof label, "byte %zu ^ 0x%02x: ", at, pattern);
          notable.push_back(label + what);
        }
      }
    }
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("%s (%zu bytes): %d corruptions in %.1f s; this process survived all of them\n", g.name,
                g.text.size(), total, s);
    for (const auto& [what, n] : counts) std::printf("  %6d  %s\n", n, what.c_str());
    if (!notable.empty()) std::printf("  first worker ends: %s%s\n", notable.front().c_str(), notable.size() > 1 ? ", ..." : "");
  }
  if (unexpected > 0) {
    std::printf("%d corruptions had an outcome other than a cubin, a tool's refusal or a worker's end\n", unexpected);
    return 1;
  }
  return 0;
}
