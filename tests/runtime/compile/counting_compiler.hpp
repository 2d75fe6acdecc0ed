// Compilers for tests that check how often a cache compiled: one that counts its compiles
// and passes them to another one (NVRTC), and a fake one that compiles nothing.
#pragma once

#include <atomic>
#include <string>
#include <utility>
#include <vector>

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

// A compiler that produces a fake but well-formed artifact instantly and counts its calls.
// Its version, fingerprint and extra option stand for another release, another build of
// the same release, or other settings.
class FakeCompiler final : public Compiler {
 public:
  FakeCompiler() = default;
  explicit FakeCompiler(std::string fingerprint) : m_fingerprint(std::move(fingerprint)) {}
  std::string name() const override { return "fake"; }
  std::string version() const override { return m_version; }
  Result<std::string> fingerprint() const override { return m_fingerprint; }
  std::vector<std::string> options(const KernelSpec& spec) const override {
    return {"--gpu-architecture=" + spec.target.name, m_extra_option};
  }
  Result<CompiledArtifact> compile(const GeneratedSource& source) const override {
    ++compiles;
    CompiledArtifact a;
    a.spec = source.spec;
    a.entry = source.entry;
    a.facts = source.facts;
    a.options = options(source.spec);
    a.cubin = {0x7f, 'E', 'L', 'F'};
    a.ptx = "// " + source.spec.label();
    a.usage = {40, 0, 0, 0};
    a.compile_ms = 100;
    return a;
  }
  mutable std::atomic<int> compiles{0};
  std::string m_version = "1.0";
  std::string m_fingerprint = "f00d";
  std::string m_extra_option = "--fmad=false";
};

}  // namespace jitcache::testing
