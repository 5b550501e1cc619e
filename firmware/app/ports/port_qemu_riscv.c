/* port_qemu_riscv.c - rv32 firmware running in qemu-system-riscv32 -M virt (env:sim-BOARD for the
 * ESP32-C3, platforms/qemu-riscv).
 *
 * The protocol runs over the virt machine's NS16550A UART (0x10000000, byte registers; override with
 * -DMCT_QEMU_UART_16550=<base>), which QEMU connects to a pty (-serial pty). Exit, saves (a host file)
 * and the markers use semihosting (port_qemu_common.h). The UART is polled, interrupts stay off. */
#ifdef MCT_PORT_QEMU_RISCV
#include <stdint.h>

#include "mct_port.h"

/* One semihosting request: the RISC-V semihosting sequence (slli x0,x0,0x1f; ebreak; srai x0,x0,7) with the
 * operation in a0 and its argument block in a1. The three instructions must be uncompressed and lie in one
 * page (QEMU ignores the request otherwise and takes a breakpoint trap): aligning them to 16 bytes keeps
 * the 12 bytes within one page (the padding, a few nops, is emitted while compressed code is allowed). */
static uintptr_t sh_call(uintptr_t op, const void *arg) {
    register uintptr_t a0 __asm("a0") = op;
    register const void *a1 __asm("a1") = arg;
    __asm volatile(".option push\n\t.balign 16\n\t.option norvc\n\t"
                   "slli x0, x0, 0x1f\n\tebreak\n\tsrai x0, x0, 7\n\t.option pop"
                   : "+r"(a0) : "r"(a1) : "memory");
    return a0;
}

#include "port_qemu_common.h"

#ifndef MCT_QEMU_UART_16550
#define MCT_QEMU_UART_16550 0x10000000u
#endif
#define UART(off) (*(volatile uint8_t *)((uintptr_t)MCT_QEMU_UART_16550 + (off)))
/* 16550 registers: RBR/THR, IER, LCR, LSR (bit 0 data ready, bit 5 transmit holding empty). */
enum { UART_RBR = 0, UART_THR = 0, UART_IER = 1, UART_LCR = 3, UART_LSR = 5 };
enum { LSR_DATA_READY = 0x01u, LSR_THR_EMPTY = 0x20u };

void port_init(void) {
    UART(UART_IER) = 0x00u;            /* no interrupts */
    UART(UART_LCR) = 0x03u;            /* 8 data bits, no parity, 1 stop bit */
    /* FCR stays 0 (FIFOs off, as after reset): turning the FIFOs on empties them, and a byte the host
     * sent while the firmware was starting would be lost */
    qemu_common_init();
}

int port_getc(void) {
    while (!(UART(UART_LSR) & LSR_DATA_READY)) {}
    return UART(UART_RBR);
}

void port_write(const uint8_t *p, uint16_t n) {
    while (n--) {
        while (!(UART(UART_LSR) & LSR_THR_EMPTY)) {}
        UART(UART_THR) = *p++;
    }
}

void port_flush(void) {}

/* Read a machine-mode CSR (the CSR instructions are the Zicsr extension, separate for the assembler). */
#define READ_CSR(name, out) \
    __asm volatile(".option push\n\t.option arch, +zicsr\n\tcsrr %0, " name "\n\t.option pop" : "=r"(out))

/* The trap handler of the platform's startup code ends here, with the stack pointer at the trap (no trap is
 * expected: a bad access, an illegal instruction, or a store into the guard below the stack). */
void mct_qemu_fault(uint32_t sp) {
    static const char *const names[3] = {"mcause", "mepc", "mtval"};
    uint32_t vals[3];
    READ_CSR("mcause", vals[0]);
    READ_CSR("mepc", vals[1]);
    READ_CSR("mtval", vals[2]);
    port_fault_report("trap", sp, names, vals, 3);
}

#endif /* MCT_PORT_QEMU_RISCV */

/* Keeps the file a valid translation unit (ISO C) in builds for other ports. */
typedef int mct_port_qemu_riscv_unit;
