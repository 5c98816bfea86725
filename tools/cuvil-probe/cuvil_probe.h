/* Map layouts shared by cuvil_probe.bpf.c and the cuvil-probe userspace exporter.
 *
 * Written in the common subset of C and C++: the BPF side includes it after vmlinux.h (which
 * defines the __u32/__u64/__s64 types), userspace after <linux/types.h>. */
#ifndef CUVIL_TOOLS_CUVIL_PROBE_CUVIL_PROBE_H_
#define CUVIL_TOOLS_CUVIL_PROBE_CUVIL_PROBE_H_

/* Strings read from the traced process (model, version, function) are truncated to this many
 * bytes including the terminating NUL. */
#define CUVIL_PROBE_STR_LEN 32

/* Log2 buckets: bucket b counts values v with 2^(b-1) < v <= 2^b (bucket 0: v <= 1), so 2^b is
 * the bucket's inclusive upper bound, which is exactly a Prometheus `le`. */
#define CUVIL_PROBE_BUCKETS 65

#define CUVIL_PROBE_MAX_HIST_ENTRIES 16384
#define CUVIL_PROBE_MAX_STATUS_ENTRIES 4096
#define CUVIL_PROBE_MAX_EVENT_ENTRIES 8192

/* Event kinds of the `events` map: one per USDT probe of the `cuvil` provider. */
enum cuvil_probe_event_kind {
  CUVIL_EV_REQUEST_START = 0, /* extra: "" */
  CUVIL_EV_REQUEST_DONE = 1,  /* extra: "", sum_ns: latency */
  CUVIL_EV_BATCH_START = 2,   /* extra: "", sum_value: batch size */
  CUVIL_EV_BATCH_DONE = 3,    /* extra: "", sum_ns: duration, sum_value: batch size */
  CUVIL_EV_JIT_COMPILE_START = 4,
  CUVIL_EV_JIT_COMPILE_DONE = 5, /* sum_ns: compile time */
  CUVIL_EV_CACHE_HIT = 6,
  CUVIL_EV_CACHE_MISS = 7,
  CUVIL_EV_PATCH_APPLIED = 8,     /* extra: function */
  CUVIL_EV_PATCH_ROLLED_BACK = 9, /* extra: function */
  CUVIL_EV_MODEL_LOAD = 10,       /* extra: version */
  CUVIL_EV_MODEL_UNLOAD = 11,     /* extra: version */
  CUVIL_EV_KIND_COUNT = 12,
};

/* latency_hist (ns) and batch_hist (batch size): per model, per log2 bucket -> count. */
struct cuvil_probe_hist_key {
  char model[CUVIL_PROBE_STR_LEN];
  __u32 bucket;
  __u32 pad;
};

/* requests: per model and status code -> count of request__done. */
struct cuvil_probe_status_key {
  char model[CUVIL_PROBE_STR_LEN];
  __s64 status;
};

/* events: per probe, model and extra string -> count and sums. */
struct cuvil_probe_event_key {
  __u32 kind;
  __u32 pad;
  char model[CUVIL_PROBE_STR_LEN];
  char extra[CUVIL_PROBE_STR_LEN];
};

struct cuvil_probe_event_value {
  __u64 count;
  __u64 sum_ns;
  __u64 sum_value;
};

/* Index of the `stats` array map. */
enum cuvil_probe_stat {
  CUVIL_STAT_UPDATE_FAILURES = 0, /* a map was full: an event was not recorded */
  CUVIL_STAT_COUNT = 1,
};

#endif /* CUVIL_TOOLS_CUVIL_PROBE_CUVIL_PROBE_H_ */
