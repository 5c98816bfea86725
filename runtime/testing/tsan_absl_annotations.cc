// ThreadSanitizer builds only. Debian's abseil is not built with TSan, so TSan sees none of
// absl::Mutex's happens-before edges and reports every guarded access as a race. This file
// interposes the out-of-line Mutex and CondVar entry points (the executable's definitions win
// over the shared library's), forwards to the real ones and adds acquire/release annotations,
// as a TSan-built abseil does. absl::Notification is not covered (HasBeenNotified is inline).
#include <dlfcn.h>
#include <sanitizer/tsan_interface.h>

#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "absl/synchronization/mutex.h"

namespace {

template <typename Fn>
Fn Real(const char* mangled) {
  void* sym = dlsym(RTLD_NEXT, mangled);
  if (sym == nullptr) {
    std::fprintf(stderr, "tsan_absl_annotations: %s not found\n", mangled);
    std::abort();
  }
  return reinterpret_cast<Fn>(sym);
}

// Itanium mangling of absl::<inline namespace>::name; the namespace is checked below.
#define ABSL_MANGLED(name) "_ZN4absl7debian3" name

struct AwaitContext {
  const absl::Condition* cond;
  absl::Mutex* mu;
};

// absl evaluates conditions with the mutex held inside its own (uninstrumented) lock and unlock
// paths, in the waiter or the unlocking thread: bracket each evaluation as a critical section.
bool EvalAcquired(AwaitContext* ctx) {
  __tsan_acquire(ctx->mu);
  bool met = ctx->cond->Eval();
  __tsan_release(ctx->mu);
  return met;
}

}  // namespace

#define CUVIL_STRINGIFY2(x) #x
#define CUVIL_STRINGIFY(x) CUVIL_STRINGIFY2(x)
static_assert(std::string_view(CUVIL_STRINGIFY(ABSL_OPTION_INLINE_NAMESPACE_NAME)) == "debian3",
              "update ABSL_MANGLED for this abseil's inline namespace");

namespace absl {
ABSL_NAMESPACE_BEGIN

void Mutex::Lock() {
  static auto real = Real<void (*)(Mutex*)>(ABSL_MANGLED("5Mutex4LockEv"));
  real(this);
  __tsan_acquire(this);
}

void Mutex::Unlock() {
  static auto real = Real<void (*)(Mutex*)>(ABSL_MANGLED("5Mutex6UnlockEv"));
  __tsan_release(this);
  real(this);
}

bool Mutex::TryLock() {
  static auto real = Real<bool (*)(Mutex*)>(ABSL_MANGLED("5Mutex7TryLockEv"));
  bool locked = real(this);
  if (locked) __tsan_acquire(this);
  return locked;
}

void Mutex::ReaderLock() {
  static auto real = Real<void (*)(Mutex*)>(ABSL_MANGLED("5Mutex10ReaderLockEv"));
  real(this);
  __tsan_acquire(this);
}

void Mutex::ReaderUnlock() {
  static auto real = Real<void (*)(Mutex*)>(ABSL_MANGLED("5Mutex12ReaderUnlockEv"));
  __tsan_release(this);
  real(this);
}

void Mutex::Await(const Condition& cond) {
  static auto real =
      Real<void (*)(Mutex*, const Condition&)>(ABSL_MANGLED("5Mutex5AwaitERKNS0_9ConditionE"));
  AwaitContext ctx{&cond, this};
  __tsan_release(this);
  real(this, Condition(&EvalAcquired, &ctx));
  __tsan_acquire(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, Duration timeout) {
  static auto real = Real<bool (*)(Mutex*, const Condition&, Duration)>(
      ABSL_MANGLED("5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE"));
  AwaitContext ctx{&cond, this};
  __tsan_release(this);
  bool met = real(this, Condition(&EvalAcquired, &ctx), timeout);
  __tsan_acquire(this);
  return met;
}

void Mutex::LockWhen(const Condition& cond) {
  static auto real =
      Real<void (*)(Mutex*, const Condition&)>(ABSL_MANGLED("5Mutex8LockWhenERKNS0_9ConditionE"));
  AwaitContext ctx{&cond, this};
  real(this, Condition(&EvalAcquired, &ctx));
  __tsan_acquire(this);
}

void CondVar::Wait(Mutex* mu) {
  static auto real = Real<void (*)(CondVar*, Mutex*)>(ABSL_MANGLED("7CondVar4WaitEPNS0_5MutexE"));
  __tsan_release(mu);
  real(this, mu);
  __tsan_acquire(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, Duration timeout) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, Duration)>(
      ABSL_MANGLED("7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE"));
  __tsan_release(mu);
  bool timed_out = real(this, mu, timeout);
  __tsan_acquire(mu);
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, Time deadline) {
  static auto real = Real<bool (*)(CondVar*, Mutex*, Time)>(
      ABSL_MANGLED("7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE"));
  __tsan_release(mu);
  bool timed_out = real(this, mu, deadline);
  __tsan_acquire(mu);
  return timed_out;
}

ABSL_NAMESPACE_END
}  // namespace absl

namespace {

// Debian's abseil keeps its debug deadlock graph (GraphCycles) on, a global structure guarded by
// an internal spin lock TSan cannot see either, so two threads locking unrelated mutexes are
// reported as racing inside it. The server turns the detection off too (server/src/main.cc).
const bool kDeadlockDetectionOff = [] {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return true;
}();

}  // namespace
