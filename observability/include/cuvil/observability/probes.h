// USDT (SystemTap SDT) probes of provider "cuvil", each guarded by a semaphore so that a probe
// costs one predictable branch on a global while no tracer is attached (bpftrace, bcc and perf
// increment the semaphore when they attach). Thread-safe: probes are stateless.
//
// Probes and arguments (strings are NUL-terminated `const char*`, integers are int64):
//   request__start      (model, version, request_id)
//   request__done       (model, version, request_id, status_code, latency_ns)
//                        status_code: the response's absl::StatusCode as an integer (0 = OK,
//                        1 CANCELLED, 3 INVALID_ARGUMENT, 4 DEADLINE_EXCEEDED, 5 NOT_FOUND,
//                        8 RESOURCE_EXHAUSTED, 13 INTERNAL, 14 UNAVAILABLE, ...)
//   batch__start        (model, batch_size)
//   batch__done         (model, batch_size, duration_ns)
//   jit__compile__start (model)
//   jit__compile__done  (model, duration_ns)
//   cache__hit          (model)
//   cache__miss         (model)
//   patch__applied      (model, function)
//   patch__rolled__back (model, function)
//   model__load         (model, version)
//   model__unload       (model, version)
// In bpftrace: usdt:/path/to/cuvil-server:cuvil:request__done { @[str(arg0)] = hist(arg4); }
// Semaphores are named cuvil_<probe>_semaphore and live in section .probes (probes.cc).
// Arguments are evaluated only when the semaphore is non-zero.
#ifndef CUVIL_OBSERVABILITY_PROBES_H_
#define CUVIL_OBSERVABILITY_PROBES_H_

#include <cstdint>

#ifndef _SDT_HAS_SEMAPHORES
#define _SDT_HAS_SEMAPHORES 1
#endif
#include <sys/sdt.h>

#define CUVIL_PROBE_SEMAPHORES(X) \
  X(request__start)               \
  X(request__done)                \
  X(batch__start)                 \
  X(batch__done)                  \
  X(jit__compile__start)          \
  X(jit__compile__done)           \
  X(cache__hit)                   \
  X(cache__miss)                  \
  X(patch__applied)               \
  X(patch__rolled__back)          \
  X(model__load)                  \
  X(model__unload)

#define CUVIL_PROBE_DECLARE_SEMAPHORE_(name) extern unsigned short cuvil_##name##_semaphore;
extern "C" {
CUVIL_PROBE_SEMAPHORES(CUVIL_PROBE_DECLARE_SEMAPHORE_)
}
#undef CUVIL_PROBE_DECLARE_SEMAPHORE_

// True while a tracer is attached to probe `name`.
#define CUVIL_PROBE_ENABLED(name) \
  __builtin_expect(*static_cast<volatile unsigned short*>(&cuvil_##name##_semaphore) != 0, 0)

#define CUVIL_PROBE_S_(x) static_cast<const char*>(x)
#define CUVIL_PROBE_I_(x) static_cast<int64_t>(x)

#define CUVIL_PROBE_REQUEST_START(model, version, request_id)                            \
  do {                                                                                   \
    if (CUVIL_PROBE_ENABLED(request__start))                                             \
      STAP_PROBE3(cuvil, request__start, CUVIL_PROBE_S_(model), CUVIL_PROBE_S_(version), \
                  CUVIL_PROBE_I_(request_id));                                           \
  } while (0)

#define CUVIL_PROBE_REQUEST_DONE(model, version, request_id, status_code, latency_ns)   \
  do {                                                                                  \
    if (CUVIL_PROBE_ENABLED(request__done))                                             \
      STAP_PROBE5(cuvil, request__done, CUVIL_PROBE_S_(model), CUVIL_PROBE_S_(version), \
                  CUVIL_PROBE_I_(request_id), CUVIL_PROBE_I_(status_code),              \
                  CUVIL_PROBE_I_(latency_ns));                                          \
  } while (0)

#define CUVIL_PROBE_BATCH_START(model, batch_size)                                         \
  do {                                                                                     \
    if (CUVIL_PROBE_ENABLED(batch__start))                                                 \
      STAP_PROBE2(cuvil, batch__start, CUVIL_PROBE_S_(model), CUVIL_PROBE_I_(batch_size)); \
  } while (0)

#define CUVIL_PROBE_BATCH_DONE(model, batch_size, duration_ns)                           \
  do {                                                                                   \
    if (CUVIL_PROBE_ENABLED(batch__done))                                                \
      STAP_PROBE3(cuvil, batch__done, CUVIL_PROBE_S_(model), CUVIL_PROBE_I_(batch_size), \
                  CUVIL_PROBE_I_(duration_ns));                                          \
  } while (0)

#define CUVIL_PROBE_JIT_COMPILE_START(model)                          \
  do {                                                                \
    if (CUVIL_PROBE_ENABLED(jit__compile__start))                     \
      STAP_PROBE1(cuvil, jit__compile__start, CUVIL_PROBE_S_(model)); \
  } while (0)

#define CUVIL_PROBE_JIT_COMPILE_DONE(model, duration_ns)                                          \
  do {                                                                                            \
    if (CUVIL_PROBE_ENABLED(jit__compile__done))                                                  \
      STAP_PROBE2(cuvil, jit__compile__done, CUVIL_PROBE_S_(model), CUVIL_PROBE_I_(duration_ns)); \
  } while (0)

#define CUVIL_PROBE_CACHE_HIT(model)                                                            \
  do {                                                                                          \
    if (CUVIL_PROBE_ENABLED(cache__hit)) STAP_PROBE1(cuvil, cache__hit, CUVIL_PROBE_S_(model)); \
  } while (0)

#define CUVIL_PROBE_CACHE_MISS(model)                                                             \
  do {                                                                                            \
    if (CUVIL_PROBE_ENABLED(cache__miss)) STAP_PROBE1(cuvil, cache__miss, CUVIL_PROBE_S_(model)); \
  } while (0)

#define CUVIL_PROBE_PATCH_APPLIED(model, function)                                         \
  do {                                                                                     \
    if (CUVIL_PROBE_ENABLED(patch__applied))                                               \
      STAP_PROBE2(cuvil, patch__applied, CUVIL_PROBE_S_(model), CUVIL_PROBE_S_(function)); \
  } while (0)

#define CUVIL_PROBE_PATCH_ROLLED_BACK(model, function)                                          \
  do {                                                                                          \
    if (CUVIL_PROBE_ENABLED(patch__rolled__back))                                               \
      STAP_PROBE2(cuvil, patch__rolled__back, CUVIL_PROBE_S_(model), CUVIL_PROBE_S_(function)); \
  } while (0)

#define CUVIL_PROBE_MODEL_LOAD(model, version)                                         \
  do {                                                                                 \
    if (CUVIL_PROBE_ENABLED(model__load))                                              \
      STAP_PROBE2(cuvil, model__load, CUVIL_PROBE_S_(model), CUVIL_PROBE_S_(version)); \
  } while (0)

#define CUVIL_PROBE_MODEL_UNLOAD(model, version)                                         \
  do {                                                                                   \
    if (CUVIL_PROBE_ENABLED(model__unload))                                              \
      STAP_PROBE2(cuvil, model__unload, CUVIL_PROBE_S_(model), CUVIL_PROBE_S_(version)); \
  } while (0)

#endif  // CUVIL_OBSERVABILITY_PROBES_H_
