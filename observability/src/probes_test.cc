#include "cuvil/observability/probes.h"

#include "gtest/gtest.h"

namespace {

int evaluations = 0;
const char* Model() {
  ++evaluations;
  return "m";
}

// With no tracer attached every probe is a not-taken branch and its arguments are not evaluated.
TEST(ProbesTest, DisabledProbesDoNotEvaluateArguments) {
  EXPECT_FALSE(CUVIL_PROBE_ENABLED(request__done));
  CUVIL_PROBE_REQUEST_START(Model(), "1", 7);
  CUVIL_PROBE_REQUEST_DONE(Model(), "1", 7, 0, 1234);
  CUVIL_PROBE_BATCH_START(Model(), 8);
  CUVIL_PROBE_BATCH_DONE(Model(), 8, 1000);
  CUVIL_PROBE_JIT_COMPILE_START(Model());
  CUVIL_PROBE_JIT_COMPILE_DONE(Model(), 10);
  CUVIL_PROBE_CACHE_HIT(Model());
  CUVIL_PROBE_CACHE_MISS(Model());
  CUVIL_PROBE_PATCH_APPLIED(Model(), "f");
  CUVIL_PROBE_PATCH_ROLLED_BACK(Model(), "f");
  CUVIL_PROBE_MODEL_LOAD(Model(), "1");
  CUVIL_PROBE_MODEL_UNLOAD(Model(), "1");
  EXPECT_EQ(evaluations, 0);
}

// Simulates an attached tracer by raising the semaphore: the probe site then runs (a nop in
// the instruction stream) and evaluates its arguments.
TEST(ProbesTest, EnabledProbeEvaluatesArguments) {
  cuvil_request__done_semaphore = 1;
  CUVIL_PROBE_REQUEST_DONE(Model(), "1", 7, 0, 1234);
  cuvil_request__done_semaphore = 0;
  EXPECT_EQ(evaluations, 1);
}

}  // namespace
