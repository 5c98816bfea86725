#include "cuvil/jitcache/object_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <list>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cache_key.h"
#include "cache_store.h"
#include "catching.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/private_dir.h"
#include "digest_memo.h"
#include "laps.h"
#include "spdlog/spdlog.h"

namespace cuvil {
namespace {

using jitcache_internal::Catching;  // No exception may leave a jitcache thread.
using jitcache_internal::Laps;

uint64_t SizeOf(const CompiledModel& m) { return m.object_code.size() + m.weights.size(); }

// The size of the model Key hashes: `bytes`, else the file at `path` (nullopt when unreadable).
std::optional<uint64_t> ModelSizeOf(const std::string& path, const std::string& bytes) {
  if (!bytes.empty()) return bytes.size();
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return std::nullopt;
  return static_cast<uint64_t>(st.st_size);
}

}  // namespace

const char* CacheOutcomeName(CacheOutcome outcome) {
  switch (outcome) {
    case CacheOutcome::kMiss:
      return "miss";
    case CacheOutcome::kDiskHit:
      return "hit";
    case CacheOutcome::kMemoryHit:
      return "memory";
  }
  return "?";
}

const char* CompileTierName(CompileTier tier) {
  switch (tier) {
    case CompileTier::kFull:
      return "full";
    case CompileTier::kFast:
      return "fast";
    case CompileTier::kTiered:
      return "tiered";
  }
  return "?";
}

absl::StatusOr<CompileTier> ParseCompileTier(const std::string& text) {
  for (CompileTier t : {CompileTier::kFull, CompileTier::kFast, CompileTier::kTiered}) {
    if (text == CompileTierName(t)) return t;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("compile tier '", text, "' is not one of tiered, fast, full"));
}

absl::StatusOr<std::string> DefaultJitCacheDir() {
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg != nullptr && xdg[0] == '/') return absl::StrCat(xdg, "/cuvil");
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return absl::StrCat(home, "/.cache/cuvil");
  return absl::FailedPreconditionError("neither XDG_CACHE_HOME nor HOME is set");
}

struct ObjectCache::Impl {
  mutable absl::Mutex mu;
  // In-memory LRU: most recently used at the front.
  std::list<std::string> order ABSL_GUARDED_BY(mu);
  struct MemEntry {
    std::shared_ptr<const CompiledModel> model;
    std::list<std::string>::iterator pos;
  };
  std::map<std::string, MemEntry> memory ABSL_GUARDED_BY(mu);
  uint64_t memory_bytes ABSL_GUARDED_BY(mu) = 0;
  // Sizes of the models ever kept in memory (MayHold; not pruned with the entries).
  std::set<uint64_t> memory_model_sizes ABSL_GUARDED_BY(mu);
  // Keys being compiled by some thread; others with the same key wait instead of compiling.
  std::set<std::string> inflight ABSL_GUARDED_BY(mu);
  // Owns one key of `inflight`: removes it (which wakes its waiters: they Await on mu) on every
  // way out of the owning call, an early return or an exception included.
  class InflightGuard {
   public:
    // Under impl->mu: adds `key`.
    InflightGuard(Impl* impl, std::string key) ABSL_NO_THREAD_SAFETY_ANALYSIS
        : impl_(impl),
          key_(std::move(key)) {
      impl_->inflight.insert(key_);
    }
    ~InflightGuard() {
      if (impl_ == nullptr) return;
      absl::MutexLock lock(&impl_->mu);
      impl_->inflight.erase(key_);
    }
    InflightGuard(const InflightGuard&) = delete;
    InflightGuard& operator=(const InflightGuard&) = delete;
    // Under mu: removes the key now (the destructor then does nothing).
    void EraseLocked() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      impl_->inflight.erase(key_);
      impl_ = nullptr;
    }

   private:
    Impl* impl_;
    std::string key_;
  };
  ObjectCacheStats stats ABSL_GUARDED_BY(mu);
  // Model digests by file identity; null without a directory or with the memo off.
  std::unique_ptr<const jitcache_internal::DigestMemo> memo;
  // The folder; null without a directory.
  std::unique_ptr<const jitcache_internal::CacheStore> store;
};

ObjectCache::ObjectCache(ObjectCacheOptions options)
    : options_(std::move(options)), impl_(std::make_unique<Impl>()) {
  if (!options_.dir.empty()) {
    impl_->store = std::make_unique<const jitcache_internal::CacheStore>(
        options_.dir, options_.max_bytes, options_.env);
  }
  if (!options_.dir.empty() && options_.digest_memo) {
    impl_->memo = std::make_unique<const jitcache_internal::DigestMemo>(
        options_.dir, std::chrono::milliseconds(options_.digest_memo_settle_ms), options_.env);
  }
}

ObjectCache::~ObjectCache() = default;

absl::StatusOr<std::unique_ptr<ObjectCache>> ObjectCache::Create(ObjectCacheOptions options) {
  if (!options.dir.empty()) {
    if (absl::Status s = EnsurePrivateDir(options.dir, options.insecure_dir, "JIT cache directory",
                                          "--insecure-cache-dir");
        !s.ok()) {
      return s;
    }
    if (access(options.dir.c_str(), W_OK | R_OK | X_OK) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("JIT cache directory ", options.dir, " is not writable"));
    }
  }
  return std::unique_ptr<ObjectCache>(new ObjectCache(std::move(options)));
}

absl::StatusOr<std::string> ObjectCache::Key(const std::string& path, const std::string& bytes,
                                             const CompileOptions& options) const {
  return jitcache_internal::CacheKeyOf(path, bytes, options, impl_->memo.get());
}

bool ObjectCache::DigestIsRemembered(const std::string& path, const std::string& bytes) const {
  if (!bytes.empty() || impl_->memo == nullptr) return false;
  struct stat st;
  if (stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) return false;
  std::optional<jitcache_internal::MemoRecord> memo =
      impl_->memo->Find(jitcache_internal::StampOf(st));
  return memo.has_value() && memo->no_external_data;
}

std::string ObjectCache::EntryPath(const std::string& key) const {
  if (impl_->store == nullptr) return "";
  return impl_->store->EntryPath(key);
}

void ObjectCache::ClearMemory() {
  absl::MutexLock lock(&impl_->mu);
  impl_->memory.clear();
  impl_->order.clear();
  impl_->memory_bytes = 0;
}

ObjectCacheStats ObjectCache::stats() const {
  absl::MutexLock lock(&impl_->mu);
  return impl_->stats;
}

bool ObjectCache::MayHold(const std::string& path, const std::string& bytes) const {
  std::optional<uint64_t> size = ModelSizeOf(path, bytes);
  if (!size.has_value()) return true;  // Let the lookup report the unreadable model.
  {
    absl::MutexLock lock(&impl_->mu);
    if (impl_->memory_model_sizes.count(*size) != 0) return true;
  }
  if (options_.dir.empty()) return false;
  return impl_->store->HasSizeMarker(*size);
}

absl::StatusOr<CompiledModel> ObjectCache::Compile(const std::string& path,
                                                   const std::string& bytes,
                                                   const CompileOptions& options,
                                                   CacheLookup* lookup) {
  return Catching("JIT cache compile",
                  [&] { return Get(path, bytes, options, lookup, /*compile_on_miss=*/true); });
}

absl::StatusOr<CompiledModel> ObjectCache::CompileWith(
    const std::string& path, const std::string& bytes, const CompileOptions& options,
    const std::function<absl::StatusOr<CompiledModel>()>& compile, CacheLookup* lookup,
    bool write_disk) {
  return Catching("JIT cache compile", [&] {
    return Get(path, bytes, options, lookup, /*compile_on_miss=*/true, &compile, write_disk);
  });
}

absl::StatusOr<CompiledModel> ObjectCache::Lookup(const std::string& path, const std::string& bytes,
                                                  const CompileOptions& options,
                                                  CacheLookup* lookup) {
  return Catching("JIT cache lookup",
                  [&] { return Get(path, bytes, options, lookup, /*compile_on_miss=*/false); });
}

absl::StatusOr<CompiledModel> ObjectCache::Get(
    const std::string& path, const std::string& bytes, const CompileOptions& options,
    CacheLookup* lookup, bool compile_on_miss,
    const std::function<absl::StatusOr<CompiledModel>()>* compile_fn, bool write_disk) {
  CacheLookup local;
  if (lookup == nullptr) lookup = &local;
  *lookup = CacheLookup();
  auto compile = [&]() -> absl::StatusOr<CompiledModel> {
    return Catching("compile", [&]() -> absl::StatusOr<CompiledModel> {
      if (compile_fn != nullptr) return (*compile_fn)();
      return bytes.empty() ? CompileOnnxFile(path, options) : CompileOnnxBytes(bytes, options);
    });
  };
  Laps laps(&lookup->timings);
  auto key = Key(path, bytes, options);
  laps.Lap("cache_key");
  if (!key.ok()) {
    // A refused external-data file: the importer refuses it too, so say why without compiling.
    if (absl::IsInvalidArgument(key.status())) return key.status();
    // Let the compiler report the unreadable model.
    return compile_on_miss ? compile() : key.status();
  }
  lookup->key = *key;
  const bool emit = !options.emit_llvm_path.empty() && compile_on_miss;

  // Memory first; wait while another thread compiles the same key.
  std::shared_ptr<const CompiledModel> in_memory;
  std::optional<Impl::InflightGuard> inflight;  // Set once this call owns the key.
  {
    absl::MutexLock lock(&impl_->mu);
    auto not_inflight = [&]() ABSL_SHARED_LOCKS_REQUIRED(impl_->mu) {
      return impl_->inflight.count(*key) == 0;
    };
    impl_->mu.Await(absl::Condition(&not_inflight));
    auto it = impl_->memory.find(*key);
    if (it != impl_->memory.end() && !emit) {
      impl_->order.splice(impl_->order.begin(), impl_->order, it->second.pos);
      ++impl_->stats.memory_hits;
      lookup->outcome = CacheOutcome::kMemoryHit;
      in_memory = it->second.model;
    } else {
      inflight.emplace(impl_.get(), *key);
    }
  }
  if (in_memory != nullptr) return CompiledModel(*in_memory);  // Copied outside the lock.
  const std::string file = EntryPath(*key);  // For messages; empty without a folder.
  // For MayHold: the marker of a stored entry, the size set of a model kept in memory.
  const std::optional<uint64_t> model_size = ModelSizeOf(path, bytes);
  absl::StatusOr<CompiledModel> result = absl::UnknownError("unset");
  bool from_disk = false;
  if (!file.empty() && !emit) {
    result = Catching("reading a JIT cache entry",
                      [&] { return impl_->store->Read(*key, &lookup->timings); });
    if (result.ok()) {
      from_disk = true;
      // A hit makes the entry and its size marker recently used; the marker first, so it is
      // never newer than its entry (Evict removes side files no newer than an evicted entry).
      if (model_size.has_value()) impl_->store->TouchSizeMarker(*model_size);
      impl_->store->MarkUsed(*key);
    } else if (absl::IsDataLoss(result.status())) {
      lookup->refused_entry = true;
      spdlog::warn("JIT cache: refusing entry {} ({}); recompiling", file,
                   std::string(result.status().message()));
      impl_->store->Remove(*key);
    }
  }
  uint64_t evicted = 0;
  bool stored = false;
  if (!from_disk && !compile_on_miss) {
    result = absl::NotFoundError(absl::StrCat("JIT cache has no entry ", *key));
  } else if (!from_disk) {
    result = compile();
    if (result.ok() && !file.empty() && write_disk) {
      // Before the entry, so it is not newer than the entry (see above); a marker of a store that
      // then fails only costs a tiered start of a model this size one lookup.
      if (model_size.has_value()) impl_->store->TouchSizeMarker(*model_size);
      if (auto mapped = impl_->store->Write(*key, *result); mapped.ok()) {
        result->weights = std::move(*mapped);  // Frees the compiler's heap copy.
        stored = true;
        evicted = impl_->store->Evict(*key);
      } else {
        lookup->store_failed = true;
        spdlog::warn("JIT cache: {}", std::string(mapped.status().message()));
      }
    }
  }
  absl::MutexLock lock(&impl_->mu);
  inflight->EraseLocked();
  if (lookup->refused_entry) ++impl_->stats.corrupt;
  if (stored) ++impl_->stats.stores;
  if (lookup->store_failed) ++impl_->stats.store_failures;
  impl_->stats.evictions += evicted;
  if (!result.ok()) return result;
  if (from_disk) {
    ++impl_->stats.disk_hits;
    lookup->outcome = CacheOutcome::kDiskHit;
  } else {
    ++impl_->stats.misses;
    lookup->outcome = CacheOutcome::kMiss;
  }
  const uint64_t size = SizeOf(*result);
  if (size <= options_.memory_max_bytes && impl_->memory.count(*key) == 0) {
    if (model_size.has_value()) impl_->memory_model_sizes.insert(*model_size);
    impl_->order.push_front(*key);
    impl_->memory[*key] = {std::make_shared<const CompiledModel>(*result), impl_->order.begin()};
    impl_->memory_bytes += size;
    while (impl_->memory_bytes > options_.memory_max_bytes && !impl_->order.empty()) {
      auto victim = impl_->memory.find(impl_->order.back());
      impl_->memory_bytes -= SizeOf(*victim->second.model);
      impl_->memory.erase(victim);
      impl_->order.pop_back();
    }
  }
  return result;
}

}  // namespace cuvil
