// The heap helpers generated code calls (cuvil_rt_alloc / cuvil_rt_free): one definition for the
// JIT's runtime (registered by runtime_symbols.cc) and the AOT runtime (runtime/aot/).
#include <cstdint>
#include <cstdlib>

#include "call_scratch.h"
#include "cuvil/runtime/sanitizers.h"
#include "kernels.h"

namespace {

// Every block starts with a 64-byte header holding its size, so that free can count it and the
// caller's pointer keeps 64-byte alignment.
constexpr size_t kHeader = 64;

// Bytes of blocks allocated and not yet freed, the most of them seen, and the bytes of freed
// blocks that threads keep for reuse. Compiler builtins, not <atomic>: the AOT runtime's cross
// builds have no C++ library headers to lean on.
int64_t live_bytes = 0;
int64_t peak_bytes = 0;
int64_t cached_bytes = 0;

void RaisePeak(int64_t live) {
  int64_t seen = __atomic_load_n(&peak_bytes, __ATOMIC_RELAXED);
  while (live > seen && !__atomic_compare_exchange_n(&peak_bytes, &seen, live, /*weak=*/true,
                                                     __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

size_t SizeOf(char* block) { return *reinterpret_cast<size_t*>(block); }

void CountCached(size_t bytes, bool added) {
  __atomic_add_fetch(&cached_bytes,
                     added ? static_cast<int64_t>(bytes) : -static_cast<int64_t>(bytes),
                     __ATOMIC_RELAXED);
}

// A kernel allocates the same blocks every execution, so each thread keeps the few it freed last
// and hands them out again: a warm execution allocates nothing. Thread-compatible: one per
// thread; its blocks go back to the system with the thread.
class BlockCache {
 public:
  BlockCache() = default;
  BlockCache(const BlockCache&) = delete;
  BlockCache& operator=(const BlockCache&) = delete;
  ~BlockCache() {
    for (char*& b : blocks_) Release(b);
  }

  // The smallest kept block of at least `bytes` (its header's size), or null.
  char* Take(size_t bytes) {
    char** best = nullptr;
    for (char*& b : blocks_) {
      if (b != nullptr && SizeOf(b) >= bytes && (best == nullptr || SizeOf(b) < SizeOf(*best))) {
        best = &b;
      }
    }
    if (best == nullptr) return nullptr;
    char* out = *best;
    *best = nullptr;
    kept_ -= SizeOf(out);
    CountCached(SizeOf(out), false);
    return out;
  }

  // Keeps `block`, releasing smaller kept blocks while the thread would keep more than
  // kMaxKeptBytes or has no free slot; releases `block` itself when it still does not fit.
  void Keep(char* block) {
    const size_t size = SizeOf(block);
    if (size > kMaxKeptBytes) return std::free(block);
    for (;;) {
      char** smallest = nullptr;
      char** empty = nullptr;
      for (char*& b : blocks_) {
        if (b == nullptr) {
          empty = &b;
        } else if (smallest == nullptr || SizeOf(b) < SizeOf(*smallest)) {
          smallest = &b;
        }
      }
      if (empty != nullptr && kept_ + size <= kMaxKeptBytes) {
        *empty = block;
        kept_ += size;
        CountCached(size, true);
        return;
      }
      if (smallest == nullptr || SizeOf(*smallest) >= size) return std::free(block);
      Release(*smallest);
    }
  }

 private:
  // At most 8 blocks and 16 MiB per thread: a server's pool threads keep little, and blocks of
  // big batches go back to the system at once.
  static constexpr int kSlots = 8;
  static constexpr size_t kMaxKeptBytes = size_t{16} << 20;

  void Release(char*& block) {
    if (block == nullptr) return;
    kept_ -= SizeOf(block);
    CountCached(SizeOf(block), false);
    std::free(block);
    block = nullptr;
  }

  char* blocks_[kSlots] = {};
  size_t kept_ = 0;
};

BlockCache& ThisThreadsCache() {
  thread_local BlockCache cache;
  return cache;
}

// Under AddressSanitizer every block goes back at once, so that a kernel reading a freed block
// is still caught.
#if defined(CUVIL_ASAN)
constexpr bool kKeepFreedBlocks = false;
#else
constexpr bool kKeepFreedBlocks = true;
#endif

}  // namespace

extern "C" {

void* cuvil_rt_alloc(int64_t bytes) {
  // A size this address space cannot hold (32-bit targets) must not wrap into a small block.
  if (bytes > 0 && static_cast<uint64_t>(bytes) > SIZE_MAX - 2 * kHeader) return nullptr;
  const size_t want = static_cast<size_t>(bytes > 0 ? bytes : 1);
  // An ahead-of-time call's scratch region serves first (see call_scratch.h).
  if (cuvil::uk::CallScratch* region = cuvil::uk::ActiveCallScratch(); region != nullptr) {
    if (void* p = region->Allocate(want); p != nullptr) return p;
  }
  const size_t rounded = (want + 63) / 64 * 64;
  char* block = kKeepFreedBlocks ? ThisThreadsCache().Take(rounded) : nullptr;
  if (block == nullptr) {
    block = static_cast<char*>(std::aligned_alloc(64, rounded + kHeader));
    if (block == nullptr) return nullptr;
    *reinterpret_cast<size_t*>(block) = rounded;
  }
  RaisePeak(__atomic_add_fetch(&live_bytes, static_cast<int64_t>(SizeOf(block)), __ATOMIC_RELAXED));
  return block + kHeader;
}

void cuvil_rt_free(void* p) {
  if (p == nullptr) return;
  if (cuvil::uk::CallScratch* region = cuvil::uk::ActiveCallScratch();
      region != nullptr && region->Owns(p)) {
    return region->Free(p);
  }
  char* block = static_cast<char*>(p) - kHeader;
  __atomic_sub_fetch(&live_bytes, static_cast<int64_t>(SizeOf(block)), __ATOMIC_RELAXED);
  if (kKeepFreedBlocks) {
    ThisThreadsCache().Keep(block);
  } else {
    std::free(block);
  }
}

int64_t cuvil_rt_heap_live_bytes() { return __atomic_load_n(&live_bytes, __ATOMIC_RELAXED); }

int64_t cuvil_rt_heap_peak_bytes() { return __atomic_load_n(&peak_bytes, __ATOMIC_RELAXED); }

int64_t cuvil_rt_heap_cached_bytes() { return __atomic_load_n(&cached_bytes, __ATOMIC_RELAXED); }

void cuvil_rt_heap_reset_peak() {
  __atomic_store_n(&peak_bytes, cuvil_rt_heap_live_bytes(), __ATOMIC_RELAXED);
}

}  // extern "C"
