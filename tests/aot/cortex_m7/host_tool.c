/* Host side of the cortex-m7 AOT tests (built with the system C compiler and
 * examples/aot/tensor_proto.c):
 *   host_tool raw IN.pb OUT.bin
 *     writes the tensor's elements (little-endian) to OUT.bin, for test_data.S to link in;
 *   host_tool compare LOG ATOL RTOL SET_DIR...
 *     reads the firmware's semihosting output LOG (see run_model.c), checks the instruction
 *     counting against its calibration loop, and compares set S's outputs
 *     with SET_DIR_S/output_I.pb elementwise: |got - ref| <= ATOL + RTOL * |ref|. Prints one
 *     line per set (the largest error, the instructions NAME_run took: timer ticks * 40 under
 *     qemu -icount shift=0) and exits 0 when every set ran, matched and made no heap call. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor_proto.h"

enum { kNsPerTick = 40 };

static int raw(const char* in, const char* out) {
  tensor_proto t;
  if (tensor_proto_read(in, &t) != 0) return 1;
  FILE* f = fopen(out, "wb");
  if (f == NULL || fwrite(t.data, 1, t.bytes, f) != t.bytes || fclose(f) != 0) {
    fprintf(stderr, "cannot write %s\n", out);
    return 1;
  }
  tensor_proto_free(&t);
  return 0;
}

/* Element e of `size` bytes of little-endian `bytes` as a double, read as ONNX type `dtype`. */
static double element(const unsigned char* bytes, int size, int32_t dtype) {
  tensor_proto t = {0};
  t.data_type = dtype;
  t.data = (unsigned char*)bytes;
  t.bytes = (size_t)size;
  return tensor_proto_get(&t, 0);
}

static int compare(const char* log_path, double atol, double rtol, int num_sets, char** dirs) {
  FILE* log = fopen(log_path, "r");
  if (log == NULL) return fprintf(stderr, "cannot read %s\n", log_path), 1;
  int failed = 0, seen = 0;
  char word[64];
  unsigned set = 0, batch = 0, heap = 0;
  unsigned long long arena = 0, ticks = 0;
  while (fscanf(log, " %63s", word) == 1) {
    if (strcmp(word, "calibration") == 0) {
      unsigned long long insns = 0, cal_ticks = 0;
      if (fscanf(log, " instructions %llu ticks %llu", &insns, &cal_ticks) != 2) {
        fprintf(stderr, "malformed calibration line in %s\n", log_path);
        return 1;
      }
      /* One tick is 40 instructions: the count is exact to within a tick either way. */
      const double counted = (double)cal_ticks * kNsPerTick;
      if (fabs(counted - (double)insns) > 2.0 * kNsPerTick) {
        printf(
            "FAIL: a loop of %llu instructions took %llu timer ticks (%.0f instructions): "
            "not running under -icount shift=0?\n",
            insns, cal_ticks, counted);
        failed = 1;
      }
    } else if (strcmp(word, "set") == 0) {
      if (fscanf(log, "%u batch %u arena %llu heap_calls %u ticks %llu", &set, &batch, &arena,
                 &heap, &ticks) != 5 ||
          set >= (unsigned)num_sets) {
        fprintf(stderr, "malformed set line in %s\n", log_path);
        return 1;
      }
      ++seen;
      if (heap != 0) failed = 1, printf("FAIL set %u: %u heap calls during NAME_run\n", set, heap);
    } else if (strcmp(word, "out") == 0) {
      unsigned index, size;
      unsigned long long n;
      if (fscanf(log, "%u %llu %u", &index, &n, &size) != 3 || size == 0 || size > 8) {
        fprintf(stderr, "malformed out line in %s\n", log_path);
        return 1;
      }
      char path[4096];
      snprintf(path, sizeof path, "%s/output_%u.pb", dirs[set], index);
      tensor_proto ref;
      if (tensor_proto_read(path, &ref) != 0) return 1;
      const size_t ref_size = tensor_proto_elem_size(ref.data_type);
      if (ref_size != size || ref.bytes != n * size) {
        printf("FAIL set %u output %u: %llu elements of %u bytes, reference has %zu bytes\n", set,
               index, n, size, ref.bytes);
        failed = 1;
      }
      double worst = 0;
      unsigned long long bad = 0;
      for (unsigned long long e = 0; e < n; ++e) {
        char text[17];
        if (fscanf(log, " %16s", text) != 1 || strlen(text) != 2 * size) {
          fprintf(stderr, "truncated output %u in %s\n", index, log_path);
          return 1;
        }
        unsigned char bytes[8];
        for (unsigned b = 0; b < size; ++b) {
          unsigned v;
          sscanf(text + 2 * (size - 1 - b), "%2x", &v);
          bytes[b] = (unsigned char)v;
        }
        if (e * size >= ref.bytes) continue;
        const double got = element(bytes, (int)size, ref.data_type);
        const double want = tensor_proto_get(&ref, e);
        const double err = fabs(got - want);
        if (!(err <= atol + rtol * fabs(want))) ++bad;
        if (err > worst || err != err) worst = err;
      }
      if (bad > 0) failed = 1;
      printf(
          "%s set %u (batch %u) output %u: max abs error %.3g over %llu elements%s; arena %llu "
          "bytes; NAME_run %llu instructions\n",
          bad > 0 ? "FAIL" : "PASS", set, batch, index, worst, n,
          bad > 0 ? " (out of tolerance)" : "", arena, ticks * kNsPerTick);
      tensor_proto_free(&ref);
    } else if (strcmp(word, "FAIL") == 0) {
      failed = 1;
      printf("FAIL: the firmware reported a failure\n");
    }
  }
  fclose(log);
  if (seen != num_sets) {
    printf("FAIL: %d of %d sets ran\n", seen, num_sets);
    failed = 1;
  }
  return failed;
}

int main(int argc, char** argv) {
  if (argc == 4 && strcmp(argv[1], "raw") == 0) return raw(argv[2], argv[3]);
  if (argc >= 6 && strcmp(argv[1], "compare") == 0) {
    return compare(argv[2], atof(argv[3]), atof(argv[4]), argc - 5, argv + 5);
  }
  fprintf(stderr,
          "usage: %s raw IN.pb OUT.bin\n"
          "       %s compare LOG ATOL RTOL SET_DIR...\n",
          argv[0], argv[0]);
  return 2;
}
