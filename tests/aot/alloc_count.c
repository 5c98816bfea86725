/* Linked into an AOT test program: counts every heap allocation the program (the AOT library
 * included) makes and prints "allocations=N" at exit, so a test can compare the counts of runs
 * that call NAME_run a different number of times. glibc's own entry points do the work. */
#include <stddef.h>
#include <stdio.h>

extern void* __libc_malloc(size_t bytes);
extern void* __libc_calloc(size_t count, size_t bytes);
extern void* __libc_realloc(void* p, size_t bytes);
extern void* __libc_memalign(size_t align, size_t bytes);
extern void __libc_free(void* p);

static long allocations;

void* malloc(size_t bytes) { return ++allocations, __libc_malloc(bytes); }
void* calloc(size_t count, size_t bytes) { return ++allocations, __libc_calloc(count, bytes); }
void* realloc(void* p, size_t bytes) { return ++allocations, __libc_realloc(p, bytes); }
void* aligned_alloc(size_t align, size_t bytes) {
  return ++allocations, __libc_memalign(align, bytes);
}
void* memalign(size_t align, size_t bytes) { return ++allocations, __libc_memalign(align, bytes); }
int posix_memalign(void** p, size_t align, size_t bytes) {
  ++allocations;
  *p = __libc_memalign(align, bytes);
  return *p != NULL ? 0 : 12; /* ENOMEM */
}
void free(void* p) { __libc_free(p); }

__attribute__((destructor)) static void ReportAllocations(void) {
  fprintf(stderr, "allocations=%ld\n", allocations);
}
