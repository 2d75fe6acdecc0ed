// A compiler that counts its compiles and passes them to another one (NVRTC), for tests
// that check how often a cache compiled.
#pragma once

#include <atomic>

#include "runtime/compile/compiler.hpp"

namespace jitcache::testing {

class CountingCompiler final : public Compiler {
 public:
  explicit CountingCompiler(const Compiler& inner) : m_inner(inner) {}
  std::string name() const override { return m_inner.name(); }
  std::string version() const override { return m_inner.version(); }
  Result<std::string> fingerprint() const override { return m_inner.fingerprint(); }
  std::vector<std::string> options(const KernelSpec& spec) const override { return m_inner.options(spec); }
  Result<CompiledArtifact> compile(const GeneratedSource& source) const override {
    ++compiles;
    return m_inner.compile(source);
  }
  mutable std::atomic<int> compiles{0};

 private:
  const Compiler& m_inner;
};

}  // namespace jitcache::testing
