#include "fma_peak.h"

#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

namespace cuvil {
namespace {

// Twelve accumulators: FMA latency 4-5 cycles times two FMA ports needs at least ten in flight.
constexpr int kChains = 12;
constexpr int64_t kItersPerRound = 1 << 16;

// Each runs kChains * iters FMAs and returns the sum of the accumulators.
__attribute__((target("avx512f"))) float Fma512(int64_t iters) {
  __m512 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(static_cast<float>(c) * 1e-3f);
  const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], a, b);
  }
  __m512 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm512_add_ps(sum, acc[c]);
  alignas(64) float lanes[16];
  _mm512_store_ps(lanes, sum);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

__attribute__((target("avx2,fma"))) float Fma256(int64_t iters) {
  __m256 acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(static_cast<float>(c) * 1e-3f);
  const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i) {
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], a, b);
  }
  __m256 sum = acc[0];
  for (int c = 1; c < kChains; ++c) sum = _mm256_add_ps(sum, acc[c]);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, sum);
  float total = 0;
  for (float v : lanes) total += v;
  return total;
}

// Rate of `kernel` (lanes wide) on `threads` threads started together: the sum of each thread's
// best round.
double Rate(float (*kernel)(int64_t), int lanes, int threads, double seconds) {
  using Clock = std::chrono::steady_clock;
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<double> gflops(threads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      ready.fetch_add(1);
      while (!go.load()) std::this_thread::yield();
      double best = 0;
      volatile float sink = 0;  // Keeps the loops: each round's result is stored.
      const auto start = Clock::now();
      // Best round of the window: a round preempted by another process does not count.
      while (std::chrono::duration<double>(Clock::now() - start).count() < seconds) {
        const auto t0 = Clock::now();
        sink = kernel(kItersPerRound);
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        best = std::max(best, 2.0 * lanes * kChains * kItersPerRound / s / 1e9);
      }
      gflops[t] = best;
    });
  }
  while (ready.load() < threads) std::this_thread::yield();
  go.store(true);
  for (std::thread& th : pool) th.join();
  double total = 0;
  for (double g : gflops) total += g;
  return total;
}

}  // namespace

FmaPeak MeasureFmaPeak(int threads, double seconds) {
  FmaPeak peak;
  threads = std::max(threads, 1);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    peak = {Rate(&Fma256, 8, threads, seconds), 256};
  }
  if (__builtin_cpu_supports("avx512f")) {
    const double wide = Rate(&Fma512, 16, threads, seconds);
    if (wide > peak.gflops) peak = {wide, 512};
  }
  return peak;
}

}  // namespace cuvil
