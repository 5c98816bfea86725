// Private: the scratch region an ahead-of-time call lends to the microkernels' per-call buffers
// and to generated code's heap blocks (cuvil_rt_alloc), so that NAME_run allocates nothing.
//
// cuvil_aot_run installs a region (the tail of the caller's arena) on the calling thread for the
// call. While one is installed, ThreadBuffer and cuvil_rt_alloc take their blocks from it; every
// microkernel entry point opens a MicrokernelScratchScope, which gives its blocks back when it
// returns. A request the region cannot hold falls back to the heap (counted as a miss), so an
// undersized region costs allocations, never correctness. The JIT engine installs none.
#ifndef CUVIL_RUNTIME_UKERNELS_CALL_SCRATCH_H_
#define CUVIL_RUNTIME_UKERNELS_CALL_SCRATCH_H_

#include <cstddef>
#include <cstdint>

namespace cuvil::uk {

// Bytes a region spends on one block of `bytes`: a 64-byte header and the block rounded up to 64
// bytes; -1 when that overflows. The sizing functions (cuvil_uk_scratch_bytes) add these.
int64_t CallScratchBlockBytes(int64_t bytes);

// A bump region handing out 64-byte aligned blocks in stack order. A block freed below live ones
// is reclaimed once those above it are freed too. Thread-compatible: used by the thread that
// installed it.
class CallScratch {
 public:
  // `base` must be 64-byte aligned (or null with `bytes` 0).
  CallScratch(void* base, size_t bytes);
  CallScratch(const CallScratch&) = delete;
  CallScratch& operator=(const CallScratch&) = delete;

  // A block of at least `bytes`, or null (a miss is counted) when the region cannot hold it.
  void* Allocate(size_t bytes);
  // Whether `p` lies in this region.
  bool Owns(const void* p) const;
  // Gives back block `p` (a pointer Allocate returned and not yet freed).
  void Free(void* p);

  // The allocation state, to restore later (everything allocated after Mark() is then gone).
  struct Mark {
    size_t top;
    size_t last;
  };
  Mark Save() const { return Mark{top_, last_}; }
  void Restore(Mark m) { top_ = m.top, last_ = m.last; }

  // The most bytes in use at once so far, and the requests that did not fit.
  size_t high_water() const { return high_water_; }
  int64_t misses() const { return misses_; }

 private:
  char* base_;
  size_t size_;
  size_t top_ = 0;          // first free byte
  size_t last_ = kNoBlock;  // header offset of the topmost block
  size_t high_water_ = 0;
  int64_t misses_ = 0;
  static constexpr size_t kNoBlock = ~size_t{0};
};

// The region installed on this thread, or null.
CallScratch* ActiveCallScratch();

// A number that changes whenever blocks taken from the active region may have been given back
// (a region installed or removed, a microkernel scope opened or closed): a ThreadBuffer's region
// block is valid only under the generation it was taken in.
uint64_t CallScratchGeneration();

// Installs `scratch` on this thread for the scope's lifetime (restoring the previous one after).
// Thread-compatible.
class CallScratchScope {
 public:
  explicit CallScratchScope(CallScratch* scratch);
  ~CallScratchScope();
  CallScratchScope(const CallScratchScope&) = delete;
  CallScratchScope& operator=(const CallScratchScope&) = delete;

 private:
  CallScratch* previous_;
};

// Opened by every microkernel entry point: the blocks it takes from the active region (if any) go
// back when it returns. Thread-compatible.
class MicrokernelScratchScope {
 public:
  MicrokernelScratchScope();
  ~MicrokernelScratchScope();
  MicrokernelScratchScope(const MicrokernelScratchScope&) = delete;
  MicrokernelScratchScope& operator=(const MicrokernelScratchScope&) = delete;

 private:
  CallScratch* scratch_;
  CallScratch::Mark mark_{};
};

// Adds up the region blocks a microkernel takes (CallScratchBlockBytes each), saturating at -1 on
// overflow. Thread-compatible value type.
class ScratchTally {
 public:
  void AddBytes(int64_t bytes);
  void AddFloats(int64_t floats) { AddBytes(Mul(floats, 4)); }
  void AddIndices(int64_t count) { AddBytes(Mul(count, 8)); }
  // Adds region bytes sized already (another sizing function's result; -1 propagates).
  void AddSized(int64_t region_bytes);
  // The sum, or -1 after an overflow or a negative request.
  int64_t bytes() const { return bytes_; }

 private:
  static int64_t Mul(int64_t a, int64_t b);
  int64_t bytes_ = 0;
};

}  // namespace cuvil::uk

#endif  // CUVIL_RUNTIME_UKERNELS_CALL_SCRATCH_H_
