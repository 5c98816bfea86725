/* Firmware main for the cortex-m7 AOT tests: runs an ahead-of-time compiled model (built with
 * -DMODEL=name against name.h and libname.a) on every test data set linked into the image
 * (test_data.S, written by cortex_m7_models.sh), and prints over semihosting the timer ticks of a
 * loop of known length (checks the instruction counting), then per set the batch,
 * the arena bytes, the timer ticks NAME_run took (under qemu -icount shift=0) and every output
 * element's bytes in hex, for the host to compare with the references:
 *   calibration instructions N ticks T
 *   set S batch B arena A heap_calls H ticks T
 *   out I N ELEM_SIZE
 *   <hex of element 0> <hex of element 1> ...   (16 per line)
 *   end S
 * The arena and the outputs come from the RAM the linker script leaves free (no heap). Exits 0
 * after the last set, or 1 with a FAIL line when a call fails or the RAM is too small. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "board.h"

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define API(x) CAT(MODEL, x)
#define STR2(x) #x
#define STR(x) STR2(x)
#include STR(MODEL.h)

/* From test_data.S: the number of sets, then per set and input its bytes' address and size. */
extern const uint32_t cuvil_test_num_sets;
extern const uint32_t cuvil_test_inputs[]; /* [set][input]: address, bytes */

static char line[320]; /* 16 elements of up to 8 bytes in hex */

/* Appends the decimal `v` at `p`; returns the end. */
static char* put_dec(char* p, uint64_t v) {
  char tmp[24];
  int n = 0;
  do tmp[n++] = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  while (n > 0) *p++ = tmp[--n];
  return p;
}

/* Appends `s` at `p`; returns the end. */
static char* put_str(char* p, const char* s) {
  while (*s) *p++ = *s++;
  return p;
}

/* The next `bytes` of the free RAM at `*next`, 64-byte aligned; NULL when it is used up. */
static void* take(char** next, size_t bytes) {
  uintptr_t at = ((uintptr_t)*next + 63u) & ~(uintptr_t)63u;
  if (bytes > (uintptr_t)__free_ram_end || at > (uintptr_t)__free_ram_end - bytes) return NULL;
  *next = (char*)(at + bytes);
  return (void*)at;
}

static int fail(const char* what) {
  char* p = put_str(line, "FAIL ");
  p = put_str(p, what);
  *p++ = '\n';
  *p = 0;
  board_write(line);
  return 1;
}

/* Timer ticks a loop of exactly 2 * kCalibrationLoops instructions takes (SUBS, BNE), which
 * checks the instruction counting: 2 * kCalibrationLoops / BOARD_NS_PER_TICK under -icount
 * shift=0. */
enum { kCalibrationLoops = 100000 };
static uint32_t calibration_ticks(void) {
  uint32_t n = kCalibrationLoops;
  board_timer_start();
  __asm__ volatile("1: subs %0, %0, #1\n\tbne 1b" : "+r"(n) : : "cc");
  return board_timer_ticks();
}

int main(void) {
  static const char hex[] = "0123456789abcdef";
  const uint32_t num_inputs = API(_NUM_INPUTS);
  char* c = put_str(line, "calibration instructions ");
  c = put_dec(c, 2 * kCalibrationLoops);
  c = put_str(c, " ticks ");
  c = put_dec(c, calibration_ticks());
  *c++ = '\n';
  *c = 0;
  board_write(line);
  for (uint32_t s = 0; s < cuvil_test_num_sets; ++s) {
    char* next = __free_ram_start;
    const void* in_ptrs[API(_NUM_INPUTS) + 1];
    void* out_ptrs[API(_NUM_OUTPUTS) + 1];
    /* The batch: input 0's bytes over its bytes at batch 1. */
    const uint32_t* set = &cuvil_test_inputs[2 * num_inputs * s];
    const int64_t per = cuvil_aot_elements(&API(_inputs)[0], 1) * API(_inputs)[0].elem_size;
    const int64_t batch = per > 0 ? (int64_t)set[1] / per : 1;
    for (uint32_t i = 0; i < num_inputs; ++i) {
      in_ptrs[i] = (const void*)(uintptr_t)set[2 * i];
      if (cuvil_aot_elements(&API(_inputs)[i], batch) * API(_inputs)[i].elem_size !=
          (int64_t)set[2 * i + 1]) {
        return fail("an input's size does not fit the model's inputs at the batch");
      }
    }
    const size_t arena_bytes = API(_arena_bytes)(batch);
    void* arena = take(&next, arena_bytes);
    if (arena == NULL) return fail("the arena does not fit in the free RAM");
    for (int i = 0; i < API(_NUM_OUTPUTS); ++i) {
      out_ptrs[i] = take(&next, (size_t)(cuvil_aot_elements(&API(_outputs)[i], batch) *
                                         API(_outputs)[i].elem_size));
      if (out_ptrs[i] == NULL) return fail("the outputs do not fit in the free RAM");
    }
    const uint32_t heap_before = board_heap_calls;
    board_timer_start();
    const int rc = API(_run)(in_ptrs, out_ptrs, batch, arena);
    const uint32_t ticks = board_timer_ticks();
    if (rc != CUVIL_AOT_OK) return fail("NAME_run did not return CUVIL_AOT_OK");
    char* p = put_str(line, "set ");
    p = put_dec(p, s);
    p = put_str(p, " batch ");
    p = put_dec(p, (uint64_t)batch);
    p = put_str(p, " arena ");
    p = put_dec(p, arena_bytes);
    p = put_str(p, " heap_calls ");
    p = put_dec(p, board_heap_calls - heap_before);
    p = put_str(p, " ticks ");
    p = put_dec(p, ticks);
    p = put_str(p, "\n");
    *p = 0;
    board_write(line);
    for (int i = 0; i < API(_NUM_OUTPUTS); ++i) {
      const int32_t size = API(_outputs)[i].elem_size;
      const int64_t n = cuvil_aot_elements(&API(_outputs)[i], batch);
      p = put_str(line, "out ");
      p = put_dec(p, (uint64_t)i);
      *p++ = ' ';
      p = put_dec(p, (uint64_t)n);
      *p++ = ' ';
      p = put_dec(p, (uint64_t)size);
      *p++ = '\n';
      *p = 0;
      board_write(line);
      const unsigned char* bytes = (const unsigned char*)out_ptrs[i];
      p = line;
      for (int64_t e = 0; e < n; ++e) {
        /* Little-endian element: most significant byte first in the text. */
        for (int32_t b = size - 1; b >= 0; --b) {
          *p++ = hex[bytes[e * size + b] >> 4];
          *p++ = hex[bytes[e * size + b] & 15];
        }
        *p++ = (e % 16 == 15 || e + 1 == n) ? '\n' : ' ';
        if (e % 16 == 15 || e + 1 == n) {
          *p = 0;
          board_write(line);
          p = line;
        }
      }
    }
    p = put_str(line, "end ");
    p = put_dec(p, s);
    *p++ = '\n';
    *p = 0;
    board_write(line);
  }
  return 0;
}
