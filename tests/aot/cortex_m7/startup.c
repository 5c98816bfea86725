/* Startup code for the emulated Arm MPS2 AN500 (Cortex-M7): the vector table, the reset handler
 * (copies .data, zeroes .bss, turns the FPU on, runs constructors, calls main and exits through
 * semihosting with main's result), fault handlers that report and exit, and the board functions
 * of board.h. No heap: _sbrk fails, and the allocation functions are wrapped (link with
 * -Wl,--wrap=malloc,... see cortex_m7_models.sh) to count and fail. */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "board.h"

extern uint32_t __data_start[], __data_end[], __data_load[], __bss_start[], __bss_end[];
extern uint32_t __stack_top[];
extern void (*__init_array_start[])(void);
extern void (*__init_array_end[])(void);
int main(void);

volatile uint32_t board_heap_calls;

/* One semihosting call: operation `op`, argument `arg` (BKPT 0xAB on M-profile). */
static uint32_t semihost(uint32_t op, const void* arg) {
  register uint32_t r0 __asm__("r0") = op;
  register const void* r1 __asm__("r1") = arg;
  __asm__ volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
  return r0;
}

void board_write(const char* s) { semihost(0x04 /* SYS_WRITE0 */, s); }

void board_exit(int code) {
  /* ADP_Stopped_ApplicationExit with the exit status as subcode. */
  const uint32_t block[2] = {0x20026u, (uint32_t)code};
  semihost(0x20 /* SYS_EXIT_EXTENDED */, block);
  for (;;) {
  }
}

#define CMSDK_TIMER0 ((volatile uint32_t*)0x40000000u)

void board_timer_start(void) {
  CMSDK_TIMER0[0] = 0;           /* CTRL: stop */
  CMSDK_TIMER0[2] = 0xffffffffu; /* RELOAD */
  CMSDK_TIMER0[1] = 0xffffffffu; /* VALUE */
  CMSDK_TIMER0[0] = 1;           /* CTRL: enable */
}

uint32_t board_timer_ticks(void) { return 0xffffffffu - CMSDK_TIMER0[1]; }

/* No heap: newlib's allocator finds no memory, and direct calls count and fail. */
void* _sbrk(ptrdiff_t incr) {
  (void)incr;
  errno = ENOMEM;
  return (void*)-1;
}
void* __wrap_malloc(size_t n) {
  (void)n;
  ++board_heap_calls;
  return NULL;
}
void* __wrap_calloc(size_t n, size_t size) {
  (void)n, (void)size;
  ++board_heap_calls;
  return NULL;
}
void* __wrap_realloc(void* p, size_t n) {
  (void)p, (void)n;
  ++board_heap_calls;
  return NULL;
}
void* __wrap_aligned_alloc(size_t align, size_t n) {
  (void)align, (void)n;
  ++board_heap_calls;
  return NULL;
}
void* __wrap_memalign(size_t align, size_t n) {
  (void)align, (void)n;
  ++board_heap_calls;
  return NULL;
}
void __wrap_free(void* p) { (void)p; }

/* Appends `v` as 8 hex digits at `p`; returns the end. */
static char* put_hex(char* p, uint32_t v) {
  for (int shift = 28; shift >= 0; shift -= 4) *p++ = "0123456789abcdef"[(v >> shift) & 15u];
  return p;
}

/* A fault ends the run (status 3) with the faulting PC (from the exception's stack frame) and the
 * fault status registers CFSR, HFSR, MMFAR and BFAR. */
void board_fault_report(const uint32_t* frame) {
  static const uint32_t regs[] = {0xE000ED28u, 0xE000ED2Cu, 0xE000ED34u, 0xE000ED38u};
  char text[96];
  char* p = text;
  for (const char* s = "FAULT pc="; *s;) *p++ = *s++;
  p = put_hex(p, frame[6]);
  for (int i = 0; i < 4; ++i) {
    *p++ = ' ';
    p = put_hex(p, *(volatile uint32_t*)regs[i]);
  }
  *p++ = '\n';
  *p = 0;
  board_write(text);
  board_exit(3);
}

/* The fault handlers' entry: the stack the exception frame is on (MSP or PSP, by EXC_RETURN). */
__attribute__((naked)) static void fault(void) {
  __asm__ volatile(
      "tst lr, #4\n\t"
      "ite eq\n\t"
      "mrseq r0, msp\n\t"
      "mrsne r0, psp\n\t"
      "b board_fault_report\n");
}

void cuvil_reset_handler(void) {
  memcpy(__data_start, __data_load, (size_t)((char*)__data_end - (char*)__data_start));
  memset(__bss_start, 0, (size_t)((char*)__bss_end - (char*)__bss_start));
  /* CPACR: full access to CP10 and CP11 (the FPU) before any floating-point instruction. */
  *(volatile uint32_t*)0xE000ED88u |= 0xFu << 20;
  __asm__ volatile("dsb\n\tisb" ::: "memory");
  for (void (**f)(void) = __init_array_start; f != __init_array_end; ++f) (*f)();
  board_exit(main());
}

/* Initial stack pointer, then the handlers: reset, NMI, HardFault, MemManage, BusFault,
 * UsageFault. The firmware enables no interrupts. */
__attribute__((section(".isr_vector"), used)) static const void* const vectors[16] = {
    __stack_top,        (const void*)cuvil_reset_handler,
    (const void*)fault, (const void*)fault,
    (const void*)fault, (const void*)fault,
    (const void*)fault};
