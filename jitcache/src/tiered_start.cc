#include "cuvil/jitcache/tiered_start.h"

#include <functional>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "catching.h"

namespace cuvil {
namespace {

using jitcache_internal::Catching;  // No exception may leave a jitcache thread.

// A thread running `fn`, or an unjoinable one when none can be created (the caller then runs
// `fn` itself).
template <typename Fn>
std::thread TryThread(Fn&& fn) {
  try {
    return std::thread(std::forward<Fn>(fn));
  } catch (const std::system_error&) {
    return std::thread();
  }
}

}  // namespace

// Shared by the caller and the helper threads; every field a helper writes is guarded by `mu`.
struct TieredStart::State {
  ObjectCache* const cache;
  const TieredSource source;

  absl::Mutex mu;
  bool lookup_done ABSL_GUARDED_BY(mu) = false;
  absl::StatusOr<CompiledModel> lookup_result ABSL_GUARDED_BY(mu) =
      absl::NotFoundError("not looked up");
  CacheLookup lookup ABSL_GUARDED_BY(mu);
  bool quick_done ABSL_GUARDED_BY(mu) = false;
  absl::StatusOr<CompiledModel> quick_result ABSL_GUARDED_BY(mu) =
      absl::NotFoundError("not compiled");
  // The quick tier's preparation (import, graph passes, memory plan), which the tier-up lowers
  // again at full optimisation; null when the preparation failed.
  std::shared_ptr<const PreparedModel> prepared ABSL_GUARDED_BY(mu);

  State(ObjectCache* c, TieredSource s) : cache(c), source(std::move(s)) {}

  // The full tier's cache lookup (hashes the model unless its digest is remembered). Never throws:
  // it runs on a helper thread.
  void RunLookup() {
    CacheLookup l;
    absl::StatusOr<CompiledModel> r = Catching("the full tier's cache lookup", [&] {
      return cache->Lookup(source.path, source.bytes, source.full_options, &l);
    });
    absl::MutexLock lock(&mu);
    lookup_result = std::move(r);
    lookup = std::move(l);
    lookup_done = true;
  }

  // The quick tier, straight from the compiler: no cache key, no cache entry. Never throws: it
  // runs on a helper thread.
  void RunQuick() {
    absl::StatusOr<std::shared_ptr<const PreparedModel>> p =
        Catching("preparing the quick tier", [&] {
          if (source.test_before_quick) source.test_before_quick();
          return source.bytes.empty() ? PrepareOnnxFile(source.path, source.quick_options)
                                      : PrepareOnnxBytes(source.bytes, source.quick_options);
        });
    absl::StatusOr<CompiledModel> r =
        p.ok() ? Catching("compiling the quick tier",
                          [&] { return (*p)->Lower(source.quick_options); })
               : absl::StatusOr<CompiledModel>(p.status());
    absl::MutexLock lock(&mu);
    if (p.ok()) prepared = *std::move(p);
    quick_result = std::move(r);
    quick_done = true;
  }

  bool LookupHit() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return lookup_done && lookup_result.ok();
  }
};

TieredStart::TieredStart(std::unique_ptr<State> state) : state_(std::move(state)) {}

TieredStart::~TieredStart() {
  if (lookup_thread_.joinable()) lookup_thread_.join();
  if (quick_thread_.joinable()) quick_thread_.join();
}

std::unique_ptr<TieredStart> TieredStart::Begin(ObjectCache* cache, TieredSource source) {
  std::unique_ptr<TieredStart> start(
      new TieredStart(std::make_unique<State>(cache, std::move(source))));
  State* const s = start->state_.get();
  bool lookup_pending = false;
  if (cache != nullptr) {
    if (cache->DigestIsRemembered(s->source.path, s->source.bytes)) {
      s->RunLookup();  // A few small reads: a warm start loads its full tier without racing.
    } else if (!cache->MayHold(s->source.path, s->source.bytes)) {
      // Certain to miss (a fresh folder, or no model of this size stored): no hash competes with
      // the quick tier for the cores; the tier-up computes the key (and would still find an entry
      // another process stored meanwhile) and stores the full tier.
    } else {
      start->lookup_thread_ = TryThread([s] { s->RunLookup(); });
      if (start->lookup_thread_.joinable()) {
        lookup_pending = true;
      } else {
        s->RunLookup();  // No thread to race it on.
      }
    }
  }
  bool hit;
  {
    absl::MutexLock lock(&s->mu);
    hit = s->LookupHit();
  }
  if (!hit && lookup_pending) {
    start->quick_thread_ = TryThread([s] { s->RunQuick(); });
    if (!start->quick_thread_.joinable()) s->RunQuick();
    absl::MutexLock lock(&s->mu);
    auto can_serve = [s]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(s->mu) {
      // A failed quick tier waits for the lookup, whose hit would serve all the same.
      return s->LookupHit() || (s->quick_done && (s->quick_result.ok() || s->lookup_done));
    };
    s->mu.Await(absl::Condition(&can_serve));
    hit = s->LookupHit();  // Both ready: the full tier's code is the better one.
  } else if (!hit) {
    s->RunQuick();
  }
  absl::MutexLock lock(&s->mu);
  start->full_tier_ = hit;
  start->ready_lookup_known_ = s->lookup_done;
  if (s->lookup_done) start->ready_lookup_ = s->lookup;
  return start;
}

absl::StatusOr<CompiledModel> TieredStart::TakeReady() {
  absl::MutexLock lock(&state_->mu);
  absl::StatusOr<CompiledModel>& ready = full_tier_ ? state_->lookup_result : state_->quick_result;
  absl::StatusOr<CompiledModel> out = std::move(ready);
  ready = absl::FailedPreconditionError("TieredStart::TakeReady called twice");
  return out;
}

absl::StatusOr<CompiledModel> TieredStart::TierUp(CacheLookup* lookup, CacheLookup* start_lookup) {
  State* const s = state_.get();
  if (lookup_thread_.joinable()) lookup_thread_.join();
  std::shared_ptr<const PreparedModel> prepared;
  {
    absl::MutexLock lock(&s->mu);
    if (start_lookup != nullptr) *start_lookup = s->lookup;
    if (s->LookupHit()) {  // Arrived after the quick tier was ready: nothing to compile.
      if (lookup != nullptr) *lookup = s->lookup;
      absl::StatusOr<CompiledModel> out = std::move(s->lookup_result);
      s->lookup_result = absl::FailedPreconditionError("TieredStart::TierUp called twice");
      return out;
    }
    prepared = s->prepared;
  }
  const CompileOptions& full = s->source.full_options;
  auto compile = [&]() -> absl::StatusOr<CompiledModel> {
    if (prepared != nullptr) return prepared->Lower(full);
    return s->source.bytes.empty() ? CompileOnnxFile(s->source.path, full)
                                   : CompileOnnxBytes(s->source.bytes, full);
  };
  if (s->cache == nullptr) {
    if (lookup != nullptr) *lookup = CacheLookup();
    return Catching("compiling the full tier", compile);
  }
  // The key is computed again: from the digest memo the lookup recorded, unless the model file
  // changed too recently to be remembered (then hashed again, on the tier-up's thread).
  return s->cache->CompileWith(s->source.path, s->source.bytes, full, compile, lookup);
}

}  // namespace cuvil
