/* Two ahead-of-time libraries in one program (built as C and as C++): their internals have
 * private names, so they link side by side; checks the API's argument errors and descriptors. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "lenet.h"
#include "mlp.h"

#define CHECK(cond)                                              \
  do {                                                           \
    if (!(cond)) {                                               \
      fprintf(stderr, "%s:%d: %s\n", __FILE__, __LINE__, #cond); \
      return 1;                                                  \
    }                                                            \
  } while (0)

int main(void) {
  CHECK(mlp_NUM_INPUTS == 1 && mlp_NUM_OUTPUTS == 1);
  CHECK(strcmp(mlp_inputs[0].name, "input") == 0 && mlp_inputs[0].dtype == 1);
  CHECK(mlp_inputs[0].rank == 2 && mlp_inputs[0].dims[0].power == 1);
  CHECK(mlp_inputs[0].dims[1].coef == 784 && mlp_inputs[0].dims[1].power == 0);
  CHECK(cuvil_aot_elements(&lenet_inputs[0], 3) == 3 * 28 * 28);
  CHECK(mlp_arena_bytes(0) == SIZE_MAX && mlp_arena_bytes(-5) == SIZE_MAX);
  CHECK(mlp_arena_bytes(INT64_MAX) == SIZE_MAX);
  const int64_t batch = 3;
  float* x = (float*)calloc(3 * 784, sizeof(float));
  float* y_mlp = (float*)malloc(3 * 10 * sizeof(float));
  float* y_lenet = (float*)malloc(3 * 10 * sizeof(float));
  size_t bytes = mlp_arena_bytes(batch) > lenet_arena_bytes(batch) ? mlp_arena_bytes(batch)
                                                                   : lenet_arena_bytes(batch);
  unsigned char* arena = (unsigned char*)aligned_alloc(64, (bytes + 64) / 64 * 64 + 64);
  const void* in[1] = {x};
  void* out_mlp[1] = {y_mlp};
  void* out_lenet[1] = {y_lenet};
  CHECK(mlp_run(in, out_mlp, 0, arena) == CUVIL_AOT_BAD_BATCH);
  CHECK(mlp_run(NULL, out_mlp, batch, arena) == CUVIL_AOT_NULL_ARGUMENT);
  const void* null_in[1] = {NULL};
  CHECK(mlp_run(null_in, out_mlp, batch, arena) == CUVIL_AOT_NULL_ARGUMENT);
  if (mlp_arena_bytes(batch) > 0) {
    CHECK(mlp_run(in, out_mlp, batch, NULL) == CUVIL_AOT_NULL_ARGUMENT);
    CHECK(mlp_run(in, out_mlp, batch, arena + 8) == CUVIL_AOT_MISALIGNED_ARENA);
  }
  CHECK(mlp_run(in, out_mlp, batch, arena) == CUVIL_AOT_OK);
  CHECK(lenet_run(in, out_lenet, batch, arena) == CUVIL_AOT_OK);
  /* The same zero input gives the same logits in every row, up to summation order (a real run,
   * not a stub: the two models' logits differ). */
  for (int i = 0; i < 10; ++i) {
    CHECK(fabsf(y_mlp[i] - y_mlp[10 + i]) < 1e-6f && fabsf(y_mlp[i] - y_mlp[20 + i]) < 1e-6f);
    CHECK(fabsf(y_lenet[i] - y_lenet[20 + i]) < 1e-6f);
  }
  CHECK(memcmp(y_mlp, y_lenet, 10 * sizeof(float)) != 0);
  printf("two_models: mlp and lenet ran side by side\n");
  free(x);
  free(y_mlp);
  free(y_lenet);
  free(arena);
  return 0;
}
