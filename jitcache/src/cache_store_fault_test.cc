// Fault injection under the JIT cache's folder: every write a store makes (the digest record, the
// size marker, the entry's temporary file, its rename, the evictions) is made to fail in turn with
// ENOSPC, EIO and a torn write that crashes the process. Whatever fails, the compile still returns
// a model that runs, and the next process (a fresh cache over the same folder with the real Env)
// either misses — and would compile again — or reads a valid entry: no partial file is ever read
// back as valid.
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "cache_store.h"
#include "cuvil/compiler/compiler.h"
#include "cuvil/jitcache/env.h"
#include "cuvil/jitcache/fault_injection_env.h"
#include "cuvil/jitcache/jit_engine.h"
#include "cuvil/jitcache/object_cache.h"
#include "gtest/gtest.h"
#include "test_dirs.h"
#include "test_models.h"

namespace cuvil {
namespace {
namespace fs = std::filesystem;

constexpr WriteFault kFaults[] = {WriteFault::kNoSpace, WriteFault::kIoError,
                                  WriteFault::kTornWrite};

// Whether `model` computes y = x + value over float32[2, 8].
bool Computes(CompiledModel model, float value) {
  auto engine = JitEngine::Create();
  if (!engine.ok()) return false;
  auto loaded = (*engine)->Load("m/1", std::move(model));
  if (!loaded.ok()) return false;
  HostTensor x(DType::kFloat32, {2, 8});
  for (int i = 0; i < 16; ++i) x.data_as<float>()[i] = static_cast<float>(i);
  auto out = (*loaded)->Run({x});
  if (!out.ok()) return false;
  for (int i = 0; i < 16; ++i) {
    if ((*out)[0].data_as<float>()[i] != static_cast<float>(i) + value) return false;
  }
  return true;
}

void WriteFile(const fs::path& path, const std::string& data) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << data;
}

class CacheStoreFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::FreshTestDir("cuvil_cache_fault_test");
    fs::remove_all(root_);
    fs::create_directories(root_ / "model");
    model_path_ = (root_ / "model" / "model.onnx").string();
    WriteFile(model_path_, testing::BinaryWithConstant("Add", 8, 2.0f));
    old_bytes_ = testing::BinaryWithConstant("Add", 8, 1.0f);
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string CacheDir(const std::string& name) const { return (root_ / name).string(); }

  std::unique_ptr<ObjectCache> MakeCache(const std::string& dir, Env* env, uint64_t max_bytes = 0) {
    ObjectCacheOptions options;
    options.dir = dir;
    options.env = env;
    options.max_bytes = max_bytes;
    options.digest_memo_settle_ms = 0;  // The model's digest record is written at once.
    auto cache = ObjectCache::Create(options);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? std::move(*cache) : nullptr;
  }

  // A folder holding a valid entry of the old model (y = x + 1), written with the real Env.
  void Prepare(const std::string& dir) {
    fs::remove_all(dir);
    auto cache = MakeCache(dir, nullptr);
    CacheLookup lookup;
    auto model = cache->Compile("", old_bytes_, {}, &lookup);
    ASSERT_TRUE(model.ok()) << model.status();
    ASSERT_EQ(lookup.outcome, CacheOutcome::kMiss);
    ASSERT_FALSE(lookup.store_failed);
    // Older than anything the store under test writes (eviction goes by modification time).
    const auto old = fs::file_time_type::clock::now() - std::chrono::minutes(10);
    for (const auto& e : fs::directory_iterator(dir)) fs::last_write_time(e.path(), old);
  }

  // The store under test: the file model (y = x + 2) compiled into `dir` through `env`, with a
  // byte budget that holds one entry (the old one is evicted).
  CacheLookup Store(const std::string& dir, Env* env, uint64_t max_bytes) {
    auto cache = MakeCache(dir, env, max_bytes);
    CacheLookup lookup;
    auto model = cache->Compile(model_path_, "", {}, &lookup);
    // The server keeps serving: whatever write failed, the compile yields a model that runs.
    EXPECT_TRUE(model.ok()) << model.status();
    if (model.ok()) {
      EXPECT_TRUE(Computes(*std::move(model), 2.0f));
    }
    EXPECT_EQ(lookup.outcome, CacheOutcome::kMiss);
    EXPECT_EQ(cache->stats().store_failures, lookup.store_failed ? 1u : 0u);
    return lookup;
  }

  // What the next process finds: each model either misses (NotFound, no entry refused: no
  // partial file sits under an entry's name) or hits an entry that computes what it should. Then
  // the folder still works: a compile stores, a lookup after it hits. Returns "<hit|miss>,<...>".
  std::string NextProcess(const std::string& dir, const std::string& context) {
    std::string seen;
    for (bool file_model : {true, false}) {
      auto cache = MakeCache(dir, nullptr);
      CacheLookup lookup;
      auto model = file_model ? cache->Lookup(model_path_, "", {}, &lookup)
                              : cache->Lookup("", old_bytes_, {}, &lookup);
      EXPECT_FALSE(lookup.refused_entry) << context;
      if (model.ok()) {
        EXPECT_EQ(lookup.outcome, CacheOutcome::kDiskHit) << context;
        EXPECT_TRUE(Computes(*std::move(model), file_model ? 2.0f : 1.0f)) << context;
        seen += "hit,";
      } else {
        EXPECT_TRUE(absl::IsNotFound(model.status())) << context << ": " << model.status();
        seen += "miss,";
      }
    }
    auto cache = MakeCache(dir, nullptr);
    EXPECT_TRUE(cache->Compile(model_path_, "", {}).ok()) << context;
    auto fresh = MakeCache(dir, nullptr);
    CacheLookup lookup;
    EXPECT_TRUE(fresh->Lookup(model_path_, "", {}, &lookup).ok()) << context;
    EXPECT_EQ(lookup.outcome, CacheOutcome::kDiskHit) << context;
    return seen;
  }

  // After a crash: the temporary file left behind, renamed over the entry's name (as a crash
  // after an unsynced rename could leave it), is refused by the next process and compiled again
  // when the crash tore one of its writes; when the crash came after its last write it is whole,
  // and then it may be read, but only as the model it holds.
  void TornTemporariesAreRefused(const std::string& dir, bool tore_a_write,
                                 const std::string& context) {
    auto probe = MakeCache(dir, nullptr);
    auto key = probe->Key(model_path_, "", {});
    ASSERT_TRUE(key.ok());
    int checked = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(".tmp-" + *key, 0) != 0) continue;
      fs::rename(e.path(), probe->EntryPath(*key));
      ++checked;
      auto cache = MakeCache(dir, nullptr);
      CacheLookup lookup;
      auto model = cache->Lookup(model_path_, "", {}, &lookup);
      if (model.ok()) {
        EXPECT_FALSE(tore_a_write) << context << ": a torn entry was read back";
        EXPECT_TRUE(Computes(*std::move(model), 2.0f)) << context;
        continue;
      }
      EXPECT_TRUE(lookup.refused_entry) << context;
      EXPECT_FALSE(fs::exists(probe->EntryPath(*key))) << context << ": refused but kept";
    }
    EXPECT_LE(checked, 1) << context;
  }

  fs::path root_;
  std::string model_path_;
  std::string old_bytes_;
};

// The writes of a clean store, enumerated, then each failed in turn with each fault.
TEST_F(CacheStoreFaultTest, EveryWriteOfAStoreFailsCleanly) {
  const std::string dir = CacheDir("cache");
  Prepare(dir);
  const uint64_t one_entry = [&] {
    uint64_t largest = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (e.path().extension() == ".cjc") largest = std::max<uint64_t>(largest, e.file_size());
    }
    return largest;
  }();
  ASSERT_GT(one_entry, 0u);
  const uint64_t budget = one_entry + one_entry / 2;  // One entry, not two.

  FaultInjectionEnv counting;
  counting.FailWrite(0, WriteFault::kNone);
  CacheLookup clean = Store(dir, &counting, budget);
  ASSERT_FALSE(clean.store_failed);
  const std::vector<std::string> writes = counting.write_log();
  const std::string listing = absl::StrJoin(writes, "\n");
  // What a store writes: the digest record, the size marker, the entry (temporary, writes,
  // rename) and the eviction of the old entry.
  auto has = [&](const std::string& what) {
    return std::any_of(writes.begin(), writes.end(),
                       [&](const std::string& w) { return w.find(what) != std::string::npos; });
  };
  EXPECT_TRUE(has(".cjm")) << listing;
  EXPECT_TRUE(has("touch ")) << listing;
  EXPECT_TRUE(has("create ")) << listing;
  EXPECT_TRUE(has("write ")) << listing;
  EXPECT_TRUE(has("rename ")) << listing;
  EXPECT_TRUE(has("remove ")) << listing;
  EXPECT_GE(writes.size(), 12u) << listing;
  std::printf("the writes of one store (each failed in turn below):\n%s\n", listing.c_str());
  EXPECT_EQ(NextProcess(dir, "clean"), "hit,miss,");  // Stored; the old entry evicted.

  int failed_stores = 0;
  for (WriteFault fault : kFaults) {
    for (size_t n = 1; n <= writes.size(); ++n) {
      const std::string context =
          absl::StrCat(WriteFaultName(fault), " at write ", n, " (", writes[n - 1], ")");
      SCOPED_TRACE(context);
      Prepare(dir);
      FaultInjectionEnv env;
      env.FailWrite(n, fault);
      CacheLookup lookup = Store(dir, &env, budget);
      EXPECT_TRUE(env.fired());
      EXPECT_EQ(env.crashed(), fault == WriteFault::kTornWrite);
      if (lookup.store_failed) ++failed_stores;
      const std::string seen = NextProcess(dir, context);
      // The old entry is only gone when its removal ran.
      if (seen == "hit,hit,") {
        EXPECT_FALSE(lookup.store_failed);
      }
      if (fault == WriteFault::kTornWrite) {
        Prepare(dir);
        FaultInjectionEnv torn;
        torn.FailWrite(n, fault);
        Store(dir, &torn, budget);
        TornTemporariesAreRefused(dir, writes[n - 1].rfind("write ", 0) == 0, context);
      }
    }
  }
  EXPECT_GT(failed_stores, 0);
}

// A store over a valid entry of the same key (a compile with emit_llvm_path always compiles and
// stores): whatever write fails, the next process reads the valid entry, old or new.
TEST_F(CacheStoreFaultTest, AFailedRewriteLeavesTheValidEntry) {
  const std::string dir = CacheDir("rewrite");
  const std::string bytes = testing::BinaryWithConstant("Add", 8, 3.0f);
  CompileOptions emit;
  emit.emit_llvm_path = (root_ / "model.ll").string();
  auto prepare = [&] {
    fs::remove_all(dir);
    ASSERT_TRUE(MakeCache(dir, nullptr)->Compile("", bytes, {}).ok());
  };
  prepare();
  FaultInjectionEnv counting;
  counting.FailWrite(0, WriteFault::kNone);
  ASSERT_TRUE(MakeCache(dir, &counting)->Compile("", bytes, emit).ok());
  const std::vector<std::string> writes = counting.write_log();
  ASSERT_GE(writes.size(), 6u);
  for (WriteFault fault : kFaults) {
    for (size_t n = 1; n <= writes.size(); ++n) {
      const std::string context =
          absl::StrCat(WriteFaultName(fault), " at write ", n, " (", writes[n - 1], ")");
      SCOPED_TRACE(context);
      prepare();
      FaultInjectionEnv env;
      env.FailWrite(n, fault);
      CacheLookup lookup;
      auto model = MakeCache(dir, &env)->Compile("", bytes, emit, &lookup);
      ASSERT_TRUE(model.ok()) << model.status();
      EXPECT_TRUE(Computes(*std::move(model), 3.0f));
      auto next = MakeCache(dir, nullptr);
      CacheLookup again;
      auto read = next->Lookup("", bytes, {}, &again);
      ASSERT_TRUE(read.ok()) << read.status();
      EXPECT_EQ(again.outcome, CacheOutcome::kDiskHit);
      EXPECT_FALSE(again.refused_entry);
      EXPECT_TRUE(Computes(*std::move(read), 3.0f));
    }
  }
}

// The store itself says what went wrong: the entry's name, the step and the errno.
TEST_F(CacheStoreFaultTest, AFailedEntryWriteIsAClearErrorAndLeavesNothing) {
  const std::string dir = CacheDir("store");
  fs::create_directories(dir);
  auto compiled = CompileOnnxBytes(old_bytes_);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const std::string key(32, 'a');
  FaultInjectionEnv counting;
  counting.FailWrite(0, WriteFault::kNone);
  {
    jitcache_internal::CacheStore store((root_ / "counting").string(), 0, &counting);
    fs::create_directories(root_ / "counting");
    ASSERT_TRUE(store.Write(key, *compiled).ok());
  }
  const uint64_t writes = counting.writes();
  ASSERT_GE(writes, 6u);  // create, 3 writes, truncate, close, rename.
  for (WriteFault fault : {WriteFault::kNoSpace, WriteFault::kIoError}) {
    for (uint64_t n = 1; n <= writes; ++n) {
      SCOPED_TRACE(absl::StrCat(WriteFaultName(fault), " at write ", n));
      FaultInjectionEnv env;
      env.FailWrite(n, fault);
      jitcache_internal::CacheStore store(dir, 0, &env);
      auto written = store.Write(key, *compiled);
      ASSERT_FALSE(written.ok());
      EXPECT_TRUE(absl::IsInternal(written.status()));
      const std::string message(written.status().message());
      EXPECT_NE(message.find(store.EntryPath(key)), std::string::npos) << message;
      EXPECT_NE(message.find(fault == WriteFault::kNoSpace ? "No space left on device"
                                                           : "Input/output error"),
                std::string::npos)
          << message;
      // Nothing left: no entry, no temporary (the failed write cleaned up after itself).
      EXPECT_TRUE(fs::is_empty(dir)) << message;
      jitcache_internal::CacheStore next(dir, 0, nullptr);
      EXPECT_TRUE(absl::IsNotFound(next.Read(key, nullptr).status()));
    }
  }
}

}  // namespace
}  // namespace cuvil
