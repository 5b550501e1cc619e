/* startup.c - reset and fault handling of mcutrain's Cortex-M firmware under QEMU (platforms/qemu-arm).
 *
 * Reset: copy .data from flash, zero .bss, give the FPU full access (cores with one), put a guard
 * below the stack (ARMv8-M: the MSPLIM stack limit; ARMv7-M: a no-access MPU region of 32 bytes at
 * _sguard; ARMv6-M has neither), then main(). Every fault resets the stack pointer and ends in
 * mct_qemu_fault(sp at the fault) (ports/port_qemu_arm.c), which reports it and exits QEMU with status 99.
 * Symbols from the linker script (ldscripts/sections.ld): _sidata, _sdata, _edata, _sbss, _ebss,
 * _sguard, _sstack, _estack. */
#include <stdint.h>

extern uint32_t _sidata[], _sdata[], _edata[], _sbss[], _ebss[];
extern uint8_t _sguard[], _sstack[], _estack[];
extern int main(void);
extern void port_exit(int code);

void Reset_Handler(void);
void Fault_Handler(void);

/* Default for a firmware without the QEMU port: stop here. */
__attribute__((weak)) void mct_qemu_fault(uint32_t sp) {
    (void)sp;
    for (;;) {}
}

/* A fault may come from an overflowing stack: start over at the top of the stack before any C code, and
 * pass the stack pointer of the fault (where the exception frame is, if it could be written). */
__attribute__((naked)) void Fault_Handler(void) {
    __asm volatile("mrs r0, msp\n\t"
                   "ldr r1, =_estack\n\t"
                   "mov sp, r1\n\t"
                   "ldr r1, =mct_qemu_fault\n\t"
                   "bx r1\n\t"
                   ".ltorg");
}

typedef void (*vector_fn)(void);

/* Initial stack pointer, reset and the system exceptions; interrupts stay disabled (all I/O is polled). */
__attribute__((section(".vectors"), used)) const vector_fn mct_vectors[16] = {
    (vector_fn)(uintptr_t)_estack, Reset_Handler,
    Fault_Handler,      /* NMI */
    Fault_Handler,      /* HardFault */
    Fault_Handler,      /* MemManage */
    Fault_Handler,      /* BusFault */
    Fault_Handler,      /* UsageFault */
    Fault_Handler,      /* SecureFault (ARMv8-M) */
    0, 0, 0,
    Fault_Handler,      /* SVCall */
    Fault_Handler,      /* DebugMonitor */
    0,
    Fault_Handler,      /* PendSV */
    Fault_Handler,      /* SysTick */
};

#define SCB_CPACR (*(volatile uint32_t *)0xE000ED88u)
#define MPU_CTRL (*(volatile uint32_t *)0xE000ED94u)
#define MPU_RNR (*(volatile uint32_t *)0xE000ED98u)
#define MPU_RBAR (*(volatile uint32_t *)0xE000ED9Cu)
#define MPU_RASR (*(volatile uint32_t *)0xE000EDA0u)

/* Make writes below the stack fault instead of silently corrupting .bss. */
static void stack_guard(void) {
#if defined(__ARM_ARCH_8M_MAIN__) || defined(__ARM_ARCH_8M_BASE__)
    __asm volatile("msr msplim, %0" : : "r"(_sstack));
#elif defined(__ARM_ARCH_7M__) || defined(__ARM_ARCH_7EM__)
    MPU_RNR = 0u;
    MPU_RBAR = (uint32_t)(uintptr_t)_sguard;          /* 32-byte aligned by the linker script */
    MPU_RASR = (1u << 28)                             /* XN */
             | (0u << 24)                             /* AP = no access */
             | (4u << 1)                              /* SIZE: 2^(4+1) = 32 bytes */
             | 1u;                                    /* enable */
    MPU_CTRL = (1u << 2) | 1u;                        /* PRIVDEFENA: the default map elsewhere; enable */
    __asm volatile("dsb\n\tisb" ::: "memory");
#endif
}

void Reset_Handler(void) {
    for (uint32_t *s = _sidata, *d = _sdata; d < _edata;) *d++ = *s++;
    for (uint32_t *d = _sbss; d < _ebss;) *d++ = 0u;
#if defined(__ARM_FP)
    SCB_CPACR |= 0xFu << 20;                          /* CP10, CP11: full access */
    __asm volatile("dsb\n\tisb" ::: "memory");
#endif
    stack_guard();
    port_exit(main());
}
