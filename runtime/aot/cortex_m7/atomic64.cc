// 64-bit atomic operations for the Cortex-M7 AOT runtime. ARMv7-M has no 64-bit exclusive loads
// and stores, so GCC turns the runtime's 64-bit __atomic builtins (heap and buffer counters) into
// calls to these functions, which libatomic provides on hosted targets but arm-none-eabi lacks.
// Each runs with interrupts masked (PRIMASK), which makes it atomic on a single-core M7 against
// interrupt handlers too. Defined under their libcall names through asm labels (GCC refuses to
// redefine its builtins by name). Thread-safe on one core.
#include <stdint.h>

namespace {

// Masks interrupts; returns the previous PRIMASK for Unmask.
inline uint32_t Mask() {
  uint32_t primask;
  __asm__ volatile("mrs %0, primask\n\tcpsid i" : "=r"(primask) : : "memory");
  return primask;
}

// Restores the PRIMASK that Mask returned.
inline void Unmask(uint32_t primask) {
  __asm__ volatile("msr primask, %0" : : "r"(primask) : "memory");
}

}  // namespace

extern "C" {

uint64_t CuvilAtomicLoad8(const volatile void* p, int) __asm__("__atomic_load_8");
void CuvilAtomicStore8(volatile void* p, uint64_t v, int) __asm__("__atomic_store_8");
uint64_t CuvilAtomicExchange8(volatile void* p, uint64_t v, int) __asm__("__atomic_exchange_8");
bool CuvilAtomicCompareExchange8(volatile void* p, void* expected, uint64_t desired, bool, int,
                                 int) __asm__("__atomic_compare_exchange_8");
uint64_t CuvilAtomicFetchAdd8(volatile void* p, uint64_t v, int) __asm__("__atomic_fetch_add_8");
uint64_t CuvilAtomicFetchSub8(volatile void* p, uint64_t v, int) __asm__("__atomic_fetch_sub_8");
uint64_t CuvilAtomicAddFetch8(volatile void* p, uint64_t v, int) __asm__("__atomic_add_fetch_8");
uint64_t CuvilAtomicSubFetch8(volatile void* p, uint64_t v, int) __asm__("__atomic_sub_fetch_8");

// The value at `p`.
uint64_t CuvilAtomicLoad8(const volatile void* p, int) {
  const uint32_t m = Mask();
  const uint64_t v = *static_cast<const volatile uint64_t*>(p);
  Unmask(m);
  return v;
}

// Stores `v` at `p`.
void CuvilAtomicStore8(volatile void* p, uint64_t v, int) {
  const uint32_t m = Mask();
  *static_cast<volatile uint64_t*>(p) = v;
  Unmask(m);
}

// Stores `v` at `p`; returns the old value.
uint64_t CuvilAtomicExchange8(volatile void* p, uint64_t v, int) {
  const uint32_t m = Mask();
  volatile uint64_t* q = static_cast<volatile uint64_t*>(p);
  const uint64_t old = *q;
  *q = v;
  Unmask(m);
  return old;
}

// Stores `desired` at `p` if it holds *expected (true); otherwise copies its value to *expected
// (false).
bool CuvilAtomicCompareExchange8(volatile void* p, void* expected, uint64_t desired, bool, int,
                                 int) {
  const uint32_t m = Mask();
  volatile uint64_t* q = static_cast<volatile uint64_t*>(p);
  uint64_t* e = static_cast<uint64_t*>(expected);
  const uint64_t old = *q;
  const bool equal = old == *e;
  if (equal) {
    *q = desired;
  } else {
    *e = old;
  }
  Unmask(m);
  return equal;
}

// Adds `v` to the value at `p`; returns the old value.
uint64_t CuvilAtomicFetchAdd8(volatile void* p, uint64_t v, int) {
  const uint32_t m = Mask();
  volatile uint64_t* q = static_cast<volatile uint64_t*>(p);
  const uint64_t old = *q;
  *q = old + v;
  Unmask(m);
  return old;
}

// Subtracts `v` from the value at `p`; returns the old value.
uint64_t CuvilAtomicFetchSub8(volatile void* p, uint64_t v, int order) {
  return CuvilAtomicFetchAdd8(p, 0 - v, order);
}

// Adds `v` to the value at `p`; returns the new value.
uint64_t CuvilAtomicAddFetch8(volatile void* p, uint64_t v, int order) {
  return CuvilAtomicFetchAdd8(p, v, order) + v;
}

// Subtracts `v` from the value at `p`; returns the new value.
uint64_t CuvilAtomicSubFetch8(volatile void* p, uint64_t v, int order) {
  return CuvilAtomicFetchAdd8(p, 0 - v, order) - v;
}

}  // extern "C"
