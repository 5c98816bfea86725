/* Board support for the emulated Arm MPS2 AN500 (Cortex-M7) firmware of the cortex-m7 AOT tests:
 * semihosting output and exit, the CMSDK timer as an instruction counter under `qemu -icount
 * shift=0`, and the heap guard. Implemented in startup.c. Single-threaded; no interrupts used. */
#ifndef CUVIL_TESTS_AOT_CORTEX_M7_BOARD_H_
#define CUVIL_TESTS_AOT_CORTEX_M7_BOARD_H_

#include <stdint.h>

/* Writes the NUL-terminated `s` to the host's console (semihosting SYS_WRITE0). */
void board_write(const char* s);

/* Ends the emulation with exit status `code` (semihosting SYS_EXIT_EXTENDED). */
void board_exit(int code) __attribute__((noreturn));

/* Starts CMSDK APB timer 0 (25 MHz, counting down from 2^32 - 1). */
void board_timer_start(void);

/* Timer 0 ticks since board_timer_start. Under `-icount shift=0` QEMU advances virtual time by
 * 1 ns per instruction, so ticks * BOARD_NS_PER_TICK is the instructions executed (to within one
 * tick). Wraps after 2^32 ticks. */
uint32_t board_timer_ticks(void);
#define BOARD_NS_PER_TICK 40u /* 25 MHz */

/* Calls of malloc, calloc, realloc, aligned_alloc or memalign since reset. The firmware has no
 * heap: each of them fails and counts. */
extern volatile uint32_t board_heap_calls;

/* Bounds of the RAM the linker script leaves free between .bss and the stack (64-byte aligned). */
extern char __free_ram_start[];
extern char __free_ram_end[];

#endif /* CUVIL_TESTS_AOT_CORTEX_M7_BOARD_H_ */
