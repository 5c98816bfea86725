#include "call_scratch.h"

namespace cuvil::uk {
namespace {

constexpr size_t kAlign = 64;

// Written at the start of every block: the block before it and whether it was freed.
struct Header {
  size_t previous;  // header offset of the block below, or ~0
  bool freed;
};
static_assert(sizeof(Header) <= kAlign);

// Plain thread-locals (constant initialised, nothing to destroy): touching them allocates nothing.
thread_local CallScratch* active = nullptr;
thread_local uint64_t generation = 0;

}  // namespace

int64_t CallScratchBlockBytes(int64_t bytes) {
  int64_t rounded = 0;
  if (bytes < 0 || __builtin_add_overflow(bytes, int64_t{kAlign - 1}, &rounded)) return -1;
  rounded = rounded / int64_t{kAlign} * int64_t{kAlign};
  return __builtin_add_overflow(rounded, int64_t{kAlign}, &rounded) ? -1 : rounded;
}

CallScratch::CallScratch(void* base, size_t bytes)
    : base_(static_cast<char*>(base)), size_(base == nullptr ? 0 : bytes) {}

void* CallScratch::Allocate(size_t bytes) {
  const size_t room = size_ - top_;
  if (bytes > room) {
    ++misses_;
    return nullptr;
  }
  const size_t block = (bytes + kAlign - 1) / kAlign * kAlign;
  if (kAlign + block > room) {
    ++misses_;
    return nullptr;
  }
  auto* h = reinterpret_cast<Header*>(base_ + top_);
  h->previous = last_;
  h->freed = false;
  last_ = top_;
  top_ += kAlign + block;
  if (top_ > high_water_) high_water_ = top_;
  return base_ + last_ + kAlign;
}

bool CallScratch::Owns(const void* p) const {
  const char* c = static_cast<const char*>(p);
  return base_ != nullptr && c >= base_ && c < base_ + size_;
}

void CallScratch::Free(void* p) {
  reinterpret_cast<Header*>(static_cast<char*>(p) - kAlign)->freed = true;
  // Pop every freed block on top: blocks freed out of order go back with the last of them.
  while (last_ != kNoBlock) {
    const Header* h = reinterpret_cast<const Header*>(base_ + last_);
    if (!h->freed) break;
    top_ = last_;
    last_ = h->previous;
  }
}

CallScratch* ActiveCallScratch() { return active; }

uint64_t CallScratchGeneration() { return generation; }

CallScratchScope::CallScratchScope(CallScratch* scratch) : previous_(active) {
  active = scratch;
  ++generation;
}

CallScratchScope::~CallScratchScope() {
  active = previous_;
  ++generation;
}

MicrokernelScratchScope::MicrokernelScratchScope() : scratch_(active) {
  if (scratch_ == nullptr) return;
  mark_ = scratch_->Save();
  ++generation;
}

MicrokernelScratchScope::~MicrokernelScratchScope() {
  if (scratch_ == nullptr) return;
  scratch_->Restore(mark_);
  ++generation;
}

int64_t ScratchTally::Mul(int64_t a, int64_t b) {
  int64_t out = 0;
  return a < 0 || __builtin_mul_overflow(a, b, &out) ? -1 : out;
}

void ScratchTally::AddBytes(int64_t bytes) { AddSized(CallScratchBlockBytes(bytes)); }

void ScratchTally::AddSized(int64_t region_bytes) {
  if (bytes_ < 0 || region_bytes < 0 || __builtin_add_overflow(bytes_, region_bytes, &bytes_)) {
    bytes_ = -1;
  }
}

}  // namespace cuvil::uk
