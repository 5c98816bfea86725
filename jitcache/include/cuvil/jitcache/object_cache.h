// The JIT cache: compiled models keyed by a content hash, kept in memory and on disk.
//
// The key is the XXH3-128 of the model bytes and its external data files, the compile options,
// the target triple, host CPU name and features, and the compiler's version and build identity.
// A disk entry is one file `<dir>/<key>.cjc`: a versioned, checksummed protobuf header followed by
// raw, page-aligned, checksummed sections (object code, weights; jitcache/proto/jit_cache.proto).
// A hit maps the file read-only and uses the weights in place (they stay in the page cache, shared
// by every process and version that loads them); nothing is copied but the small object code.
// Entries are written to a temporary file and renamed, so readers in other processes sharing the
// directory never see half an entry. A corrupt, truncated or foreign entry is logged, counted,
// removed and recompiled, never loaded: every section is verified before the entry is used.
// Each stored entry also leaves an empty marker `<dir>/size-<model bytes>.cjs` (see MayHold).
// In memory, recently compiled models are kept (bounded by bytes) so loading the same bytes under
// another name or version does not compile again; concurrent lookups of one key compile once.
#ifndef CUVIL_JITCACHE_OBJECT_CACHE_H_
#define CUVIL_JITCACHE_OBJECT_CACHE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/format/compiled_model.h"

namespace cuvil {

class Env;

// Bumped whenever generated code or the CompiledModel contract changes meaning; part of the key.
inline constexpr char kCompilerVersion[] = "cuvil-compiler-2";
// Version of the contract between generated code and the runtime (cuvil_entry's arguments, the
// runtime helpers it calls, the weights and arena layout). Bumped with any change to it; part of
// the build identity that cache keys, cache entries and snapshots check, so code generated
// against another ABI is never loaded.
inline constexpr uint32_t kRuntimeAbiVersion = 1;
// The identity of the code this process generates: compiler version, runtime ABI version, LLVM,
// the GNU build ID of the binary holding the compiler and the code generator's target choices
// (what snapshots record as their build identity). Other records that must not outlive a change
// of the code that produced them (sequence checkpoints) carry it too. Thread-safe.
std::string CodeBuildIdentity();
// Version of the on-disk entry format; entries of another version are refused (and replaced).
inline constexpr uint32_t kCacheFormatVersion = 4;

struct ObjectCacheOptions {
  // Folder of the persistent cache (created when missing); empty keeps the cache in memory only.
  std::string dir;
  // Largest total size of the disk entries; least recently used entries are evicted above it.
  // 0: unlimited.
  uint64_t max_bytes = 0;
  // Largest total size of the compiled models kept in memory; 0 keeps none.
  uint64_t memory_max_bytes = uint64_t{512} << 20;
  // Remember each model file's content digest by its identity (device, inode, size, mtime,
  // ctime) in `dir`, so a hit does not read the whole model to compute its key; a file whose
  // identity differs in any field is hashed again. Needs `dir`.
  bool digest_memo = true;
  // A model file changed less than this long ago is hashed but not remembered: a second change
  // within the same timestamp tick would not show in its stat.
  uint32_t digest_memo_settle_ms = 2000;
  // Use `dir` even when another user owns it or group/others may write it (see private_dir.h);
  // by default Create refuses such a folder (--insecure-cache-dir).
  bool insecure_dir = false;
  // The file system under `dir`: every entry, digest record and size marker is created, written,
  // read, mapped, listed, touched and removed through it (tests pass a FaultInjectionEnv). Not
  // owned; must outlive the cache. Null: Env::Default(), the POSIX file system.
  Env* env = nullptr;
};

// Tiered compilation: which code a model version gets.
enum class CompileTier {
  kFull,    // One compile at full optimisation (CompileOptions::opt_level, 3 by default).
  kFast,    // One quick compile (kFastTierOptLevel).
  kTiered,  // Serve the quick compile, recompile at full optimisation in the background and swap
            // the full-tier kernels in at a safe point; a cached full tier is loaded directly.
};

// LLVM level of the quick tier: O0 (no IR passes, fast instruction selection) takes resnet18's
// LLVM time from ~190 ms to ~15 ms; its code runs ~1.4x slower until the full tier is swapped in
// (the heavy kernels are the runtime's precompiled micro-kernels either way).
inline constexpr int kFastTierOptLevel = 0;

// "full", "fast", "tiered".
const char* CompileTierName(CompileTier tier);
// Parses CompileTierName's spellings; InvalidArgument otherwise.
absl::StatusOr<CompileTier> ParseCompileTier(const std::string& text);

// Where a CompiledModel came from.
enum class CacheOutcome { kMiss, kDiskHit, kMemoryHit };

// "miss", "hit" (disk) or "memory".
const char* CacheOutcomeName(CacheOutcome outcome);

// What one Compile call found.
struct CacheLookup {
  CacheOutcome outcome = CacheOutcome::kMiss;
  std::string key;             // 32 hex digits.
  bool refused_entry = false;  // A disk entry for the key existed but was corrupt or foreign.
  // A compile's disk entry could not be written (logged; counted in ObjectCacheStats); the
  // compiled model is returned all the same.
  bool store_failed = false;
  // Where the lookup's time went ("cache_key", then on a disk read "cache_header", ...), in order.
  std::vector<PhaseTiming> timings;
};

struct ObjectCacheStats {
  uint64_t memory_hits = 0;
  uint64_t disk_hits = 0;
  uint64_t misses = 0;
  uint64_t corrupt = 0;         // Disk entries refused (corrupt, truncated, foreign, old format).
  uint64_t stores = 0;          // Disk entries written.
  uint64_t store_failures = 0;  // Disk entries that could not be written.
  uint64_t evictions = 0;       // Disk entries removed to stay under max_bytes.
};

// $XDG_CACHE_HOME/cuvil, else $HOME/.cache/cuvil. FailedPrecondition when neither is set.
absl::StatusOr<std::string> DefaultJitCacheDir();

// Thread-safe; several processes may share one directory.
class ObjectCache {
 public:
  // Creates the directory (0700) if needed. InvalidArgument when it cannot be created or is not
  // writable; FailedPrecondition when it is owned by another user or writable by group or others
  // (unless options.insecure_dir; see EnsurePrivateDir). Entries, digest records and size markers
  // are written 0600, never through a symlink.
  static absl::StatusOr<std::unique_ptr<ObjectCache>> Create(ObjectCacheOptions options);
  ~ObjectCache();
  ObjectCache(const ObjectCache&) = delete;
  ObjectCache& operator=(const ObjectCache&) = delete;

  // Compiles the ONNX model at `path` (when `bytes` is empty) or held in `bytes`, or returns the
  // cached result for the same key. Compile errors are returned as CompileOnnx* reports them and
  // are not cached. A request with options.emit_llvm_path set always compiles (and stores).
  // `lookup`, when given, says where the result came from.
  absl::StatusOr<CompiledModel> Compile(const std::string& path, const std::string& bytes,
                                        const CompileOptions& options,
                                        CacheLookup* lookup = nullptr);

  // Compile, except that a miss runs `compile` instead of CompileOnnx*: for example the lowering of
  // a model prepared once for all its tiers (see PreparedModel). `compile` must produce what
  // CompileOnnx* would for `path`/`bytes` and `options`, since the result is stored under their
  // key. With `write_disk` false a miss is kept in memory only (a disk entry is still looked up
  // and used): tiered compilation does not write the quick tier, whose entry would cost its time
  // to ready and disk space for as long as the full tier is not cached yet.
  absl::StatusOr<CompiledModel> CompileWith(
      const std::string& path, const std::string& bytes, const CompileOptions& options,
      const std::function<absl::StatusOr<CompiledModel>()>& compile, CacheLookup* lookup = nullptr,
      bool write_disk = true);

  // The cached result for the key Compile would use (memory, else disk), without compiling:
  // NotFound when neither has it (a refused disk entry is counted, logged and removed like in
  // Compile). Lets tiered compilation load a cached full tier instead of starting low.
  absl::StatusOr<CompiledModel> Lookup(const std::string& path, const std::string& bytes,
                                       const CompileOptions& options,
                                       CacheLookup* lookup = nullptr);

  // The cache key (32 hex digits) Compile would use. NotFound when the model cannot be read;
  // InvalidArgument when an external-data file it refers to is one the importer refuses
  // (OpenExternalDataFile: outside the model folder, not a regular file, too large); then Compile
  // returns the importer's error, never reading such a file.
  absl::StatusOr<std::string> Key(const std::string& path, const std::string& bytes,
                                  const CompileOptions& options) const;
  // Whether Key(path, bytes, ...) would read only small files, not the model's contents: `bytes`
  // is empty and the digest memo holds a record for the file's identity now, for a model that
  // refers to no external data. A warm tiered start then looks its full tier up at once instead
  // of racing the lookup against a quick compile (TieredStart). False when the file cannot be read.
  bool DigestIsRemembered(const std::string& path, const std::string& bytes) const;
  // Whether a lookup of this model could hit: the memory has held a model of the same size, or
  // the folder has stored one (each stored entry leaves an empty `size-<bytes>.cjs`
  // marker; markers outlive evicted entries until the eviction that finds them older than every
  // entry left). False: certain to miss (a fresh folder, or one
  // holding only models of other sizes), which lets a tiered start skip its full tier's lookup,
  // whose key hashes the model. One stat of the model and one of the marker.
  bool MayHold(const std::string& path, const std::string& bytes) const;
  // Path of the disk entry for `key` (empty without a directory).
  std::string EntryPath(const std::string& key) const;
  // Drops the in-memory entries (the disk cache is kept); lets tests exercise disk hits.
  void ClearMemory();

  ObjectCacheStats stats() const;
  const ObjectCacheOptions& options() const { return options_; }

 private:
  explicit ObjectCache(ObjectCacheOptions options);
  // Compile and Lookup: the cached result, else (compile_on_miss) a compile, else NotFound.
  // `compile_fn`, when not null, replaces CompileOnnx* on a miss (CompileWith); `write_disk` false
  // keeps a compiled miss off the disk.
  absl::StatusOr<CompiledModel> Get(
      const std::string& path, const std::string& bytes, const CompileOptions& options,
      CacheLookup* lookup, bool compile_on_miss,
      const std::function<absl::StatusOr<CompiledModel>()>* compile_fn = nullptr,
      bool write_disk = true);
  struct Impl;
  ObjectCacheOptions options_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cuvil

#endif  // CUVIL_JITCACHE_OBJECT_CACHE_H_
