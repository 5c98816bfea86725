// TieredStart: a fresh cache folder serves the quick tier (no lookup) and the tier-up stores the
// full one; a warm folder loads the full tier without compiling; a corrupt full-tier entry is
// counted and the quick tier serves; a hit whose digest is not remembered races the quick compile
// and never compiles the full tier; a raced miss is counted once; with no model of its size
// stored the lookup is skipped; without a cache the tier-up compiles.
#include "cuvil/jitcache/tiered_start.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "cuvil/jitcache/jit_engine.h"
#include "gtest/gtest.h"
#include "test_dirs.h"
#include "test_models.h"

namespace cuvil {
namespace {
namespace fs = std::filesystem;

class TieredStartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::FreshTestDir("cuvil_tiered_start_test");
    fs::create_directories(root_ / "cache");
    model_ = (root_ / "model.onnx").string();
    std::ofstream(model_, std::ios::binary) << testing::BinaryWithConstant("Add", 8, 0.5f);
  }
  void TearDown() override { fs::remove_all(root_); }

  // A cache on the test's folder; the digest memo records at once (the model was just written).
  std::unique_ptr<ObjectCache> MakeCache(bool digest_memo = true) {
    ObjectCacheOptions options;
    options.dir = (root_ / "cache").string();
    options.digest_memo = digest_memo;
    options.digest_memo_settle_ms = 0;
    auto cache = ObjectCache::Create(options);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return cache.ok() ? std::move(*cache) : nullptr;
  }

  TieredSource Source() const {
    TieredSource source;
    source.path = model_;
    source.quick_options.opt_level = kFastTierOptLevel;
    return source;
  }

  // The full tier's disk entry.
  std::string FullEntry(const ObjectCache& cache) const {
    auto key = cache.Key(model_, "", CompileOptions());
    EXPECT_TRUE(key.ok()) << key.status();
    return key.ok() ? cache.EntryPath(*key) : "";
  }

  // Loads `model` and checks it computes y = x + 0.5.
  static void ExpectComputes(absl::StatusOr<CompiledModel> model) {
    ASSERT_TRUE(model.ok()) << model.status();
    auto engine = JitEngine::Create();
    ASSERT_TRUE(engine.ok()) << engine.status();
    auto loaded = (*engine)->Load("m/1", *std::move(model));
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    HostTensor x(DType::kFloat32, {2, 8});
    for (int i = 0; i < 16; ++i) x.data_as<float>()[i] = static_cast<float>(i);
    auto out = (*loaded)->Run({x});
    ASSERT_TRUE(out.ok()) << out.status();
    for (int i = 0; i < 16; ++i) {
      EXPECT_FLOAT_EQ((*out)[0].data_as<float>()[i], static_cast<float>(i) + 0.5f);
    }
  }

  // Stores the full tier as a previous process would have.
  void WarmUp() {
    auto cache = MakeCache();
    ASSERT_NE(cache, nullptr);
    CacheLookup lookup;
    ASSERT_TRUE(cache->Compile(model_, "", CompileOptions(), &lookup).ok());
    ASSERT_EQ(lookup.outcome, CacheOutcome::kMiss);
    ASSERT_TRUE(fs::exists(FullEntry(*cache)));
  }

  // Stores the full tier of another model `width` wide (8: the same file size as the test's).
  void StoreOther(int64_t width) {
    auto cache = MakeCache();
    ASSERT_NE(cache, nullptr);
    const std::string other = (root_ / "other.onnx").string();
    std::ofstream(other, std::ios::binary) << testing::BinaryWithConstant("Add", width, 1.5f);
    ASSERT_TRUE(cache->Compile(other, "", CompileOptions()).ok());
  }

  fs::path root_;
  std::string model_;
};

TEST_F(TieredStartTest, FreshFolderServesTheQuickTierAndTheTierUpStoresTheFullOne) {
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  const uint64_t before = TotalCompilations();
  auto start = TieredStart::Begin(cache.get(), Source());
  ASSERT_FALSE(start->full_tier());
  ExpectComputes(start->TakeReady());
  EXPECT_EQ(TotalCompilations(), before + 1);  // The quick tier only.
  // Nothing could hit in an empty folder: the lookup (and its hash of the model) was skipped.
  EXPECT_EQ(start->ready_lookup(), nullptr);
  CacheLookup lookup, start_lookup;
  auto full = start->TierUp(&lookup, &start_lookup);
  EXPECT_EQ(lookup.outcome, CacheOutcome::kMiss);
  EXPECT_FALSE(lookup.store_failed);
  EXPECT_EQ(lookup.key.size(), 32u);
  EXPECT_TRUE(start_lookup.key.empty());
  EXPECT_FALSE(start_lookup.refused_entry);
  EXPECT_EQ(TotalCompilations(), before + 2);  // The full tier, lowered once.
  ExpectComputes(std::move(full));
  // Only the full tier is on disk; the lookup counted nothing, the tier-up one miss and a store.
  EXPECT_TRUE(fs::exists(FullEntry(*cache)));
  int entries = 0;
  for (const auto& e : fs::directory_iterator(root_ / "cache")) {
    entries += e.path().extension() == ".cjc" ? 1 : 0;
  }
  EXPECT_EQ(entries, 1);
  const ObjectCacheStats stats = cache->stats();
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.stores, 1u);
  EXPECT_EQ(stats.disk_hits + stats.memory_hits + stats.corrupt, 0u);
}

TEST_F(TieredStartTest, WarmFolderLoadsTheFullTierWithoutAQuickCompile) {
  WarmUp();
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  ASSERT_TRUE(cache->DigestIsRemembered(model_, ""));
  const uint64_t before = TotalCompilations();
  {
    auto start = TieredStart::Begin(cache.get(), Source());
    ASSERT_TRUE(start->full_tier());
    ASSERT_NE(start->ready_lookup(), nullptr);
    EXPECT_EQ(start->ready_lookup()->outcome, CacheOutcome::kDiskHit);
    absl::StatusOr<CompiledModel> model = start->TakeReady();
    ASSERT_TRUE(model.ok()) << model.status();
    EXPECT_TRUE(model->weights.read_only());  // The entry's mapping: loaded, not compiled.
    ExpectComputes(std::move(model));
  }  // Joins any helper thread.
  EXPECT_EQ(TotalCompilations(), before);
  const ObjectCacheStats stats = cache->stats();
  EXPECT_EQ(stats.disk_hits, 1u);
  EXPECT_EQ(stats.misses + stats.memory_hits + stats.corrupt + stats.stores, 0u);
}

TEST_F(TieredStartTest, CorruptFullTierEntryIsCountedAndTheQuickTierServes) {
  WarmUp();
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  const std::string entry = FullEntry(*cache);
  {
    std::fstream f(entry, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(fs::file_size(entry) - 1));
    f.put('\x5a');  // Flips the last weight byte: its section checksum no longer matches.
  }
  const uint64_t before = TotalCompilations();
  auto start = TieredStart::Begin(cache.get(), Source());
  ASSERT_FALSE(start->full_tier());
  ExpectComputes(start->TakeReady());
  EXPECT_EQ(TotalCompilations(), before + 1);
  // The digest is remembered, so the lookup ran before the quick tier and its refusal is known.
  ASSERT_NE(start->ready_lookup(), nullptr);
  EXPECT_TRUE(start->ready_lookup()->refused_entry);
  EXPECT_EQ(cache->stats().corrupt, 1u);
  CacheLookup lookup, start_lookup;
  ExpectComputes(start->TierUp(&lookup, &start_lookup));
  EXPECT_TRUE(start_lookup.refused_entry);
  EXPECT_EQ(lookup.outcome, CacheOutcome::kMiss);
  const ObjectCacheStats stats = cache->stats();
  EXPECT_EQ(stats.corrupt, 1u);  // Counted once.
  EXPECT_EQ(stats.misses, 1u);
  EXPECT_EQ(stats.stores, 1u);
  // The rewritten entry is sound: a later start loads it.
  cache->ClearMemory();
  auto again = TieredStart::Begin(cache.get(), Source());
  EXPECT_TRUE(again->full_tier());
  ExpectComputes(again->TakeReady());
}

TEST_F(TieredStartTest, HitWithoutARememberedDigestRacesAndNeverCompilesTheFullTier) {
  WarmUp();
  auto cache = MakeCache(/*digest_memo=*/false);
  ASSERT_NE(cache, nullptr);
  ASSERT_FALSE(cache->DigestIsRemembered(model_, ""));
  const uint64_t before = TotalCompilations();
  auto start = TieredStart::Begin(cache.get(), Source());
  ExpectComputes(start->TakeReady());  // Whichever was ready first.
  if (!start->full_tier()) {
    // The quick tier won; the tier-up swaps in the cached full tier instead of compiling.
    CacheLookup lookup;
    ExpectComputes(start->TierUp(&lookup));
    EXPECT_EQ(lookup.outcome, CacheOutcome::kDiskHit);
  }
  start.reset();                               // Joins a quick compile that lost the race.
  EXPECT_LE(TotalCompilations(), before + 1);  // At most the quick tier.
  const ObjectCacheStats stats = cache->stats();
  EXPECT_EQ(stats.disk_hits, 1u);
  EXPECT_EQ(stats.misses + stats.memory_hits + stats.corrupt + stats.stores, 0u);
}

TEST_F(TieredStartTest, AStoredModelOfTheSameSizeRacesAMissAndTheTierUpStoresTheFullTier) {
  StoreOther(8);
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  ASSERT_TRUE(cache->MayHold(model_, ""));
  ASSERT_FALSE(cache->DigestIsRemembered(model_, ""));
  const uint64_t before = TotalCompilations();
  auto start = TieredStart::Begin(cache.get(), Source());
  ASSERT_FALSE(start->full_tier());
  ExpectComputes(start->TakeReady());
  CacheLookup lookup, start_lookup;
  ExpectComputes(start->TierUp(&lookup, &start_lookup));
  EXPECT_EQ(start_lookup.outcome, CacheOutcome::kMiss);
  EXPECT_EQ(start_lookup.key, lookup.key);  // The lookup ran, on its helper thread.
  EXPECT_EQ(lookup.outcome, CacheOutcome::kMiss);
  EXPECT_EQ(TotalCompilations(), before + 2);
  EXPECT_TRUE(fs::exists(FullEntry(*cache)));
  const ObjectCacheStats stats = cache->stats();
  EXPECT_EQ(stats.misses, 1u);  // The lookup's NotFound is not a second miss.
  EXPECT_EQ(stats.stores, 1u);
  EXPECT_EQ(stats.disk_hits + stats.memory_hits + stats.corrupt, 0u);
}

TEST_F(TieredStartTest, OnlyModelsOfOtherSizesStoredSkipsTheLookup) {
  StoreOther(16);
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  ASSERT_FALSE(cache->MayHold(model_, ""));
  auto start = TieredStart::Begin(cache.get(), Source());
  ASSERT_FALSE(start->full_tier());
  EXPECT_EQ(start->ready_lookup(), nullptr);
  ExpectComputes(start->TakeReady());
  CacheLookup lookup, start_lookup;
  ExpectComputes(start->TierUp(&lookup, &start_lookup));
  EXPECT_TRUE(start_lookup.key.empty());  // Skipped: nothing of this size could hit.
  EXPECT_EQ(lookup.outcome, CacheOutcome::kMiss);
  EXPECT_TRUE(fs::exists(FullEntry(*cache)));
  EXPECT_TRUE(cache->MayHold(model_, ""));  // Its marker now exists.
  EXPECT_EQ(cache->stats().misses, 1u);
}

TEST_F(TieredStartTest, AnEntryStoredByAnotherProcessAfterASkippedLookupIsSwappedInUncompiled) {
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  auto start = TieredStart::Begin(cache.get(), Source());
  ASSERT_FALSE(start->full_tier());
  ExpectComputes(start->TakeReady());
  WarmUp();  // Another cache object, as another process sharing the folder.
  const uint64_t before = TotalCompilations();
  CacheLookup lookup;
  ExpectComputes(start->TierUp(&lookup));
  EXPECT_EQ(lookup.outcome, CacheOutcome::kDiskHit);
  EXPECT_EQ(TotalCompilations(), before);
}

TEST_F(TieredStartTest, AMemoryOnlyCacheMayHoldOnlyTheSizesItHasKept) {
  auto cache = ObjectCache::Create({});
  ASSERT_TRUE(cache.ok()) << cache.status();
  EXPECT_FALSE((*cache)->MayHold(model_, ""));
  ASSERT_TRUE((*cache)->Compile("", testing::BinaryWithConstant("Add", 16, 1.5f), {}).ok());
  EXPECT_FALSE((*cache)->MayHold(model_, ""));
  ASSERT_TRUE((*cache)->Compile(model_, "", {}).ok());
  EXPECT_TRUE((*cache)->MayHold(model_, ""));
  // A warm in-memory start: the lookup is raced (no digest memo) and hits.
  const uint64_t before = TotalCompilations();
  auto start = TieredStart::Begin(cache->get(), Source());
  ExpectComputes(start->TakeReady());
  if (!start->full_tier()) {
    CacheLookup lookup;
    ExpectComputes(start->TierUp(&lookup));
    EXPECT_EQ(lookup.outcome, CacheOutcome::kMemoryHit);
  }
  start.reset();
  EXPECT_LE(TotalCompilations(), before + 1);  // At most the quick tier.
  EXPECT_EQ((*cache)->stats().memory_hits, 1u);
}

TEST_F(TieredStartTest, WithoutACacheTheQuickTierServesAndTheTierUpCompiles) {
  const uint64_t before = TotalCompilations();
  auto start = TieredStart::Begin(nullptr, Source());
  ASSERT_FALSE(start->full_tier());
  EXPECT_EQ(start->ready_lookup(), nullptr);
  ExpectComputes(start->TakeReady());
  CacheLookup lookup;
  ExpectComputes(start->TierUp(&lookup));
  EXPECT_EQ(lookup.outcome, CacheOutcome::kMiss);
  EXPECT_EQ(TotalCompilations(), before + 2);
}

TEST_F(TieredStartTest, AnUnreadableModelReportsTheCompilersError) {
  auto cache = MakeCache();
  ASSERT_NE(cache, nullptr);
  TieredSource source = Source();
  source.path = (root_ / "missing.onnx").string();
  auto start = TieredStart::Begin(cache.get(), source);
  EXPECT_FALSE(start->full_tier());
  EXPECT_FALSE(start->TakeReady().ok());
}

// Issue 38 part 6: the quick compile runs on a bare thread when it races the full tier's lookup;
// an exception there was std::terminate. Now it is the quick tier's error, and the full tier that
// the lookup found still serves.
TEST_F(TieredStartTest, AQuickCompileThatThrowsOnItsThreadIsAnErrorNotACrash) {
  auto cache = MakeCache(/*digest_memo=*/false);  // Not remembered: the lookup races.
  ASSERT_TRUE(cache->Compile(model_, "", CompileOptions()).ok());  // The full tier is cached.
  cache->ClearMemory();
  TieredSource source = Source();
  source.test_before_quick = [] { throw std::runtime_error("quick compile exploded"); };
  std::unique_ptr<TieredStart> start;
  ASSERT_NO_THROW(start = TieredStart::Begin(cache.get(), source));
  EXPECT_TRUE(start->full_tier());
  ExpectComputes(start->TakeReady());
  start.reset();  // Joins the quick thread, which threw.
}

// The same throw on the calling thread (no cache: nothing to race) is the ready tier's error.
TEST_F(TieredStartTest, AQuickCompileThatThrowsInlineIsTheReadyError) {
  TieredSource source = Source();
  source.test_before_quick = [] { throw std::runtime_error("quick compile exploded"); };
  std::unique_ptr<TieredStart> start;
  ASSERT_NO_THROW(start = TieredStart::Begin(nullptr, source));
  ASSERT_FALSE(start->full_tier());
  absl::StatusOr<CompiledModel> ready = start->TakeReady();
  ASSERT_FALSE(ready.ok());
  EXPECT_EQ(ready.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(ready.status().message().find("quick compile exploded"), std::string::npos)
      << ready.status();
  // The tier-up still compiles the full tier (the source itself is fine).
  CacheLookup lookup;
  ExpectComputes(start->TierUp(&lookup));
}
}  // namespace
}  // namespace cuvil
