// Definitions of the USDT semaphores declared in probes.h. Tracers locate them through the
// .note.stapsdt notes and increment them while attached.
#include "cuvil/observability/probes.h"

#define CUVIL_PROBE_DEFINE_SEMAPHORE_(name)                       \
  unsigned short cuvil_##name##_semaphore __attribute__((unused)) \
  __attribute__((section(".probes"))) __attribute__((visibility("default"))) = 0;
extern "C" {
CUVIL_PROBE_SEMAPHORES(CUVIL_PROBE_DEFINE_SEMAPHORE_)
}
#undef CUVIL_PROBE_DEFINE_SEMAPHORE_
