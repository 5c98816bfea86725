/* Runs an ahead-of-time compiled model on an ONNX test case and compares its outputs.
 *   cuvilc compile model.onnx --aot out --name mymodel
 *   cc -O2 -Iout -DMODEL=mymodel run_model.c tensor_proto.c out/libmymodel.a -lm -o run_model
 *   ./run_model CASE_DIR [--repeat N] [--atol A] [--rtol R]
 * reads CASE_DIR/input_<i>.pb, runs (N times, timed), compares with CASE_DIR/output_<i>.pb. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor_proto.h"

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define API(x) CAT(MODEL, x)
#define STR2(x) #x
#define STR(x) STR2(x)
#include STR(MODEL.h)

int main(int argc, char** argv) {
  if (argc < 2)
    return fprintf(stderr, "usage: %s CASE_DIR [--repeat N] [--atol A] [--rtol R]\n", argv[0]), 2;
  int repeat = 1;
  double atol = 1e-3, rtol = 1e-3;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--repeat"))
      repeat = atoi(argv[i + 1]);
    else if (!strcmp(argv[i], "--atol"))
      atol = atof(argv[i + 1]);
    else if (!strcmp(argv[i], "--rtol"))
      rtol = atof(argv[i + 1]);
  }
  char path[4096];
  tensor_proto in[API(_NUM_INPUTS) + 1];
  const void* in_ptrs[API(_NUM_INPUTS) + 1];
  void* out_ptrs[API(_NUM_OUTPUTS) + 1];
  int64_t batch = 1;
  for (int i = 0; i < API(_NUM_INPUTS); ++i) {
    snprintf(path, sizeof path, "%s/input_%d.pb", argv[1], i);
    if (tensor_proto_read(path, &in[i]) != 0) return 1;
    in_ptrs[i] = in[i].data;
    /* The batch: the file's element count over the descriptor's at batch 1. */
    int64_t per = cuvil_aot_elements(&API(_inputs)[i], 1);
    int64_t have = (int64_t)(in[i].bytes / API(_inputs)[i].elem_size);
    if (i == 0 && per > 0) batch = have / per;
    if (cuvil_aot_elements(&API(_inputs)[i], batch) != have)
      return fprintf(stderr, "%s: %lld elements do not fit %s\n", path, (long long)have,
                     API(_inputs)[i].name),
             1;
  }
  for (int i = 0; i < API(_NUM_OUTPUTS); ++i)
    out_ptrs[i] =
        malloc((size_t)cuvil_aot_elements(&API(_outputs)[i], batch) * API(_outputs)[i].elem_size);
  size_t arena_bytes = API(_arena_bytes)(batch);
  void* arena = aligned_alloc(CUVIL_AOT_ARENA_ALIGN, (arena_bytes + 63) / 64 * 64 + 64);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int r = 0; r < repeat; ++r) {
    int rc = API(_run)(in_ptrs, out_ptrs, batch, arena);
    if (rc != CUVIL_AOT_OK) return fprintf(stderr, "run failed: %d\n", rc), 1;
  }
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double ms = ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6) / repeat;
  int failed = 0;
  for (int i = 0; i < API(_NUM_OUTPUTS); ++i) {
    tensor_proto ref, got = {0};
    snprintf(path, sizeof path, "%s/output_%d.pb", argv[1], i);
    if (tensor_proto_read(path, &ref) != 0) return 1;
    got.data_type = API(_outputs)[i].dtype;
    got.data = out_ptrs[i];
    size_t n = (size_t)cuvil_aot_elements(&API(_outputs)[i], batch);
    if (ref.bytes != n * API(_outputs)[i].elem_size)
      failed = 1, fprintf(stderr, "output %d: size differs\n", i);
    double worst = 0;
    for (size_t k = 0; !failed && k < n; ++k) {
      double a = tensor_proto_get(&got, k), b = tensor_proto_get(&ref, k), err = fabs(a - b);
      if (err > worst) worst = err;
      if (!(err <= atol + rtol * fabs(b))) {
        fprintf(stderr, "output %d [%zu]: %g, expected %g\n", i, k, a, b);
        failed = 1;
      }
    }
    printf("output %s: %zu elements, max abs error %.3g\n", API(_outputs)[i].name, n, worst);
    tensor_proto_free(&ref);
  }
  printf("%s batch %lld: %.3f ms per run (%d runs, body %s)\n", failed ? "FAIL" : "PASS",
         (long long)batch, ms, repeat, API(_tier)());
  return failed;
}
