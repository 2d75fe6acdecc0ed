// The functions of a library opened with dlopen, as one table: each exported name beside
// the pointer it binds. The CUDA driver (runtime/device/cuda_driver.cpp) and the compiler
// libraries (runtime/compile/toolkit_library.hpp) each list theirs and bind it here.
#pragma once

#include <dlfcn.h>

#include <initializer_list>

namespace jitcache {

// One exported function and the pointer that keeps it, of the function's own type.
class LibrarySymbol {
 public:
  template <class Fn>
  LibrarySymbol(const char* name, Fn** slot) : m_name(name), m_slot(slot), m_bind(&bind_as<Fn>) {}
  const char* name() const { return m_name; }
  void bind(void* symbol) const { m_bind(m_slot, symbol); }

 private:
  template <class Fn>
  static void bind_as(void* slot, void* symbol) {
    *static_cast<Fn**>(slot) = reinterpret_cast<Fn*>(symbol);
  }
  const char* m_name;
  void* m_slot;
  void (*m_bind)(void*, void*);
};

// Binds each of `symbols` in the dlopen'ed `library`, in order. Returns the name of the
// first one it does not export (dlerror() then says why; those after it stay unbound), or
// nullptr when every one is bound.
inline const char* bind_symbols(void* library, std::initializer_list<LibrarySymbol> symbols) {
  ::dlerror();
  for (const LibrarySymbol& symbol : symbols) {
    void* address = ::dlsym(library, symbol.name());
    if (address == nullptr) return symbol.name();
    symbol.bind(address);
  }
  return nullptr;
}

}  // namespace jitcache
