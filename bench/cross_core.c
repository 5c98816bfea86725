// Cost of touching memory the other core wrote last, against this core's own (bench/RESULTS.md,
// "Two threads"). Two threads pinned to cpu0 and cpu1 take turns: cpu1 writes 1 MiB, then cpu0
// reads it (or overwrites it) and, for comparison, writes it and reads (or overwrites) it again.
// usage: gcc -O2 -march=native -pthread bench/cross_core.c -o /tmp/cross_core && /tmp/cross_core
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { kFloats = 1 << 18, kRounds = 200 };  // 1 MiB per round
static float* buf;
static atomic_int phase;

static double Now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

static void Pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void* Writer(void* arg) {
  (void)arg;
  Pin(1);
  for (int r = 0; r < 2 * kRounds; ++r) {
    while (atomic_load(&phase) != 2 * r) {
    }
    for (int i = 0; i < kFloats; ++i) buf[i] = (float)(r + i);
    atomic_store(&phase, 2 * r + 1);
  }
  return NULL;
}

int main(void) {
  buf = aligned_alloc(64, kFloats * sizeof(float));
  memset(buf, 0, kFloats * sizeof(float));
  Pin(0);
  pthread_t t;
  pthread_create(&t, NULL, Writer, NULL);
  double read_other = 0, read_own = 0, write_other = 0, write_own = 0;
  volatile float sink = 0;
  for (int r = 0; r < 2 * kRounds; ++r) {
    while (atomic_load(&phase) != 2 * r + 1) {
    }
    const int reading = r < kRounds;
    double t0 = Now();
    float a = 0;
    if (reading) {
      for (int i = 0; i < kFloats; ++i) a += buf[i];
    } else {
      for (int i = 0; i < kFloats; ++i) buf[i] = (float)(2 * r + i);
    }
    double t1 = Now();
    for (int i = 0; i < kFloats; ++i) buf[i] = a + (float)i;
    double t2 = Now();
    float b = 0;
    if (reading) {
      for (int i = 0; i < kFloats; ++i) b += buf[i];
    } else {
      for (int i = 0; i < kFloats; ++i) buf[i] = (float)(3 * r + i);
    }
    double t3 = Now();
    sink += a + b;
    if (reading) {
      read_other += t1 - t0;
      read_own += t3 - t2;
    } else {
      write_other += t1 - t0;
      write_own += t3 - t2;
    }
    atomic_store(&phase, 2 * r + 2);
  }
  pthread_join(t, NULL);
  printf("1 MiB last written by the other core: read %.1f us, overwrite %.1f us\n",
         read_other / kRounds / 1e3, write_other / kRounds / 1e3);
  printf("1 MiB last written by this core:      read %.1f us, overwrite %.1f us\n",
         read_own / kRounds / 1e3, write_own / kRounds / 1e3);
  return 0;
}
