// Writes the exposition of a populated ServerMetrics to stdout, for promtool.
// Usage: cuvil-metrics-dump [--triton] [--openmetrics]
#include <cstdio>
#include <memory>
#include <string_view>
#include <vector>

#include "cuvil/observability/server_metrics.h"

int main(int argc, char** argv) {
  using namespace cuvil::observability;
  bool triton = false, om = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--triton") {
      triton = true;
    } else if (arg == "--openmetrics") {
      om = true;
    } else {
      std::fprintf(stderr, "usage: %s [--triton] [--openmetrics]\n", argv[0]);
      return 2;
    }
  }
  ServerMetricsOptions options;
  options.version = "0.1.0";
  options.llvm = "19.1.7";
  options.triton_compat = triton;
  ServerMetrics metrics(options);
  // Held like loaded versions hold theirs: a version's series are exported while it lives.
  std::vector<std::shared_ptr<ModelMetrics>> versions;
  for (const char* model : {"resnet50", "bert \"base\"\\v2\n"}) {
    auto m = metrics.ForModel(model, "1");
    versions.push_back(m);
    m->SetReady(true);
    m->SetMemoryBytes(123456789);
    m->SetPending(3);
    for (int i = 0; i < 100; ++i) {
      m->RecordSuccess(1 + i % 4, 2'000'000 + i * 50'000, 300'000, 50'000, 1'500'000, 40'000);
      m->RecordExecution(1 + i % 8);
    }
    m->RecordFailure(FailureReason::kTimeout);
    m->RecordFailure(FailureReason::kInternal);
    metrics.RecordCompile(model, 0.8);
    metrics.RecordCacheMiss(model);
    metrics.RecordCacheHit(model);
    metrics.RecordLoad(model, "1", 1.2);
    metrics.RecordPatch(model, "1", PatchKind::kIr, PatchResult::kOk, 0.0004);
    metrics.RecordPatch(model, "1", PatchKind::kRollback, PatchResult::kOk, 0.00002);
    metrics.RecordRejection(model, RejectionReason::kNoReadyVersion);
    metrics.RecordRejection("", RejectionReason::kUnknownModel);
  }
  const RenderedMetrics out = metrics.Render(om ? "application/openmetrics-text" : "text/plain");
  std::fwrite(out.body.data(), 1, out.body.size(), stdout);
  return 0;
}
