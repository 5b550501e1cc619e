/* startup.S - reset and trap handling of mcutrain's rv32 firmware under QEMU -M virt (platforms/qemu-riscv).
 *
 * _start (the ELF entry; QEMU -bios none jumps here in machine mode): set gp and sp, point mtvec at the
 * trap handler, copy .data from its load image, zero .bss, lock a no-access PMP region over the 32-byte
 * guard below the stack (_sguard) so an overflowing stack traps instead of corrupting .bss, then
 * main(). A trap resets sp and ends in mct_qemu_fault(sp at the trap) (ports/port_qemu_riscv.c), which
 * reports it and exits QEMU with status 99. Symbols come from ldscripts/sections.ld. */
    .option arch, +zicsr        /* the CSR instructions (part of every rv32 core, a separate extension to gas) */
    .section .text.start, "ax", @progbits
    .globl _start
    .type _start, @function
_start:
    .option push
    .option norelax
    la gp, __global_pointer$
    .option pop
    la sp, _estack
    la t0, mct_trap_entry
    csrw mtvec, t0

    la a0, _sdata
    la a1, _edata
    la a2, _sidata
1:  bgeu a0, a1, 2f
    lw t0, 0(a2)
    sw t0, 0(a0)
    addi a0, a0, 4
    addi a2, a2, 4
    j 1b
2:  la a0, _sbss
    la a1, _ebss
3:  bgeu a0, a1, 4f
    sw zero, 0(a0)
    addi a0, a0, 4
    j 3b

4:  /* PMP entry 0: NAPOT region of 32 bytes at _sguard, locked (applies to machine mode), no R/W/X */
    la t0, _sguard
    addi t0, t0, 15
    srli t0, t0, 2
    csrw pmpaddr0, t0
    li t0, 0x98                 /* L | A=NAPOT */
    csrw pmpcfg0, t0

    call main
    call port_exit
5:  j 5b
    .size _start, . - _start

    .balign 4
    .type mct_trap_entry, @function
mct_trap_entry:
    mv a0, sp                   /* the stack pointer of the trap, for the report */
    la sp, _estack
    j mct_qemu_fault
    .size mct_trap_entry, . - mct_trap_entry

    /* default for a firmware without the QEMU port: stop here */
    .weak mct_qemu_fault
    .type mct_qemu_fault, @function
mct_qemu_fault:
    j mct_qemu_fault
    .size mct_qemu_fault, . - mct_qemu_fault
