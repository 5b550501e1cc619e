/* port_qemu_arm.c - Cortex-M firmware running in qemu-system-arm (env:sim-BOARD, platforms/qemu-arm).
 *
 * The protocol runs over the machine's first UART, which QEMU connects to a pty (-serial pty), so the
 * host's Device client talks to it like to a board's USB serial port:
 *   - MPS2 boards (mps2-an385 M3, mps2-an386 M4F, mps2-an500 M7, mps2-an505 M33): the CMSDK APB UART0
 *     (0x40004000; on the AN505, which boots in the Secure state, its Secure alias 0x50200000);
 *   - micro:bit (nRF51, Cortex-M0): the nRF51 UART at 0x40002000.
 * The platform's builder passes the UART with -DMCT_QEMU_UART_CMSDK=<base> or -DMCT_QEMU_UART_NRF51=<base>.
 * Exit, saves (a host file) and the markers use semihosting (port_qemu_common.h); the UARTs are polled,
 * interrupts stay off. */
#ifdef MCT_PORT_QEMU_ARM
#include <stdint.h>

#include "mct_port.h"

/* One semihosting request: BKPT 0xAB with the operation in r0 and its argument block in r1. */
static uintptr_t sh_call(uintptr_t op, const void *arg) {
    register uintptr_t r0 __asm("r0") = op;
    register const void *r1 __asm("r1") = arg;
    __asm volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}

#include "port_qemu_common.h"

#define REG(base, off) (*(volatile uint32_t *)((uintptr_t)(base) + (off)))

#if defined(MCT_QEMU_UART_CMSDK)
/* ARM CMSDK APB UART: DATA, STATE (bit 0 TX full, bit 1 RX full), CTRL (bit 0 TX enable, bit 1 RX
 * enable), BAUDDIV (QEMU only requires a valid divider, at least 16). */
enum { UART_DATA = 0x00, UART_STATE = 0x04, UART_CTRL = 0x08, UART_BAUDDIV = 0x10 };
enum { UART_TX_FULL = 1u, UART_RX_FULL = 2u, UART_TX_EN = 1u, UART_RX_EN = 2u };

static void uart_init(void) {
    REG(MCT_QEMU_UART_CMSDK, UART_BAUDDIV) = 16u;
    REG(MCT_QEMU_UART_CMSDK, UART_CTRL) = UART_TX_EN | UART_RX_EN;
}

static int uart_getc(void) {
    while (!(REG(MCT_QEMU_UART_CMSDK, UART_STATE) & UART_RX_FULL)) {}
    return (int)(REG(MCT_QEMU_UART_CMSDK, UART_DATA) & 0xFFu);
}

static void uart_putc(uint8_t c) {
    while (REG(MCT_QEMU_UART_CMSDK, UART_STATE) & UART_TX_FULL) {}
    REG(MCT_QEMU_UART_CMSDK, UART_DATA) = c;
}

#elif defined(MCT_QEMU_UART_NRF51)
/* nRF51 UART: tasks STARTRX/STARTTX, events RXDRDY/TXDRDY, ENABLE = 4, RXD/TXD. */
enum { UART_STARTRX = 0x000, UART_STARTTX = 0x008, UART_RXDRDY = 0x108, UART_TXDRDY = 0x11C,
       UART_ENABLE = 0x500, UART_RXD = 0x518, UART_TXD = 0x51C };

static void uart_init(void) {
    REG(MCT_QEMU_UART_NRF51, UART_ENABLE) = 4u;
    REG(MCT_QEMU_UART_NRF51, UART_STARTRX) = 1u;
    REG(MCT_QEMU_UART_NRF51, UART_STARTTX) = 1u;
}

static int uart_getc(void) {
    while (!REG(MCT_QEMU_UART_NRF51, UART_RXDRDY)) {}
    REG(MCT_QEMU_UART_NRF51, UART_RXDRDY) = 0u;       /* clear first: reading RXD re-arms it if more wait */
    return (int)(REG(MCT_QEMU_UART_NRF51, UART_RXD) & 0xFFu);
}

static void uart_putc(uint8_t c) {
    REG(MCT_QEMU_UART_NRF51, UART_TXD) = c;
    while (!REG(MCT_QEMU_UART_NRF51, UART_TXDRDY)) {}
    REG(MCT_QEMU_UART_NRF51, UART_TXDRDY) = 0u;
}

#else
#error "port_qemu_arm.c: the platform must define MCT_QEMU_UART_CMSDK or MCT_QEMU_UART_NRF51 (the UART's base address)"
#endif

#if defined(__ARM_ARCH_6M__)
/* ARMv6-M (the micro:bit's M0) has neither an MPU nor a stack limit register: a canary in the 32-byte
 * guard below the stack, checked before every byte the firmware sends or waits for, catches an overflow
 * after the fact, before a reply computed with corrupted memory leaves the device. */
#define CANARY 0x5Cu
extern uint8_t _sguard[], _sstack[];

static void canary_set(void) {
    for (uint8_t *p = _sguard; p < _sstack; p++) *p = CANARY;
}

static void canary_check(void) {
    for (const uint8_t *p = _sguard; p < _sstack; p++)
        if (*p != CANARY) port_fatal("mcutrain firmware: stack overflow (the canary below the stack was "
                                     "overwritten; ARMv6-M has no stack guard)\n", 99);
}
#else
static void canary_set(void) {}
static void canary_check(void) {}
#endif

void port_init(void) {
    canary_set();
    uart_init();
    qemu_common_init();
}

int port_getc(void) {
    canary_check();
    return uart_getc();
}

void port_write(const uint8_t *p, uint16_t n) {
    canary_check();
    while (n--) uart_putc(*p++);
}

void port_flush(void) {}

/* The fault handler of the platform's startup code ends here, with the stack pointer at the fault. Reports
 * the stacked PC (when the exception frame could be written) and, on ARMv7-M/ARMv8-M, the fault status
 * registers CFSR and HFSR and the fault addresses MMFAR and BFAR. */
void mct_qemu_fault(uint32_t sp) {
    extern uint8_t _sstack[], _estack[];
    const char *names[5];
    uint32_t vals[5];
    uint8_t n = 0;
    if (sp > (uint32_t)(uintptr_t)_sstack && sp + 32u <= (uint32_t)(uintptr_t)_estack) {
        names[n] = "pc";
        vals[n++] = ((const uint32_t *)(uintptr_t)sp)[6];
    }
#if defined(__ARM_ARCH_7M__) || defined(__ARM_ARCH_7EM__) || defined(__ARM_ARCH_8M_MAIN__)
    static const char *const regs[4] = {"cfsr", "hfsr", "mmfar", "bfar"};
    static const uint32_t addrs[4] = {0xE000ED28u, 0xE000ED2Cu, 0xE000ED34u, 0xE000ED38u};
    for (uint8_t i = 0; i < 4; i++) {
        names[n] = regs[i];
        vals[n++] = REG(addrs[i], 0);
    }
#endif
    port_fault_report("CPU fault", sp, names, vals, n);
}

#endif /* MCT_PORT_QEMU_ARM */

/* Keeps the file a valid translation unit (ISO C) in builds for other ports. */
typedef int mct_port_qemu_arm_unit;
