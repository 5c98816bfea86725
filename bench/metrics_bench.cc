// Cost of recording metrics on the request path.
//   build/bin/cuvil-metrics-bench
// BM_RecordRequest: one request = ModelMetrics::RecordSuccess (request counter, samples counter,
// 3 histogram observations, 1 summary observation) — single-threaded and from 2 threads on the
// same model (worst case: every thread hits the same series).
#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "cuvil/observability/server_metrics.h"

namespace {

using cuvil::observability::ModelMetrics;
using cuvil::observability::ServerMetrics;

ServerMetrics* MakeMetrics(bool triton) {
  cuvil::observability::ServerMetricsOptions options;
  options.version = "bench";
  options.llvm = "19";
  options.triton_compat = triton;
  return new ServerMetrics(options);
}

ServerMetrics& Metrics(bool triton) {
  static ServerMetrics* plain = MakeMetrics(false);
  static ServerMetrics* compat = MakeMetrics(true);
  return triton ? *compat : *plain;
}

void BM_RecordRequest(benchmark::State& state) {
  const bool triton = state.range(0) != 0;
  std::shared_ptr<ModelMetrics> m = Metrics(triton).ForModel("resnet50", "1");
  uint64_t i = 0;
  for (auto _ : state) {
    // Vary the durations a little so observations spread over a few buckets.
    const uint64_t jitter = (i++ & 63) * 20'000;
    m->RecordSuccess(4, 2'000'000 + jitter, 300'000 + jitter, 50'000, 1'500'000, 40'000);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_RecordRequest)
    ->ArgName("triton")
    ->Arg(0)
    ->Arg(1)
    ->Threads(1)
    ->Threads(2)
    ->UseRealTime();

void BM_RecordExecution(benchmark::State& state) {
  std::shared_ptr<ModelMetrics> m = Metrics(false).ForModel("resnet50", "1");
  for (auto _ : state) m->RecordExecution(8);
}
BENCHMARK(BM_RecordExecution)->Threads(1)->Threads(2)->UseRealTime();

void BM_CounterIncrement(benchmark::State& state) {
  static cuvil::observability::Counter counter;
  for (auto _ : state) counter.Increment();
}
BENCHMARK(BM_CounterIncrement)->Threads(1)->Threads(2)->UseRealTime();

void BM_Render(benchmark::State& state) {
  ServerMetrics& metrics = Metrics(true);
  std::vector<std::shared_ptr<ModelMetrics>> versions;  // Exported while held, as versions do.
  for (int i = 0; i < 10; ++i)
    versions.push_back(metrics.ForModel("model" + std::to_string(i), "1"));
  for (auto _ : state) benchmark::DoNotOptimize(metrics.Render(""));
}
BENCHMARK(BM_Render)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
