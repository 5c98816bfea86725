// SPDX-License-Identifier: (LGPL-2.1 OR BSD-2-Clause)
/* cuvil-probe's BPF side: one USDT handler per probe of the `cuvil` provider (see
 * observability/include/cuvil/observability/probes.h). Handlers aggregate in kernel maps; the
 * exporter reads the maps on every scrape, so no per-event data crosses to userspace. */
/* vmlinux.h must come first: the libbpf headers use its kernel types. */
/* clang-format off */
#include "vmlinux.h"

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

#include "cuvil_probe.h"
/* clang-format on */

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, CUVIL_PROBE_MAX_HIST_ENTRIES);
  __type(key, struct cuvil_probe_hist_key);
  __type(value, __u64);
} latency_hist SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, CUVIL_PROBE_MAX_HIST_ENTRIES);
  __type(key, struct cuvil_probe_hist_key);
  __type(value, __u64);
} batch_hist SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, CUVIL_PROBE_MAX_STATUS_ENTRIES);
  __type(key, struct cuvil_probe_status_key);
  __type(value, __u64);
} requests SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, CUVIL_PROBE_MAX_EVENT_ENTRIES);
  __type(key, struct cuvil_probe_event_key);
  __type(value, struct cuvil_probe_event_value);
} events SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, CUVIL_STAT_COUNT);
  __type(key, __u32);
  __type(value, __u64);
} stats SEC(".maps");

static __always_inline void count_failure(void) {
  __u32 idx = CUVIL_STAT_UPDATE_FAILURES;
  __u64* v = bpf_map_lookup_elem(&stats, &idx);
  if (v) __sync_fetch_and_add(v, 1);
}

/* floor(log2(v)) for v > 0, branch-free so the verifier sees no loop. */
static __always_inline __u32 log2_u64(__u64 v) {
  __u32 r = 0, shift;
  shift = (v > 0xFFFFFFFFULL) << 5;
  v >>= shift;
  r |= shift;
  shift = (v > 0xFFFF) << 4;
  v >>= shift;
  r |= shift;
  shift = (v > 0xFF) << 3;
  v >>= shift;
  r |= shift;
  shift = (v > 0xF) << 2;
  v >>= shift;
  r |= shift;
  shift = (v > 0x3) << 1;
  v >>= shift;
  r |= shift;
  r |= (v >> 1);
  return r;
}

/* Bucket b holds 2^(b-1) < v <= 2^b; bucket 0 holds v <= 1. */
static __always_inline __u32 bucket_of(__s64 value) {
  if (value <= 1) return 0;
  return log2_u64((__u64)value - 1) + 1;
}

static __always_inline void add_u64(void* map, const void* key, __u64 delta) {
  __u64* v = bpf_map_lookup_elem(map, key);
  if (v) {
    __sync_fetch_and_add(v, delta);
    return;
  }
  __u64 init = delta;
  if (bpf_map_update_elem(map, key, &init, BPF_NOEXIST) == 0) return;
  /* Lost the race against another CPU inserting the same key, or the map is full. */
  v = bpf_map_lookup_elem(map, key);
  if (v) {
    __sync_fetch_and_add(v, delta);
    return;
  }
  count_failure();
}

static __always_inline void read_str(char* dst, const char* src) {
  if (src) bpf_probe_read_user_str(dst, CUVIL_PROBE_STR_LEN, src);
}

static __always_inline void hist_add(void* map, const char* model, __s64 value) {
  struct cuvil_probe_hist_key key;
  __builtin_memset(&key, 0, sizeof(key));
  read_str(key.model, model);
  key.bucket = bucket_of(value);
  add_u64(map, &key, 1);
}

static __always_inline void event_add(__u32 kind, const char* model, const char* extra, __s64 ns,
                                      __s64 value) {
  struct cuvil_probe_event_key key;
  __builtin_memset(&key, 0, sizeof(key));
  key.kind = kind;
  read_str(key.model, model);
  read_str(key.extra, extra);
  __u64 sum_ns = ns > 0 ? (__u64)ns : 0;
  __u64 sum_value = value > 0 ? (__u64)value : 0;

  struct cuvil_probe_event_value* v = bpf_map_lookup_elem(&events, &key);
  if (!v) {
    struct cuvil_probe_event_value init = {.count = 1, .sum_ns = sum_ns, .sum_value = sum_value};
    if (bpf_map_update_elem(&events, &key, &init, BPF_NOEXIST) == 0) return;
    v = bpf_map_lookup_elem(&events, &key);
    if (!v) {
      count_failure();
      return;
    }
  }
  __sync_fetch_and_add(&v->count, 1);
  __sync_fetch_and_add(&v->sum_ns, sum_ns);
  __sync_fetch_and_add(&v->sum_value, sum_value);
}

SEC("usdt")
int BPF_USDT(request_start, const char* model, const char* version, const char* request_id) {
  event_add(CUVIL_EV_REQUEST_START, model, 0, 0, 0);
  return 0;
}

SEC("usdt")
int BPF_USDT(request_done, const char* model, const char* version, const char* request_id,
             long status_code, long latency_ns) {
  struct cuvil_probe_status_key key;
  __builtin_memset(&key, 0, sizeof(key));
  read_str(key.model, model);
  key.status = status_code;
  add_u64(&requests, &key, 1);
  hist_add(&latency_hist, model, latency_ns);
  event_add(CUVIL_EV_REQUEST_DONE, model, 0, latency_ns, 0);
  return 0;
}

SEC("usdt")
int BPF_USDT(batch_start, const char* model, long batch_size) {
  event_add(CUVIL_EV_BATCH_START, model, 0, 0, batch_size);
  return 0;
}

SEC("usdt")
int BPF_USDT(batch_done, const char* model, long batch_size, long duration_ns) {
  hist_add(&batch_hist, model, batch_size);
  event_add(CUVIL_EV_BATCH_DONE, model, 0, duration_ns, batch_size);
  return 0;
}

SEC("usdt")
int BPF_USDT(jit_compile_start, const char* model) {
  event_add(CUVIL_EV_JIT_COMPILE_START, model, 0, 0, 0);
  return 0;
}

SEC("usdt")
int BPF_USDT(jit_compile_done, const char* model, long duration_ns) {
  event_add(CUVIL_EV_JIT_COMPILE_DONE, model, 0, duration_ns, 0);
  return 0;
}

SEC("usdt")
int BPF_USDT(cache_hit, const char* model) {
  event_add(CUVIL_EV_CACHE_HIT, model, 0, 0, 0);
  return 0;
}

SEC("usdt")
int BPF_USDT(cache_miss, const char* model) {
  event_add(CUVIL_EV_CACHE_MISS, model, 0, 0, 0);
  return 0;
}

SEC("usdt")
int BPF_USDT(patch_applied, const char* model, const char* function) {
  event_add(CUVIL_EV_PATCH_APPLIED, model, function, 0, 0);
  return 0;
}

SEC("usdt")
int BPF_USDT(patch_rolled_back, const char* model, const char* function) {
  event_add(CUVIL_EV_PATCH_ROLLED_BACK, model, function, 0, 0);
  return 0;
}

SEC("usdt")
int BPF_USDT(model_load, const char* model, const char* version) {
  event_add(CUVIL_EV_MODEL_LOAD, model, version, 0, 0);
  return 0;
}

SEC("usdt")
int BPF_USDT(model_unload, const char* model, const char* version) {
  event_add(CUVIL_EV_MODEL_UNLOAD, model, version, 0, 0);
  return 0;
}
