// The JIT cache: hits after misses, refusal of corrupt/truncated/foreign entries, key sensitivity,
// LRU eviction and in-process reuse.
#include "cuvil/jitcache/object_cache.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <stdexcept>
#include <thread>

#include "cache_entry.h"
#include "cuvil/jitcache/env.h"
#include "cuvil/jitcache/jit_engine.h"
#include "digest_memo.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"
#include "patch_test_models.h"
#include "test_dirs.h"
#include "test_models.h"

namespace cuvil {
namespace {
namespace fs = std::filesystem;

class ObjectCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    // Removed again: the cache creates its folder itself.
    dir_ = testing::FreshTestDir("cuvil_object_cache_test");
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::unique_ptr<ObjectCache> MakeCache(uint64_t max_bytes = 0) {
    ObjectCacheOptions options;
    options.dir = dir_.string();
    options.max_bytes = max_bytes;
    auto cache = ObjectCache::Create(options);
    EXPECT_TRUE(cache.ok()) << cache.status();
    return std::move(*cache);
  }

  // Compiles through `cache` and checks the result computes y = x + value.
  CacheLookup CompileAndCheck(ObjectCache& cache, const std::string& bytes, float value,
                              const CompileOptions& options = {}) {
    CacheLookup lookup;
    auto model = cache.Compile("", bytes, options, &lookup);
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return lookup;
    auto engine = JitEngine::Create();
    EXPECT_TRUE(engine.ok());
    auto loaded = (*engine)->Load("m/1", std::move(*model));
    EXPECT_TRUE(loaded.ok()) << loaded.status();
    if (!loaded.ok()) return lookup;
    HostTensor x(DType::kFloat32, {2, 8});
    for (int i = 0; i < 16; ++i) x.data_as<float>()[i] = static_cast<float>(i);
    auto out = (*loaded)->Run({x});
    EXPECT_TRUE(out.ok()) << out.status();
    for (int i = 0; out.ok() && i < 16; ++i) {
      EXPECT_FLOAT_EQ((*out)[0].data_as<float>()[i], static_cast<float>(i) + value);
    }
    return lookup;
  }

  static void Overwrite(const std::string& path, const std::string& data) {
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f << data;
  }
  static std::string Slurp(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  }

  fs::path dir_;
};

TEST_F(ObjectCacheTest, MissThenMemoryHitThenDiskHit) {
  auto cache = MakeCache();
  const std::string bytes = testing::BinaryWithConstant("Add", 8, 0.5f);
  uint64_t before = TotalCompilations();
  CacheLookup first = CompileAndCheck(*cache, bytes, 0.5f);
  EXPECT_EQ(first.outcome, CacheOutcome::kMiss);
  EXPECT_EQ(first.key.size(), 32u);
  EXPECT_TRUE(fs::exists(cache->EntryPath(first.key)));
  EXPECT_EQ(CompileAndCheck(*cache, bytes, 0.5f).outcome, CacheOutcome::kMemoryHit);
  cache->ClearMemory();
  EXPECT_EQ(CompileAndCheck(*cache, bytes, 0.5f).outcome, CacheOutcome::kDiskHit);
  // Another cache object (another process, as far as the files are concerned) hits too.
  auto other = MakeCache();
  EXPECT_EQ(CompileAndCheck(*other, bytes, 0.5f).outcome, CacheOutcome::kDiskHit);
  EXPECT_EQ(TotalCompilations() - before, 1u);
  ObjectCacheStats s = cache->stats();
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.memory_hits, 1u);
  EXPECT_EQ(s.disk_hits, 1u);
  EXPECT_EQ(s.stores, 1u);
  EXPECT_EQ(s.corrupt, 0u);
}

// The arena plan, liveness bounds included, comes back from a disk entry as the compiler made it.
TEST_F(ObjectCacheTest, DiskHitKeepsTheArenaPlan) {
  const std::string bytes = testing::MatMulChain(16, 0.5f, 2.0f);
  auto cache = MakeCache();
  CacheLookup lookup;
  auto compiled = cache->Compile("", bytes, {}, &lookup);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ASSERT_EQ(lookup.outcome, CacheOutcome::kMiss);
  const ArenaPlan made = compiled->arena;
  EXPECT_GT(made.live_per_batch_bytes, 0);  // x . A, 16 floats per batch item.
  EXPECT_GE(made.per_batch_bytes, made.live_per_batch_bytes);

  auto other = MakeCache();
  auto read = other->Compile("", bytes, {}, &lookup);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(lookup.outcome, CacheOutcome::kDiskHit);
  EXPECT_EQ(read->arena.per_batch_bytes, made.per_batch_bytes);
  EXPECT_EQ(read->arena.fixed_bytes, made.fixed_bytes);
  EXPECT_EQ(read->arena.unplanned_bytes, made.unplanned_bytes);
  EXPECT_EQ(read->arena.live_per_batch_bytes, made.live_per_batch_bytes);
  EXPECT_EQ(read->arena.live_fixed_bytes, made.live_fixed_bytes);
  EXPECT_EQ(read->arena.max_shards, made.max_shards);
}

// A model with a free dimension beyond the batch keeps its symbols, symbolic dims, symbolic arena
// size and dim constraints through an entry on disk, and runs from it.
TEST_F(ObjectCacheTest, DiskHitKeepsSymbolicDimsAndArena) {
  const std::string bytes = testing::TwoSymbolModel();
  auto cache = MakeCache();
  CacheLookup lookup;
  auto made = cache->Compile("", bytes, {}, &lookup);
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_TRUE(made->arena.symbolic());
  auto other = MakeCache();
  auto read = other->Compile("", bytes, {}, &lookup);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(lookup.outcome, CacheOutcome::kDiskHit);
  EXPECT_EQ(read->symbols, made->symbols);
  EXPECT_EQ(read->arena.bytes_program, made->arena.bytes_program);
  ASSERT_EQ(read->dim_constraints.size(), made->dim_constraints.size());
  ASSERT_EQ(read->outputs.size(), 1u);
  EXPECT_EQ(read->outputs[0].shape, made->outputs[0].shape);
  EXPECT_EQ(SymShapeToString(read->outputs[0].shape), "[batch,2*seq]");
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = (*engine)->Load("two/1", *std::move(read));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  HostTensor x(DType::kFloat32, {2, 3}), y(DType::kFloat32, {2, 3});
  for (int i = 0; i < 6; ++i) {
    x.data_as<float>()[i] = static_cast<float>(i);
    y.data_as<float>()[i] = 1.0f;
  }
  auto out = (*loaded)->Run({x, y});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ((*out)[0].shape(), (std::vector<int64_t>{2, 6}));
  EXPECT_FLOAT_EQ((*out)[0].data_as<float>()[1], 4.0f);  // (1 + 1)^2
  EXPECT_FLOAT_EQ((*out)[0].data_as<float>()[4], 1.0f);  // x[0][1]
}

// A count the data decides (NonZero's) keeps its symbol and upper bound through an entry on disk,
// and the model read back sizes its outputs by the run.
TEST_F(ObjectCacheTest, DiskHitKeepsDataDependentDims) {
  const std::string bytes = testing::PositiveValuesModel();
  auto cache = MakeCache();
  CacheLookup lookup;
  auto made = cache->Compile("", bytes, {}, &lookup);
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_EQ(made->data_dependent_dims.size(), 1u);
  auto other = MakeCache();
  auto read = other->Compile("", bytes, {}, &lookup);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(lookup.outcome, CacheOutcome::kDiskHit);
  EXPECT_EQ(read->symbols, made->symbols);
  ASSERT_EQ(read->data_dependent_dims.size(), 1u);
  EXPECT_EQ(read->data_dependent_dims[0].symbol, made->data_dependent_dims[0].symbol);
  EXPECT_EQ(read->data_dependent_dims[0].upper_bound, made->data_dependent_dims[0].upper_bound);
  EXPECT_EQ(read->data_dependent_dims[0].producer, made->data_dependent_dims[0].producer);
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = (*engine)->Load("positive/1", *std::move(read));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  HostTensor x(DType::kFloat32, {1, 4});
  const float values[] = {3, -1, 0, 5};
  std::copy(values, values + 4, x.data_as<float>());
  auto out = (*loaded)->Run({x});
  ASSERT_TRUE(out.ok()) << out.status();
  ASSERT_EQ((*out)[1].shape(), (std::vector<int64_t>{2}));
  EXPECT_FLOAT_EQ((*out)[1].data_as<float>()[0], 6.0f);
  EXPECT_FLOAT_EQ((*out)[1].data_as<float>()[1], 10.0f);
}

TEST_F(ObjectCacheTest, DiskHitKeepsTheStringHeapFlag) {
  const std::string bytes = testing::StringRoundTripModel();
  auto cache = MakeCache();
  CacheLookup lookup;
  auto made = cache->Compile("", bytes, {}, &lookup);
  ASSERT_TRUE(made.ok()) << made.status();
  ASSERT_TRUE(made->makes_strings);
  auto read = MakeCache()->Compile("", bytes, {}, &lookup);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(lookup.outcome, CacheOutcome::kDiskHit);
  EXPECT_TRUE(read->makes_strings);
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = (*engine)->Load("strings/1", *std::move(read));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  HostTensor x(DType::kFloat32, {1, 3});
  x.data_as<float>()[0] = 7;
  auto out = (*loaded)->Run({x});
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ((*out)[0].strings(), std::vector<std::string>{"7"});
}

// Subgraph kernels keep their parent through an entry on disk (the profiler and cuvil-bench rely
// on it to count a nested kernel's time once).
TEST_F(ObjectCacheTest, DiskHitKeepsSubgraphKernelParents) {
  const std::string bytes = testing::IfOfTwoAdds(8, 1.0f, 2.0f);
  auto cache = MakeCache();
  CacheLookup lookup;
  auto compiled = cache->Compile("", bytes, {}, &lookup);
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  ASSERT_EQ(lookup.outcome, CacheOutcome::kMiss);
  ASSERT_EQ(compiled->kernels.size(), 3u);
  auto other = MakeCache();
  auto read = other->Compile("", bytes, {}, &lookup);
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(lookup.outcome, CacheOutcome::kDiskHit);
  ASSERT_EQ(read->kernels.size(), compiled->kernels.size());
  for (size_t i = 0; i < read->kernels.size(); ++i) {
    EXPECT_EQ(read->kernels[i].symbol, compiled->kernels[i].symbol);
    EXPECT_EQ(read->kernels[i].parent, i == 0 ? -1 : 0) << read->kernels[i].symbol;
  }
}

TEST_F(ObjectCacheTest, MemoryOnlyCacheReusesSameBytes) {
  auto cache = ObjectCache::Create({});
  ASSERT_TRUE(cache.ok());
  const std::string bytes = testing::BinaryWithConstant("Add", 8, 1.5f);
  uint64_t before = TotalCompilations();
  EXPECT_EQ(CompileAndCheck(**cache, bytes, 1.5f).outcome, CacheOutcome::kMiss);
  EXPECT_EQ(CompileAndCheck(**cache, bytes, 1.5f).outcome, CacheOutcome::kMemoryHit);
  EXPECT_EQ(TotalCompilations() - before, 1u);
  EXPECT_EQ((*cache)->EntryPath("x"), "");
}

TEST_F(ObjectCacheTest, ConcurrentLookupsOfOneKeyCompileOnce) {
  auto cache = MakeCache();
  const std::string bytes = testing::BinaryWithConstant("Mul", 8, 3.0f);
  uint64_t before = TotalCompilations();
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      if (cache->Compile("", bytes, {}).ok()) ok.fetch_add(1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 4);
  EXPECT_EQ(TotalCompilations() - before, 1u);
}

TEST_F(ObjectCacheTest, CorruptTruncatedAndForeignEntriesAreRecompiled) {
  const std::string bytes = testing::BinaryWithConstant("Add", 8, 2.0f);
  const std::string other_bytes = testing::BinaryWithConstant("Add", 8, 7.0f);
  auto cache = MakeCache();
  CacheLookup first = CompileAndCheck(*cache, bytes, 2.0f);
  CacheLookup other = CompileAndCheck(*cache, other_bytes, 7.0f);
  const std::string path = cache->EntryPath(first.key);
  const std::string good = Slurp(path);
  ASSERT_GT(good.size(), 100u);

  auto flip = [&](size_t at) {
    std::string d = good;
    d[at] ^= 0x5a;
    return d;
  };
  // Layout (jit_cache.proto): 40-byte preamble, header, object code at a 4096 multiple, weights
  // at a later 4096 multiple up to the end of the file.
  const size_t object_at = 4096;
  ASSERT_NE(good.find(std::string("\x7f"
                                  "ELF",
                                  4)),
            std::string::npos);
  ASSERT_EQ(good.find(std::string("\x7f"
                                  "ELF",
                                  4)),
            object_at);
  std::string old_format = good;
  old_format[16] = 1;  // A format-1 reader's file, or a future format.
  std::string wrong_key = Slurp(cache->EntryPath(other.key));  // Valid entry, other key.
  const std::vector<std::pair<std::string, std::string>> damages = {
      {"bit flip in the weights", flip(good.size() - 3)},
      {"bit flip in the middle", flip(good.size() / 2)},
      {"bit flip in the object code", flip(object_at + 100)},
      {"bit flip in the header", flip(60)},
      {"bit flip in the preamble checksum", flip(30)},
      {"other format version", old_format},
      {"truncated by one byte", good.substr(0, good.size() - 1)},
      {"truncated", good.substr(0, good.size() / 2)},
      {"preamble only", good.substr(0, 40)},
      {"trailing bytes", good + "x"},
      {"empty", ""},
      {"foreign", "this is not a cache entry at all"},
      {"another key's entry", wrong_key},
  };
  uint64_t corrupt = 0;
  for (const auto& [what, data] : damages) {
    SCOPED_TRACE(what);
    Overwrite(path, data);
    cache->ClearMemory();
    CacheLookup lookup = CompileAndCheck(*cache, bytes, 2.0f);  // Correct results, recompiled.
    EXPECT_EQ(lookup.outcome, CacheOutcome::kMiss);
    EXPECT_TRUE(lookup.refused_entry);
    EXPECT_EQ(cache->stats().corrupt, ++corrupt);
    // The recompile replaced the entry with a good one.
    cache->ClearMemory();
    EXPECT_EQ(CompileAndCheck(*cache, bytes, 2.0f).outcome, CacheOutcome::kDiskHit);
  }
}

TEST_F(ObjectCacheTest, KeyChangesWithBytesAndOptions) {
  auto cache = MakeCache();
  const std::string a = testing::BinaryWithConstant("Add", 8, 1.0f);
  const std::string b = testing::BinaryWithConstant("Add", 8, 1.5f);
  CompileOptions base;
  auto key = [&](const std::string& bytes, const CompileOptions& o) {
    auto k = cache->Key("", bytes, o);
    EXPECT_TRUE(k.ok());
    return k.ok() ? *k : "";
  };
  const std::string k0 = key(a, base);
  EXPECT_EQ(k0, key(a, base));
  EXPECT_NE(k0, key(b, base));
  CompileOptions o2 = base;
  o2.opt_level = 2;
  EXPECT_NE(k0, key(a, o2));
  CompileOptions dims = base;
  dims.import.dim_overrides["batch"] = 4;
  EXPECT_NE(k0, key(a, dims));
  CompileOptions shapes = base;
  shapes.import.input_shapes["x"] = {4, 8};
  EXPECT_NE(k0, key(a, shapes));
  CompileOptions checker = base;
  checker.import.run_checker = false;
  EXPECT_NE(k0, key(a, checker));
  // Through Compile: another opt level is a miss, not a hit of the O3 entry.
  EXPECT_EQ(CompileAndCheck(*cache, a, 1.0f).outcome, CacheOutcome::kMiss);
  EXPECT_EQ(CompileAndCheck(*cache, a, 1.0f, o2).outcome, CacheOutcome::kMiss);
}

// Issue 43: every CompileOptions field that changes the code changes the key (the key hashes the
// one serialization, CompileOptionsRecordOf, which does not compile when a field of
// CompileOptions or ImportOptions is neither written nor named as ignored); the debug outputs and
// out-parameters do not.
TEST_F(ObjectCacheTest, EveryCodeChangingOptionChangesTheKey) {
  auto cache = MakeCache();
  const std::string a = testing::BinaryWithConstant("Add", 8, 1.0f);
  auto key = [&](const CompileOptions& o) {
    auto k = cache->Key("", a, o);
    EXPECT_TRUE(k.ok()) << k.status();
    return k.ok() ? *k : "";
  };
  const std::string base = key(CompileOptions());
  HostTensor bound(DType::kInt64, {2});
  bound.data_as<int64_t>()[0] = 3;
  bound.data_as<int64_t>()[1] = 4;
  HostTensor bound_other = bound;
  bound_other.data_as<int64_t>()[1] = 5;
  const std::vector<std::pair<std::string, std::function<void(CompileOptions&)>>> changes = {
      {"opt_level", [](auto& o) { o.opt_level = 1; }},
      {"target_triple", [](auto& o) { o.target_triple = "aarch64-linux-gnu"; }},
      {"target_cpu", [](auto& o) { o.target_cpu = "cortex-a76"; }},
      {"target_features", [](auto& o) { o.target_features = "+neon"; }},
      {"vector_bits", [](auto& o) { o.vector_bits = 128; }},
      {"batch_invariant", [](auto& o) { o.batch_invariant = true; }},
      {"integer_qdq", [](auto& o) { o.integer_qdq = false; }},
      {"import.dim_overrides", [](auto& o) { o.import.dim_overrides["batch"] = 4; }},
      {"import.dim_multiples", [](auto& o) { o.import.dim_multiples["h"] = 8; }},
      {"import.input_shapes", [](auto& o) { o.import.input_shapes["x"] = {2, 8}; }},
      {"import.bound_inputs", [&](auto& o) { o.import.bound_inputs.emplace("s", bound); }},
      {"import.bound_inputs' values",
       [&](auto& o) { o.import.bound_inputs.emplace("s", bound_other); }},
      {"import.run_checker", [](auto& o) { o.import.run_checker = false; }},
      {"import.allow_structured_io", [](auto& o) { o.import.allow_structured_io = true; }},
      {"import.structured_inputs",
       [](auto& o) { o.import.structured_inputs["seq"].element_shapes = {{2}, {3}}; }},
      {"import.structured_inputs' presence",
       [](auto& o) { o.import.structured_inputs["seq"].present = false; }},
  };
  std::set<std::string> keys = {base};
  for (const auto& [what, change] : changes) {
    SCOPED_TRACE(what);
    CompileOptions o;
    change(o);
    const std::string k = key(o);
    EXPECT_EQ(k, key(o));  // Stable.
    EXPECT_TRUE(keys.insert(k).second) << "the key does not tell " << what << " apart";
  }
  // Debug outputs and out-parameters do not change the code.
  std::vector<std::string> needs_binding;
  std::vector<OutputLayout> layout;
  CompileOptions debug;
  debug.emit_llvm_path = (dir_ / "m.ll").string();
  debug.print_after_pass = "optimize";
  debug.needs_binding = &needs_binding;
  debug.import.needs_binding = &needs_binding;
  debug.import.output_layout = &layout;
  EXPECT_EQ(key(debug), base);
}

// Issue 43: an entry the previous format (3) wrote under this key's name is refused, naming the
// format, and replaced by a recompile; it is never read as this format's header. (Old entries
// normally sit under other names: the key hashes the format version. They then age out.)
TEST_F(ObjectCacheTest, AnEntryOfTheFormerFormatIsRefusedAndRecompiled) {
  const std::string bytes = testing::BinaryWithConstant("Add", 8, 2.0f);
  auto cache = MakeCache();
  CacheLookup first = CompileAndCheck(*cache, bytes, 2.0f);
  const std::string path = cache->EntryPath(first.key);
  std::string old = Slurp(path);
  ASSERT_GT(old.size(), 40u);
  ASSERT_EQ(static_cast<uint8_t>(old[16]), kCacheFormatVersion);
  old[16] = 3;  // The preamble of format 3 (its checksum covers the header only).
  Overwrite(path, old);
  {
    auto file = Env::Default()->NewRandomAccessFile(path);
    ASSERT_TRUE(file.ok()) << file.status();
    auto decoded = jitcache_internal::DecodeEntry(**file, first.key, nullptr);
    ASSERT_FALSE(decoded.ok());
    EXPECT_TRUE(absl::IsDataLoss(decoded.status())) << decoded.status();
    EXPECT_NE(decoded.status().message().find("format version 3, expected 4"), std::string::npos)
        << decoded.status();
    EXPECT_NE(decoded.status().message().find("another build"), std::string::npos)
        << decoded.status();
  }
  cache->ClearMemory();
  CacheLookup again = CompileAndCheck(*cache, bytes, 2.0f);
  EXPECT_EQ(again.outcome, CacheOutcome::kMiss);
  EXPECT_TRUE(again.refused_entry);
  cache->ClearMemory();
  EXPECT_EQ(CompileAndCheck(*cache, bytes, 2.0f).outcome, CacheOutcome::kDiskHit);
  EXPECT_EQ(static_cast<uint8_t>(Slurp(path)[16]), kCacheFormatVersion);
}

TEST_F(ObjectCacheTest, FileModelsHashTheirContents) {
  auto cache = MakeCache();
  fs::create_directories(dir_ / "model");
  const std::string path = (dir_ / "model" / "model.onnx").string();
  Overwrite(path, testing::BinaryWithConstant("Add", 8, 1.0f));
  auto k1 = cache->Key(path, "", {});
  ASSERT_TRUE(k1.ok());
  Overwrite(path, testing::BinaryWithConstant("Add", 8, 4.0f));
  auto k2 = cache->Key(path, "", {});
  ASSERT_TRUE(k2.ok());
  EXPECT_NE(*k1, *k2);
  CacheLookup lookup;
  ASSERT_TRUE(cache->Compile(path, "", {}, &lookup).ok());
  EXPECT_EQ(lookup.key, *k2);
  EXPECT_FALSE(cache->Key((dir_ / "missing.onnx").string(), "", {}).ok());
  EXPECT_FALSE(cache->Compile((dir_ / "missing.onnx").string(), "", {}).ok());
}

// A file model's digest is remembered by its stamp: a second lookup reads only the record, any
// change to the file (even to bytes of the same size) is hashed again, a corrupt record is
// ignored and rewritten.
TEST_F(ObjectCacheTest, DigestMemoFollowsTheFileAndSurvivesCorruptRecords) {
  constexpr auto kSettle = std::chrono::milliseconds(50);
  ObjectCacheOptions options;
  options.dir = dir_.string();
  options.digest_memo_settle_ms = static_cast<uint32_t>(kSettle.count());
  auto cache = ObjectCache::Create(options);
  ASSERT_TRUE(cache.ok()) << cache.status();
  ObjectCacheOptions no_memo = options;
  no_memo.dir = (dir_ / "no_memo").string();
  no_memo.digest_memo = false;
  auto plain = ObjectCache::Create(no_memo);  // Always hashes the contents: the reference.
  ASSERT_TRUE(plain.ok()) << plain.status();
  fs::create_directories(dir_ / "model");
  const std::string path = (dir_ / "model" / "model.onnx").string();
  const std::string a = testing::BinaryWithConstant("Add", 8, 1.0f);
  const std::string b = testing::BinaryWithConstant("Add", 8, 4.0f);
  ASSERT_EQ(a.size(), b.size());
  ASSERT_NE(a, b);
  auto stamp_of = [&] {
    struct stat st;
    EXPECT_EQ(stat(path.c_str(), &st), 0);
    return jitcache_internal::StampOf(st);
  };
  const jitcache_internal::DigestMemo memo(options.dir, kSettle);

  Overwrite(path, a);
  auto fresh = (*cache)->Key(path, "", {});  // Changed just now: hashed, not recorded.
  ASSERT_TRUE(fresh.ok());
  EXPECT_FALSE(memo.Find(stamp_of()).has_value());
  std::this_thread::sleep_for(kSettle * 2);
  auto k1 = (*cache)->Key(path, "", {});
  ASSERT_TRUE(k1.ok());
  EXPECT_EQ(*k1, *fresh);
  EXPECT_EQ(*k1, *(*plain)->Key(path, "", {}));
  ASSERT_TRUE(memo.Find(stamp_of()).has_value());  // Recorded now.
  EXPECT_EQ(*(*cache)->Key(path, "", {}), *k1);

  // The record is what the key uses: one for this stamp with another digest gives another key.
  const std::string record_path = memo.PathOf(stamp_of());
  const std::string good_record = Slurp(record_path);
  ASSERT_TRUE(memo.Store(stamp_of(), {std::string(16, 'z'), true}));
  EXPECT_NE(*(*cache)->Key(path, "", {}), *k1);
  Overwrite(record_path, good_record);
  EXPECT_EQ(*(*cache)->Key(path, "", {}), *k1);

  // Same size, other bytes, same inode, right after the record was made: a new key.
  Overwrite(path, b);
  auto k2 = (*cache)->Key(path, "", {});
  ASSERT_TRUE(k2.ok());
  EXPECT_NE(*k2, *k1);
  EXPECT_EQ(*k2, *(*plain)->Key(path, "", {}));
  std::this_thread::sleep_for(kSettle * 2);
  EXPECT_EQ(*(*cache)->Key(path, "", {}), *k2);
  ASSERT_TRUE(memo.Find(stamp_of()).has_value());

  // A corrupt record is ignored (the contents are hashed) and rebuilt.
  std::string bad = Slurp(record_path);
  bad[70] = static_cast<char>(bad[70] ^ 1);  // Inside the digest.
  Overwrite(record_path, bad);
  EXPECT_FALSE(memo.Find(stamp_of()).has_value());
  EXPECT_EQ(*(*cache)->Key(path, "", {}), *k2);
  ASSERT_TRUE(memo.Find(stamp_of()).has_value());
  EXPECT_EQ(Slurp(record_path).size(), good_record.size());
  Overwrite(record_path, "garbage");
  EXPECT_EQ(*(*cache)->Key(path, "", {}), *k2);
  ASSERT_TRUE(memo.Find(stamp_of()).has_value());

  // End to end: the model compiles, then a fresh cache (another process) hits the disk entry.
  CacheLookup miss;
  ASSERT_TRUE((*cache)->Compile(path, "", {}, &miss).ok());
  EXPECT_EQ(miss.outcome, CacheOutcome::kMiss);
  auto again = ObjectCache::Create(options);
  ASSERT_TRUE(again.ok());
  CacheLookup hit;
  ASSERT_TRUE((*again)->Compile(path, "", {}, &hit).ok());
  EXPECT_EQ(hit.outcome, CacheOutcome::kDiskHit);
  EXPECT_EQ(hit.key, *k2);
}

TEST_F(ObjectCacheTest, EvictsLeastRecentlyUsedAboveMaxBytes) {
  std::vector<std::string> models;
  for (int i = 0; i < 4; ++i) models.push_back(testing::BinaryWithConstant("Add", 8, 10.0f + i));
  uint64_t entry_bytes = 0;
  {
    auto probe = MakeCache();
    CacheLookup l = CompileAndCheck(*probe, models[0], 10.0f);
    entry_bytes = fs::file_size(probe->EntryPath(l.key));
    fs::remove_all(dir_);
  }
  // Room for two entries (sizes differ by a few bytes at most).
  auto cache = MakeCache(entry_bytes * 2 + entry_bytes / 2);
  std::vector<std::string> keys;
  for (int i = 0; i < 3; ++i) {
    keys.push_back(CompileAndCheck(*cache, models[i], 10.0f + i).key);
    // Distinct mtimes so the order is unambiguous.
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_FALSE(fs::exists(cache->EntryPath(keys[0])));
  EXPECT_TRUE(fs::exists(cache->EntryPath(keys[1])));
  EXPECT_TRUE(fs::exists(cache->EntryPath(keys[2])));
  EXPECT_EQ(cache->stats().evictions, 1u);
  // A hit refreshes an entry: use keys[1], add a fourth; keys[2] is now the oldest.
  cache->ClearMemory();
  EXPECT_EQ(CompileAndCheck(*cache, models[1], 11.0f).outcome, CacheOutcome::kDiskHit);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  keys.push_back(CompileAndCheck(*cache, models[3], 13.0f).key);
  EXPECT_TRUE(fs::exists(cache->EntryPath(keys[1])));
  EXPECT_FALSE(fs::exists(cache->EntryPath(keys[2])));
  EXPECT_TRUE(fs::exists(cache->EntryPath(keys[3])));
}

TEST_F(ObjectCacheTest, HitsUseTheEntrysWeightsInPlace) {
  auto cache = MakeCache();
  const std::string bytes = testing::BinaryWithConstant("Add", 8, 3.5f);
  CacheLookup lookup;
  auto miss = cache->Compile("", bytes, {}, &lookup);
  ASSERT_TRUE(miss.ok()) << miss.status();
  // After a store the weights are the written entry's read-only mapping, not the heap copy.
  EXPECT_TRUE(miss->weights.read_only());
  cache->ClearMemory();
  auto hit = cache->Compile("", bytes, {}, &lookup);
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(lookup.outcome, CacheOutcome::kDiskHit);
  ASSERT_TRUE(hit->weights.read_only());
  ASSERT_EQ(hit->weights.size(), miss->weights.size());
  EXPECT_EQ(std::memcmp(hit->weights.data(), miss->weights.data(), hit->weights.size()), 0);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(hit->weights.data()) % 4096, 0u);
  // A loaded version keeps the mapping alive after the entry is gone (evicted or replaced).
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = (*engine)->Load("m/1", std::move(*hit));
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ((*loaded)->weights_bytes(), miss->weights.size());
  cache.reset();
  fs::remove_all(dir_);
  HostTensor x(DType::kFloat32, {1, 8});
  auto out = (*loaded)->Run({x});
  ASSERT_TRUE(out.ok()) << out.status();
  for (int i = 0; i < 8; ++i) EXPECT_FLOAT_EQ((*out)[0].data_as<float>()[i], 3.5f);
}

// The compiler seals its weights blob read-only, so without a directory the cache hands out that
// blob and the JIT engine uses it in place.
TEST_F(ObjectCacheTest, WithoutDirectoryWeightsStayInTheCompilersReadOnlyBlob) {
  auto cache = ObjectCache::Create({});
  ASSERT_TRUE(cache.ok());
  auto model = (*cache)->Compile("", testing::BinaryWithConstant("Add", 8, 1.0f), {});
  ASSERT_TRUE(model.ok());
  EXPECT_TRUE(model->weights.read_only());
  EXPECT_EQ(CompileAndCheck(**cache, testing::BinaryWithConstant("Add", 8, 1.0f), 1.0f).outcome,
            CacheOutcome::kMemoryHit);
}

TEST_F(ObjectCacheTest, ExternalDataIsPartOfTheKey) {
  auto cache = MakeCache();
  const fs::path model_dir = dir_ / "ext";
  fs::create_directories(model_dir);
  onnx::ModelProto model;
  ASSERT_TRUE(model.ParseFromString(testing::BinaryWithConstant("Add", 4, 0.0f)));
  onnx::TensorProto* c = model.mutable_graph()->mutable_initializer(0);
  c->clear_float_data();
  c->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* e = c->add_external_data();
  e->set_key("location");
  e->set_value("w.bin");
  const std::string path = (model_dir / "model.onnx").string();
  Overwrite(path, model.SerializeAsString());
  auto write_weights = [&](float v) {
    float w[4] = {v, v, v, v};
    Overwrite((model_dir / "w.bin").string(), std::string(reinterpret_cast<char*>(w), sizeof w));
  };
  write_weights(1.0f);
  auto k1 = cache->Key(path, "", {});
  write_weights(2.0f);
  auto k2 = cache->Key(path, "", {});
  ASSERT_TRUE(k1.ok() && k2.ok());
  EXPECT_NE(*k1, *k2);
  // Without external data the model file alone decides (same bytes, same key).
  const std::string plain = testing::BinaryWithConstant("Add", 4, 0.0f);
  Overwrite(path, plain);
  auto k3 = cache->Key(path, "", {});
  write_weights(3.0f);
  auto k4 = cache->Key(path, "", {});
  ASSERT_TRUE(k3.ok() && k4.ok());
  EXPECT_EQ(*k3, *k4);
}

// Tiered compilation as cuvil-server does it: serve the quick tier (kept off the disk), compile
// the full tier through the cache, swap it in with a recompile patch while executions run (each
// runs on one tier), and find the full tier on disk afterwards (a warm start loads it directly).
TEST_F(ObjectCacheTest, TieredSwapUnderConcurrentExecutionsAndFullTierCached) {
  auto cache = MakeCache();
  const std::string bytes = testing::BinaryWithConstant("Add", 8, 2.5f);
  CompileOptions full;
  CompileOptions fast;
  fast.opt_level = kFastTierOptLevel;
  CacheLookup lookup;
  EXPECT_TRUE(absl::IsNotFound(cache->Lookup("", bytes, full, &lookup).status()));
  auto quick = cache->CompileWith(
      "", bytes, fast, [&] { return CompileOnnxBytes(bytes, fast); }, &lookup,
      /*write_disk=*/false);
  ASSERT_TRUE(quick.ok()) << quick.status();
  EXPECT_EQ(lookup.outcome, CacheOutcome::kMiss);
  EXPECT_FALSE(lookup.store_failed);
  const std::string fast_key = lookup.key;
  auto engine = JitEngine::Create();
  ASSERT_TRUE(engine.ok());
  auto loaded = (*engine)->Load("tiered/1", std::move(*quick));
  ASSERT_TRUE(loaded.ok()) << loaded.status();

  std::atomic<bool> stop{false};
  std::atomic<int> runs{0}, wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      HostTensor x(DType::kFloat32, {2, 8});
      for (int i = 0; i < 16; ++i) x.data_as<float>()[i] = static_cast<float>(i);
      while (!stop.load()) {
        auto out = (*loaded)->Run({x});
        bool ok = out.ok();
        for (int i = 0; ok && i < 16; ++i) ok = (*out)[0].data_as<float>()[i] == i + 2.5f;
        if (!ok) wrong.fetch_add(1);
        runs.fetch_add(1);
      }
    });
  }
  auto full_model = cache->Compile("", bytes, full, &lookup);
  ASSERT_TRUE(full_model.ok()) << full_model.status();
  EXPECT_EQ(lookup.outcome, CacheOutcome::kMiss);
  EXPECT_NE(lookup.key, fast_key);
  auto patch = (*loaded)->patches().PrepareRecompilePatch(*full_model, {}, "opt_level=3");
  ASSERT_TRUE(patch.ok()) << patch.status();
  const int before = runs.load();
  auto id = (*loaded)->patches().CommitPatch(*patch, "tiered-compilation");
  ASSERT_TRUE(id.ok()) << id.status();
  while (runs.load() < before + 200) std::this_thread::yield();
  stop.store(true);
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  auto patches = (*loaded)->patches().Patches();
  ASSERT_EQ(patches.size(), 1u);
  EXPECT_EQ(patches[0].kind, kPatchKindRecompile);
  EXPECT_EQ(patches[0].author, "tiered-compilation");

  // Only the full tier is on disk; a fresh process finds it without compiling.
  EXPECT_FALSE(fs::exists(cache->EntryPath(fast_key)));
  EXPECT_TRUE(fs::exists(cache->EntryPath(lookup.key)));
  EXPECT_EQ(cache->stats().stores, 1u);
  auto other = MakeCache();
  const uint64_t compiles = TotalCompilations();
  auto warm = other->Lookup("", bytes, full, &lookup);
  ASSERT_TRUE(warm.ok()) << warm.status();
  EXPECT_EQ(lookup.outcome, CacheOutcome::kDiskHit);
  EXPECT_EQ(TotalCompilations(), compiles);
}

// write_disk false keeps a miss in memory only; the same process still reuses it, and a disk
// entry written by another compile is still found.
TEST_F(ObjectCacheTest, CompileWithoutDiskWriteKeepsTheEntryInMemoryOnly) {
  auto cache = MakeCache();
  const std::string bytes = testing::BinaryWithConstant("Add", 8, 1.5f);
  auto compile = [&] { return CompileOnnxBytes(bytes); };
  CacheLookup lookup;
  ASSERT_TRUE(cache->CompileWith("", bytes, {}, compile, &lookup, /*write_disk=*/false).ok());
  EXPECT_EQ(lookup.outcome, CacheOutcome::kMiss);
  EXPECT_FALSE(fs::exists(cache->EntryPath(lookup.key)));
  ASSERT_TRUE(cache->CompileWith("", bytes, {}, compile, &lookup, /*write_disk=*/false).ok());
  EXPECT_EQ(lookup.outcome, CacheOutcome::kMemoryHit);
  EXPECT_EQ(cache->stats().stores, 0u);
  EXPECT_EQ(cache->stats().store_failures, 0u);

  EXPECT_EQ(CompileAndCheck(*MakeCache(), bytes, 1.5f).outcome, CacheOutcome::kMiss);  // Writes.
  auto fresh = MakeCache();
  ASSERT_TRUE(fresh->CompileWith("", bytes, {}, compile, &lookup, /*write_disk=*/false).ok());
  EXPECT_EQ(lookup.outcome, CacheOutcome::kDiskHit);
}

// An entry that cannot be written (the folder vanished) is reported and counted; the compiled
// model is returned and runs.
TEST_F(ObjectCacheTest, FailedStoreIsCountedAndTheModelStillServes) {
  auto cache = MakeCache();
  fs::remove_all(dir_);
  const std::string bytes = testing::BinaryWithConstant("Add", 8, 0.5f);
  CacheLookup lookup = CompileAndCheck(*cache, bytes, 0.5f);
  EXPECT_EQ(lookup.outcome, CacheOutcome::kMiss);
  EXPECT_TRUE(lookup.store_failed);
  EXPECT_EQ(cache->stats().store_failures, 1u);
  EXPECT_EQ(cache->stats().stores, 0u);
  // Kept in memory all the same: the same process does not compile it again.
  EXPECT_EQ(CompileAndCheck(*cache, bytes, 0.5f).outcome, CacheOutcome::kMemoryHit);
}

TEST(CompileTierTest, ParsesItsNames) {
  for (CompileTier t : {CompileTier::kFull, CompileTier::kFast, CompileTier::kTiered}) {
    auto parsed = ParseCompileTier(CompileTierName(t));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, t);
  }
  EXPECT_FALSE(ParseCompileTier("O3").ok());
}

TEST(ObjectCacheDirTest, DefaultDirFollowsXdg) {
  const char* old = std::getenv("XDG_CACHE_HOME");
  std::string saved = old ? old : "";
  setenv("XDG_CACHE_HOME", "/tmp/xdg-test", 1);
  auto dir = DefaultJitCacheDir();
  ASSERT_TRUE(dir.ok());
  EXPECT_EQ(*dir, "/tmp/xdg-test/cuvil");
  if (old)
    setenv("XDG_CACHE_HOME", saved.c_str(), 1);
  else
    unsetenv("XDG_CACHE_HOME");
}

TEST(ObjectCacheDirTest, UnwritableDirIsRefused) {
  ObjectCacheOptions options;
  options.dir = "/proc/cuvil-cannot-exist";
  EXPECT_FALSE(ObjectCache::Create(options).ok());
}

// Runs `fn` on a thread and fails the test (ending the process: the thread cannot be stopped)
// when it has not finished within `seconds`.
template <typename Fn>
void FinishesWithin(int seconds, const char* what, Fn&& fn) {
  auto done = std::make_shared<std::atomic<bool>>(false);
  std::thread t([done, fn = std::forward<Fn>(fn)]() mutable {
    fn();
    done->store(true);
  });
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  while (!done->load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (!done->load()) {
    ADD_FAILURE() << what << " did not finish within " << seconds << " s";
    std::fprintf(stderr, "%s hangs: giving up\n", what);
    std::_Exit(1);
  }
  t.join();
}

// Issue 38 part 6: a compile that throws must neither escape the cache nor leave its key in
// flight (every later lookup of the model blocked for ever).
TEST_F(ObjectCacheTest, AThrowingCompileReturnsAnErrorAndDoesNotWedgeItsKey) {
  auto cache = MakeCache();
  const std::string bytes = testing::BinaryWithConstant("Add", 8, 0.25f);
  absl::StatusOr<CompiledModel> thrown = absl::UnknownError("unset");
  bool escaped = false;
  try {
    thrown = cache->CompileWith("", bytes, {}, []() -> absl::StatusOr<CompiledModel> {
      throw std::runtime_error("compiler exploded");
    });
  } catch (...) {
    escaped = true;
  }
  EXPECT_FALSE(escaped) << "the exception left ObjectCache::CompileWith";
  ASSERT_FALSE(thrown.ok());
  EXPECT_EQ(thrown.status().code(), absl::StatusCode::kInternal);
  EXPECT_NE(thrown.status().message().find("compiler exploded"), std::string::npos);
  FinishesWithin(60, "the next compile of the same model", [&] {
    EXPECT_EQ(CompileAndCheck(*cache, bytes, 0.25f).outcome, CacheOutcome::kMiss);
  });
}

// Writes `dir`/model.onnx: y = x + w with w float32[4] read from external data at `location`.
std::string WriteExternalDataModel(const fs::path& dir, const std::string& location) {
  fs::create_directories(dir);
  onnx::ModelProto model;
  EXPECT_TRUE(model.ParseFromString(testing::BinaryWithConstant("Add", 4, 0.0f)));
  onnx::TensorProto* c = model.mutable_graph()->mutable_initializer(0);
  c->clear_float_data();
  c->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* e = c->add_external_data();
  e->set_key("location");
  e->set_value(location);
  const std::string path = (dir / "model.onnx").string();
  std::ofstream(path, std::ios::binary) << model.SerializeAsString();
  return path;
}

// Issue 38 part 5: the key read external data the importer refuses (`../../dev/zero`: for ever).
TEST_F(ObjectCacheTest, ExternalDataTheImporterRefusesIsNeverReadForTheKey) {
  auto cache = MakeCache();
  const fs::path model_dir = dir_ / "models" / "zero";
  const std::string dotdot =
      WriteExternalDataModel(model_dir / "dotdot", "../../../../../../../../dev/zero");
  const std::string linked = WriteExternalDataModel(model_dir / "linked", "w.bin");
  fs::create_symlink("/dev/zero", model_dir / "linked" / "w.bin");
  for (const std::string& path : {dotdot, linked}) {
    FinishesWithin(20, "the cache key of a model with a refused external-data file", [&] {
      auto key = cache->Key(path, "", {});
      ASSERT_FALSE(key.ok()) << path;
      EXPECT_EQ(key.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(key.status().message().find("escapes the model directory"), std::string::npos)
          << key.status();
      auto compiled = cache->Compile(path, "", {});
      ASSERT_FALSE(compiled.ok());
      EXPECT_NE(compiled.status().message().find("escapes the model directory"), std::string::npos)
          << compiled.status();
    });
  }
  // A FIFO inside the folder: refused, not waited on.
  const std::string fifo = WriteExternalDataModel(model_dir / "fifo", "w.bin");
  ASSERT_EQ(mkfifo((model_dir / "fifo" / "w.bin").c_str(), 0600), 0);
  FinishesWithin(20, "the cache key of a model whose external data is a FIFO", [&] {
    auto key = cache->Key(fifo, "", {});
    ASSERT_FALSE(key.ok());
    EXPECT_NE(key.status().message().find("not a regular file"), std::string::npos) << key.status();
  });
}

// Issue 38 part 7: entries, digest records and size markers are the server's own (0600, in a
// 0700 folder it created).
TEST_F(ObjectCacheTest, FilesAreWrittenPrivate) {
  ObjectCacheOptions options;
  options.dir = dir_.string();
  options.digest_memo_settle_ms = 0;
  auto cache = ObjectCache::Create(options);
  ASSERT_TRUE(cache.ok()) << cache.status();
  const fs::path model = dir_ / "model.onnx";
  Overwrite(model.string(), testing::BinaryWithConstant("Add", 8, 0.5f));
  CacheLookup lookup;
  ASSERT_TRUE((*cache)->Compile(model.string(), "", {}, &lookup).ok());
  auto mode = [](const fs::path& p) {
    struct stat st;
    EXPECT_EQ(lstat(p.c_str(), &st), 0) << p;
    return st.st_mode & 07777;
  };
  EXPECT_EQ(mode(dir_), 0700u);
  int entries = 0, memos = 0, markers = 0;
  for (const auto& de : fs::directory_iterator(dir_)) {
    const std::string name = de.path().filename().string();
    if (name == "model.onnx") continue;
    entries += name.ends_with(".cjc");
    memos += name.ends_with(".cjm");
    markers += name.ends_with(".cjs");
    EXPECT_EQ(mode(de.path()), 0600u) << name;
  }
  EXPECT_EQ(entries, 1);
  EXPECT_EQ(memos, 1);
  EXPECT_EQ(markers, 1);
}

// A size marker planted as a symlink is not followed (it used to create or touch its target).
TEST_F(ObjectCacheTest, ASizeMarkerSymlinkIsNotFollowed) {
  auto cache = MakeCache();
  const std::string bytes = testing::BinaryWithConstant("Add", 8, 0.5f);
  const fs::path victim = dir_.parent_path() / (dir_.filename().string() + "-victim");
  fs::remove(victim);
  fs::create_symlink(victim, dir_ / ("size-" + std::to_string(bytes.size()) + ".cjs"));
  CompileAndCheck(*cache, bytes, 0.5f);
  EXPECT_FALSE(fs::exists(victim));
  fs::remove(victim);
}

// Issue 38 part 7: digest records and size markers are evicted with their entries.
TEST_F(ObjectCacheTest, EvictionRemovesTheDigestRecordsAndMarkersOfEvictedEntries) {
  std::vector<std::string> paths;
  fs::create_directories(dir_.string() + "-models");
  for (int i = 0; i < 3; ++i) {
    // Different widths: different model sizes, so one marker each.
    paths.push_back(dir_.string() + "-models/m" + std::to_string(i) + ".onnx");
    Overwrite(paths.back(), testing::BinaryWithConstant("Add", 8 << i, 1.0f));
  }
  std::vector<uint64_t> entry_bytes;
  {
    auto probe = MakeCache();
    for (const std::string& p : paths) {
      CacheLookup l;
      ASSERT_TRUE(probe->Compile(p, "", {}, &l).ok());
      entry_bytes.push_back(fs::file_size(probe->EntryPath(l.key)));
    }
    fs::remove_all(dir_);
  }
  ObjectCacheOptions options;
  options.dir = dir_.string();
  // Room for the last two entries, not for all three.
  options.max_bytes = entry_bytes[1] + entry_bytes[2] + entry_bytes[0] / 2;
  options.digest_memo_settle_ms = 0;
  auto cache = ObjectCache::Create(options);
  ASSERT_TRUE(cache.ok()) << cache.status();
  auto count = [&](const char* suffix) {
    int n = 0;
    for (const auto& de : fs::directory_iterator(dir_)) n += de.path().string().ends_with(suffix);
    return n;
  };
  std::vector<std::string> keys;
  for (const std::string& p : paths) {
    CacheLookup l;
    ASSERT_TRUE((*cache)->Compile(p, "", {}, &l).ok());
    keys.push_back(l.key);
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // Distinct mtimes.
  }
  EXPECT_EQ((*cache)->stats().evictions, 1u);
  EXPECT_FALSE(fs::exists((*cache)->EntryPath(keys[0])));
  EXPECT_EQ(count(".cjc"), 2);
  EXPECT_EQ(count(".cjm"), 2) << "the evicted model's digest record stays";
  EXPECT_EQ(count(".cjs"), 2) << "the evicted model's size marker stays";
  // A new process (nothing in memory) knows from the markers left.
  auto fresh = ObjectCache::Create(options);
  ASSERT_TRUE(fresh.ok());
  EXPECT_FALSE((*fresh)->MayHold(paths[0], ""));
  EXPECT_TRUE((*fresh)->MayHold(paths[1], ""));
  EXPECT_TRUE((*fresh)->MayHold(paths[2], ""));
  fs::remove_all(dir_.string() + "-models");
}

TEST(ObjectCacheDirTest, AFolderOthersCanWriteIsRefusedUnlessAllowed) {
  const fs::path dir = testing::FreshTestDir("cuvil_object_cache_dir_test");
  fs::create_directories(dir);
  ASSERT_EQ(chmod(dir.c_str(), 0777), 0);
  ObjectCacheOptions options;
  options.dir = dir.string();
  auto refused = ObjectCache::Create(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  for (const std::string& part :
       {dir.string(), std::string("0777"), std::string("--insecure-cache-dir")}) {
    EXPECT_NE(refused.status().message().find(part), std::string::npos) << refused.status();
  }
  ASSERT_EQ(chmod(dir.c_str(), 0770), 0);  // Group-writable: refused too.
  EXPECT_FALSE(ObjectCache::Create(options).ok());
  options.insecure_dir = true;
  EXPECT_TRUE(ObjectCache::Create(options).ok());
  ASSERT_EQ(chmod(dir.c_str(), 0755), 0);  // Readable by others is the owner's choice.
  options.insecure_dir = false;
  // An entry an older version wrote 0644 is made private when the cache opens the folder.
  const fs::path old_entry = dir / "0123456789abcdef0123456789abcdef.cjc";
  std::ofstream(old_entry) << "x";
  ASSERT_EQ(chmod(old_entry.c_str(), 0644), 0);
  EXPECT_TRUE(ObjectCache::Create(options).ok());
  struct stat st;
  ASSERT_EQ(stat(old_entry.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  fs::remove_all(dir);
}

TEST(ObjectCacheDirTest, AFolderOfAnotherUserIsRefused) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give a folder to another user";
  const fs::path dir = testing::FreshTestDir("cuvil_object_cache_owner_test");
  fs::create_directories(dir);
  ASSERT_EQ(chmod(dir.c_str(), 0700), 0);
  ASSERT_EQ(chown(dir.c_str(), 12345, 12345), 0);
  ObjectCacheOptions options;
  options.dir = dir.string();
  auto refused = ObjectCache::Create(options);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(refused.status().message().find("owned by uid 12345"), std::string::npos)
      << refused.status();
  options.insecure_dir = true;
  EXPECT_TRUE(ObjectCache::Create(options).ok());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cuvil
