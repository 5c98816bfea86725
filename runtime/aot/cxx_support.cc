// The few C++ runtime functions the microkernels' C++ needs (compiled with -fno-exceptions
// -fno-rtti), so that an AOT library depends on libc and libm only, not on libstdc++. cuvilc gives
// every symbol defined in the library a private per-library name when it writes libNAME.a, so
// these never replace or clash with a C++ program's own operator new or guard functions.
// Thread-safe: the guard functions serialise first-time initialisation of function statics.
#if !defined(CUVIL_AOT_BARE_METAL)
#include <sched.h>
#endif
#include <stdint.h>
#include <stdlib.h>

#include <cstddef>
#include <new>

void* operator new(std::size_t bytes) {
  void* p = malloc(bytes > 0 ? bytes : 1);
  if (p == nullptr) abort();  // Out of memory inside generated code: nothing to unwind.
  return p;
}

void* operator new[](std::size_t bytes) { return operator new(bytes); }
void operator delete(void* p) noexcept { free(p); }
void operator delete(void* p, std::size_t) noexcept { free(p); }
void operator delete[](void* p) noexcept { free(p); }
void operator delete[](void* p, std::size_t) noexcept { free(p); }

namespace std {
// What libstdc++'s containers call on impossible sizes; without exceptions there is no recovery.
[[noreturn]] void __throw_length_error(const char*) { abort(); }
[[noreturn]] void __throw_bad_alloc() { abort(); }
[[noreturn]] void __throw_bad_array_new_length() { abort(); }
}  // namespace std

#if defined(CUVIL_AOT_BARE_METAL)
// Bare metal (the Cortex-M7 runtime): one thread and no OS. That runtime is compiled with
// -fno-threadsafe-statics and with thread_local as static (runtime/aot/CMakeLists.txt), so
// nothing calls the guard or thread-exit functions below. Static destructors register with
// __aeabi_atexit against this library's own DSO handle (crtbegin.o's, which bare-metal programs
// linked with -nostartfiles lack).
extern "C" {
__attribute__((visibility("hidden"))) void* __dso_handle = &__dso_handle;
}
#else
extern "C" {

#if defined(__wasm__)
// wasm32-wasi has one thread and no __cxa_thread_atexit_impl: thread_local destructors run at
// exit like those of statics (wasi-libc's __cxa_atexit).
int __cxa_atexit(void (*dtor)(void*), void* obj, void* dso_symbol);

int __cxa_thread_atexit(void (*dtor)(void*), void* obj, void* dso_symbol) {
  return __cxa_atexit(dtor, obj, dso_symbol);
}
#else
// glibc's implementation behind libstdc++'s __cxa_thread_atexit (thread_local destructors).
int __cxa_thread_atexit_impl(void (*dtor)(void*), void* obj, void* dso_symbol);

int __cxa_thread_atexit(void (*dtor)(void*), void* obj, void* dso_symbol) {
  return __cxa_thread_atexit_impl(dtor, obj, dso_symbol);
}
#endif

// Itanium ABI guard for a function-local static: byte 0 set once initialised, byte 1 held by the
// thread running the initialiser.
int __cxa_guard_acquire(uint64_t* guard) {
  uint8_t* g = reinterpret_cast<uint8_t*>(guard);
  if (__atomic_load_n(&g[0], __ATOMIC_ACQUIRE) != 0) return 0;
  while (__atomic_exchange_n(&g[1], uint8_t{1}, __ATOMIC_ACQUIRE) != 0) sched_yield();
  if (__atomic_load_n(&g[0], __ATOMIC_ACQUIRE) != 0) {
    __atomic_store_n(&g[1], uint8_t{0}, __ATOMIC_RELEASE);
    return 0;
  }
  return 1;
}

void __cxa_guard_release(uint64_t* guard) {
  uint8_t* g = reinterpret_cast<uint8_t*>(guard);
  __atomic_store_n(&g[0], uint8_t{1}, __ATOMIC_RELEASE);
  __atomic_store_n(&g[1], uint8_t{0}, __ATOMIC_RELEASE);
}

void __cxa_guard_abort(uint64_t* guard) {
  __atomic_store_n(&reinterpret_cast<uint8_t*>(guard)[1], uint8_t{0}, __ATOMIC_RELEASE);
}

}  // extern "C"
#endif  // CUVIL_AOT_BARE_METAL
