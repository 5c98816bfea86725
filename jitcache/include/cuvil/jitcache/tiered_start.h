// The start of a model under CompileTier::kTiered: what serves first, then the full tier.
//
// The JIT cache key hashes the whole model (resnet18: 46 MB, ~33 ms), so the full tier's lookup is
// kept off the ready path unless it is known to be cheap:
// - Warm start (the cache's digest memo knows the model file): the full tier is looked up at once
//   and, when cached, loaded as it is; nothing else is compiled.
// - Certain miss (ObjectCache::MayHold: nothing in memory and no model of this size ever stored
//   in the folder, as in a fresh folder or for a new model): the lookup is not run; the quick
//   tier is compiled on the calling thread, alone on the cores. The tier-up's own lookup still
//   finds an entry that another process stored meanwhile.
// - Otherwise the lookup runs on a helper thread while another prepares and lowers the quick tier
//   without any cache key (the quick tier is never written to disk, and an in-memory entry for it
//   is not worth the hash). Whichever can serve first is returned: a full-tier hit (the quick
//   compile then finishes unused on its thread and is dropped) or the quick tier.
// The tier-up takes the lookup's outcome: a hit that arrived after the quick tier was ready is the
// full tier as cached (no compile); a miss lowers the quick tier's preparation at full
// optimisation through the cache, which stores it for the next warm start. The lookup is counted
// once in ObjectCacheStats (a refused entry as corrupt); the quick tier is not counted.
#ifndef CUVIL_JITCACHE_TIERED_START_H_
#define CUVIL_JITCACHE_TIERED_START_H_

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/format/compiled_model.h"
#include "cuvil/jitcache/object_cache.h"

namespace cuvil {

// What a tiered start compiles: the model at `path`, or held in `bytes` when not empty, and the
// options of its two tiers (they differ in opt_level only). Thread-compatible value.
struct TieredSource {
  std::string path;
  std::string bytes;
  CompileOptions full_options;
  CompileOptions quick_options;
  // Tests only: runs where the quick tier's compile starts (on its helper thread when it races a
  // lookup), so a test can make it throw. Empty in production.
  std::function<void()> test_before_quick;
};

// Thread-compatible: one thread at a time calls its methods (a loader thread may hand it to a
// tier-up thread); the helper threads it owns synchronise with it internally.
class TieredStart {
 public:
  // Starts `source` and blocks until a tier can serve (see the file comment). `cache` may be null:
  // then the quick tier is compiled on this thread and the tier-up compiles without a cache.
  // `cache` must outlive the returned object.
  static std::unique_ptr<TieredStart> Begin(ObjectCache* cache, TieredSource source);
  // Waits for the helper threads: a quick compile that lost to a full-tier hit, or a lookup the
  // tier-up never asked for. Destroy it off the ready path when full_tier() (the quick compile
  // may still run).
  ~TieredStart();
  TieredStart(const TieredStart&) = delete;
  TieredStart& operator=(const TieredStart&) = delete;

  // Whether what serves is the cached full tier (no tier-up needed), else the quick tier.
  bool full_tier() const { return full_tier_; }

  // What serves: the cached full tier, else the quick tier or the quick compile's error. Moves it
  // out: call once.
  absl::StatusOr<CompiledModel> TakeReady();

  // The full tier's lookup when it had finished by the time a tier could serve (on full_tier()
  // the hit; else a miss, refused_entry set when a corrupt entry was refused and counted), null
  // while it was still running, when it was skipped (certain miss) or without a cache.
  const CacheLookup* ready_lookup() const { return ready_lookup_known_ ? &ready_lookup_ : nullptr; }

  // The full tier for the tier-up; only when !full_tier(), after TakeReady, once. Waits for the
  // lookup; a hit is returned as cached, a miss is lowered from the quick tier's preparation (else
  // compiled from the source) at full_options and, with a cache, stored there. `lookup` (when not
  // null) says where the result came from (kMiss: compiled; store_failed). `start_lookup` (when
  // not null) receives the lookup begun at the start (refused_entry, timings; kMiss with no key
  // when it was skipped or without a cache).
  absl::StatusOr<CompiledModel> TierUp(CacheLookup* lookup, CacheLookup* start_lookup = nullptr);

 private:
  struct State;
  explicit TieredStart(std::unique_ptr<State> state);

  // Declared first: the threads below use it until they are joined in the destructor.
  std::unique_ptr<State> state_;
  std::thread lookup_thread_;
  std::thread quick_thread_;
  bool full_tier_ = false;
  bool ready_lookup_known_ = false;
  CacheLookup ready_lookup_;
};

}  // namespace cuvil

#endif  // CUVIL_JITCACHE_TIERED_START_H_
