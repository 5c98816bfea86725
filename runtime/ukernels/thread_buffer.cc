#include "thread_buffer.h"

#include <cstdint>
#include <cstdlib>
#include <type_traits>

#include "call_scratch.h"

namespace cuvil::uk {
namespace {

// Bytes all ThreadBuffers hold (builtins, not <atomic>: the AOT cross builds lack the headers).
int64_t held_bytes = 0;

void Count(int64_t bytes) { __atomic_add_fetch(&held_bytes, bytes, __ATOMIC_RELAXED); }

int64_t BytesOf(size_t floats) { return static_cast<int64_t>(floats * sizeof(float)); }

// The thread's buffers holding heap blocks, freed when the thread exits. Only a buffer's first
// heap block touches it, so a thread that only ever runs in call scratch registers nothing.
struct HeapBuffers {
  ThreadBuffer* head = nullptr;
  ~HeapBuffers() {
    for (ThreadBuffer* b = head; b != nullptr;) b = b->ReleaseHeap();
  }
};

thread_local HeapBuffers heap_buffers;

}  // namespace

static_assert(std::is_trivially_destructible_v<ThreadBuffer>,
              "a thread_local ThreadBuffer must not register a destructor (it would allocate)");

float* ThreadBuffer::Get(size_t floats, bool* fresh) {
  if (floats > SIZE_MAX / sizeof(float) - 16) std::abort();  // no memory holds it
  if (CallScratch* region = ActiveCallScratch(); region != nullptr) {
    const uint64_t generation = CallScratchGeneration();
    const bool valid = region_data_ != nullptr && region_generation_ == generation;
    if (valid && floats <= region_capacity_) {
      if (fresh != nullptr) *fresh = !last_from_region_;
      last_from_region_ = true;
      return region_data_;
    }
    if (void* block = region->Allocate(floats * sizeof(float)); block != nullptr) {
      region_data_ = static_cast<float*>(block);
      region_capacity_ = floats;
      region_generation_ = generation;
      last_from_region_ = true;
      if (fresh != nullptr) *fresh = true;
      return region_data_;
    }
    // The region is full: the heap serves (correct, but this call allocates).
  }
  bool grown = false;
  float* out = GetFromHeap(floats, &grown);
  if (fresh != nullptr) *fresh = grown || last_from_region_;
  last_from_region_ = false;
  return out;
}

float* ThreadBuffer::GetFromHeap(size_t floats, bool* grown) {
  *grown = false;
  if (floats > heap_capacity_ || heap_data_ == nullptr) {
    std::free(heap_data_);
    Count(-BytesOf(heap_capacity_));
    heap_capacity_ = floats > 16 ? (floats + 15) / 16 * 16 : 16;
    heap_data_ = static_cast<float*>(std::aligned_alloc(64, heap_capacity_ * sizeof(float)));
    if (heap_data_ == nullptr) std::abort();
    Count(BytesOf(heap_capacity_));
    *grown = true;
    if (!listed_) {
      listed_ = true;
      next_listed_ = heap_buffers.head;
      heap_buffers.head = this;
    }
  }
  return heap_data_;
}

int64_t* ThreadBuffer::GetIndices(size_t count) {
  static_assert(sizeof(int64_t) == 2 * sizeof(float));
  // Blocks are 64-byte aligned and only ever read as int64 while they serve indices.
  return reinterpret_cast<int64_t*>(Get(2 * count));
}

ThreadBuffer* ThreadBuffer::ReleaseHeap() {
  Count(-BytesOf(heap_capacity_));
  std::free(heap_data_);
  heap_data_ = nullptr;
  heap_capacity_ = 0;
  listed_ = false;
  ThreadBuffer* next = next_listed_;
  next_listed_ = nullptr;
  return next;
}

int64_t ThreadBufferBytes() { return __atomic_load_n(&held_bytes, __ATOMIC_RELAXED); }

}  // namespace cuvil::uk
