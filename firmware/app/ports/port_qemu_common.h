/* port_qemu_common.h - the parts of the QEMU ports (port_qemu_arm.c, port_qemu_riscv.c) that do not
 * depend on the machine: semihosting (exit, saves to a host file, the command line), measurement
 * markers and the stack bounds. Included once by each port after it has defined
 *     static uintptr_t sh_call(uintptr_t op, const void *arg);   -- one semihosting request
 *
 * Saves: the "storage" is a file on the computer that runs QEMU, reached through semihosting file
 * I/O. Its name is the text after "store=" in the semihosting command line (QEMU's
 * -semihosting-config arg=...; everything after "store=" up to the end of the line), else
 * MCT_STORE_PATH (a build-time define, default "mcutrain_store.bin" in QEMU's working directory).
 * Bytes never written read as 0xFF, like erased flash; the file grows as saves are written.
 *
 * Sensor (CAPTURE): the file named after "sensor=" in the semihosting command line (up to the next space, and
 * before "store="), raw windows one after another, read in order; without one, or when it ends, no window.
 *
 * Markers: port_mark(region, begin) calls one of the noinline, never-merged functions
 * mct_mark_<region>_<begin|end> below; the QEMU plugin (firmware/host_tools/insn_plugin.c) counts the
 * guest instructions from the first instruction of a begin marker to the first instruction of the
 * matching end marker. Every call goes through the same table, so each pair costs the same few
 * instructions; port_init runs one empty pair (region "empty") so a report can state that cost.
 *
 * Stack: the linker scripts of platforms/qemu-* reserve the RAM after .bss as the stack, from
 * _sstack up to _estack (the initial stack pointer). */
#ifndef MCT_PORT_QEMU_COMMON_H
#define MCT_PORT_QEMU_COMMON_H

#include <stdint.h>
#include <string.h>

#include "mct_port.h"

#ifndef MCT_STORE_PATH
#define MCT_STORE_PATH "mcutrain_store.bin"
#endif
#ifndef MCT_STORE_BYTES
#define MCT_STORE_BYTES (64u * 1024u)
#endif
#define MCT_STORE_NAME_MAX 256u
#define MCT_SENSOR_NAME_MAX 64u

/* Semihosting operation numbers (Arm semihosting specification, also used by RISC-V). */
enum {
    SH_OPEN = 0x01, SH_CLOSE = 0x02, SH_WRITE0 = 0x04, SH_WRITE = 0x05, SH_READ = 0x06, SH_SEEK = 0x0A,
    SH_FLEN = 0x0C, SH_CLOCK = 0x10, SH_GET_CMDLINE = 0x15, SH_EXIT_EXTENDED = 0x20
};
enum { SH_MODE_RPLUSB = 3, SH_MODE_WPLUSB = 7 };                  /* fopen modes "r+b", "w+b" */
#define SH_APPLICATION_EXIT 0x20026u                                /* ADP_Stopped_ApplicationExit */

static uintptr_t sh_call(uintptr_t op, const void *arg);

/* ---- saves in a host file ---- */
static char store_name[MCT_STORE_NAME_MAX];
static intptr_t store_fd = -1;        /* -1: not open yet */
static char sensor_name[MCT_SENSOR_NAME_MAX];   /* empty: no sensor file */
static uint32_t sensor_at;            /* the byte offset of the sensor file's next window */

/* The store's file name: "store=..." from the semihosting command line, else MCT_STORE_PATH. The command
 * line is read into store_name itself and the name moved to its start (no second buffer in RAM). */
static void store_find_name(void) {
    uintptr_t blk[2] = {(uintptr_t)store_name, sizeof store_name - 1};
    const char *name = 0;
    if (sh_call(SH_GET_CMDLINE, blk) == 0) {
        store_name[blk[1] < sizeof store_name ? blk[1] : sizeof store_name - 1] = '\0';
        for (const char *p = store_name; *p; p++) {
            if ((p == store_name || p[-1] == ' ') && !strncmp(p, "sensor=", 7)) {
                size_t k = 0;
                for (p += 7; *p && *p != ' ' && k < sizeof sensor_name - 1; p++) sensor_name[k++] = *p;
                sensor_name[k] = '\0';
                if (!*p) break;
            }
            if ((p == store_name || p[-1] == ' ') && !strncmp(p, "store=", 6) && p[6]) { name = p + 6; break; }
        }
    }
    if (name) {
        memmove(store_name, name, strlen(name) + 1);
    } else {
        size_t n = strlen(MCT_STORE_PATH);
        if (n >= sizeof store_name) n = sizeof store_name - 1;
        memcpy(store_name, MCT_STORE_PATH, n);
        store_name[n] = '\0';
    }
}

/* Open the store (mode: SH_MODE_RPLUSB to use an existing file, SH_MODE_WPLUSB to create it). */
static int store_open(uintptr_t mode) {
    if (store_fd >= 0) return 0;
    uintptr_t blk[3] = {(uintptr_t)store_name, mode, strlen(store_name)};
    intptr_t fd = (intptr_t)sh_call(SH_OPEN, blk);
    if (fd < 0) return 1;
    store_fd = fd;
    return 0;
}

/* Length of the open store file. */
static uint32_t store_length(void) {
    uintptr_t blk[1] = {(uintptr_t)store_fd};
    intptr_t n = (intptr_t)sh_call(SH_FLEN, blk);
    return n < 0 ? 0u : (uint32_t)n;
}

static int store_seek(uint32_t off) {
    uintptr_t blk[2] = {(uintptr_t)store_fd, off};
    return sh_call(SH_SEEK, blk) != 0;
}

/* Write n bytes at the current position; 0 when all were written. */
static int store_put(const void *p, uint32_t n) {
    uintptr_t blk[3] = {(uintptr_t)store_fd, (uintptr_t)p, n};
    return sh_call(SH_WRITE, blk) != 0;      /* returns the number of bytes NOT written */
}

uint32_t port_store_size(void) { return MCT_STORE_BYTES; }

int port_store_read(uint32_t off, void *dst, uint32_t n) {
    if ((uint64_t)off + n > MCT_STORE_BYTES) return 1;
    memset(dst, 0xFF, n);                                 /* erased storage reads as 0xFF */
    if (store_open(SH_MODE_RPLUSB)) return 0;             /* no file yet: all erased */
    uint32_t len = store_length();
    if (off >= len) return 0;
    uint32_t have = len - off < n ? len - off : n;
    if (store_seek(off)) return 1;
    uintptr_t blk[3] = {(uintptr_t)store_fd, (uintptr_t)dst, have};
    return sh_call(SH_READ, blk) != 0;       /* returns the number of bytes NOT read */
}

int port_store_write(uint32_t off, const void *src, uint32_t n) {
    if ((uint64_t)off + n > MCT_STORE_BYTES) return 1;
    if (store_open(SH_MODE_RPLUSB) && store_open(SH_MODE_WPLUSB)) return 1;
    uint32_t len = store_length();
    if (len < off) {                                      /* fill the gap with erased bytes */
        uint8_t erased[32];
        memset(erased, 0xFF, sizeof erased);
        if (store_seek(len)) return 1;
        while (len < off) {
            uint32_t k = off - len < sizeof erased ? off - len : (uint32_t)sizeof erased;
            if (store_put(erased, k)) return 1;
            len += k;
        }
    }
    if (store_seek(off)) return 1;
    return store_put(src, n);
}

/* ---- the sensor: raw windows from a host file ---- */
int port_sensor_read(void *dst, uint32_t n) {
    if (!sensor_name[0]) return 0;
    uintptr_t blk[3] = {(uintptr_t)sensor_name, 1 /* "rb" */, strlen(sensor_name)};
    intptr_t fd = (intptr_t)sh_call(SH_OPEN, blk);
    if (fd < 0) return 0;
    uintptr_t len[1] = {(uintptr_t)fd};
    intptr_t size = (intptr_t)sh_call(SH_FLEN, len);
    int ok = size >= 0 && (uint32_t)size >= sensor_at && (uint32_t)size - sensor_at >= n;
    uintptr_t seek[2] = {(uintptr_t)fd, sensor_at};
    if (ok) ok = sh_call(SH_SEEK, seek) == 0;
    uintptr_t rd[3] = {(uintptr_t)fd, (uintptr_t)dst, n};
    if (ok) ok = sh_call(SH_READ, rd) == 0;     /* the number of bytes NOT read */
    sh_call(SH_CLOSE, len);
    if (ok) sensor_at += n;
    return ok;
}

/* ---- exit ---- */
/* Centiseconds of execution time (semihosting SYS_CLOCK; QEMU answers with its own process time). */
static intptr_t sh_clock(void) { return (intptr_t)sh_call(SH_CLOCK, 0); }

void port_exit(int code) {
    port_flush();
    /* let the host read the last reply before QEMU (and its pty) goes away: about 50 ms */
    intptr_t t0 = sh_clock();
    if (t0 >= 0)
        while (sh_clock() - t0 < 5) {}
    uintptr_t blk[2] = {SH_APPLICATION_EXIT, (uintptr_t)(intptr_t)code};
    for (;;) sh_call(SH_EXIT_EXTENDED, blk);
}

/* Report a fatal condition on QEMU's stderr/stdout and end with exit code `code`. */
static void port_fatal(const char *msg, int code) {
    sh_call(SH_WRITE0, msg);
    uintptr_t blk[2] = {SH_APPLICATION_EXIT, (uintptr_t)(intptr_t)code};
    for (;;) sh_call(SH_EXIT_EXTENDED, blk);
}

/* Report a CPU fault or trap with the registers that explain it (as "name=0x12345678"), say "stack overflow"
 * when the stack pointer had left the stack, and exit with status 99. */
static void port_fault_report(const char *what, uint32_t sp, const char *const *names, const uint32_t *vals,
                              uint8_t n) {
    extern uint8_t _sstack[];
    static char msg[200];
    static const char hex[] = "0123456789abcdef";
    size_t k = 0;
    const char *parts[3] = {"mcutrain firmware: ", what, ":"};
    for (uint8_t i = 0; i < 3; i++)
        for (const char *c = parts[i]; *c && k < sizeof msg - 40; c++) msg[k++] = *c;
    for (uint8_t i = 0; i <= n && k < sizeof msg - 40; i++) {
        const char *name = i < n ? names[i] : "sp";
        uint32_t v = i < n ? vals[i] : sp;
        msg[k++] = ' ';
        for (const char *c = name; *c && k < sizeof msg - 20; c++) msg[k++] = *c;
        msg[k++] = '=';
        msg[k++] = '0';
        msg[k++] = 'x';
        for (int b = 28; b >= 0; b -= 4) msg[k++] = hex[(v >> b) & 0xFu];
    }
    const char *tail = sp <= (uint32_t)(uintptr_t)_sstack ? " (stack overflow)\n" : "\n";
    for (const char *c = tail; *c && k < sizeof msg - 1; c++) msg[k++] = *c;
    msg[k] = '\0';
    port_fatal(msg, 99);
}

/* ---- measurement markers ---- */
/* noipa: never inlined, cloned or merged with an identical function (each needs its own address);
 * the volatile store makes the bodies differ anyway and leaves the last marker in RAM for debuggers. */
volatile uint8_t mct_mark_last;
#define MCT_MARKER(name, code) \
    __attribute__((noipa, used)) void name(void) { mct_mark_last = (code); __asm volatile("" ::: "memory"); }
MCT_MARKER(mct_mark_predict_begin, 0x01)
MCT_MARKER(mct_mark_predict_end, 0x00)
MCT_MARKER(mct_mark_train_begin, 0x11)
MCT_MARKER(mct_mark_train_end, 0x10)
MCT_MARKER(mct_mark_empty_begin, 0x21)
MCT_MARKER(mct_mark_empty_end, 0x20)
#undef MCT_MARKER

typedef void (*mct_marker_fn)(void);
/* [region][begin]: region 0 = inference, 1 = training step, 2 = empty (cost of a marker pair). */
static mct_marker_fn const marker_table[3][2] = {
    {mct_mark_predict_end, mct_mark_predict_begin},
    {mct_mark_train_end, mct_mark_train_begin},
    {mct_mark_empty_end, mct_mark_empty_begin},
};

void port_mark(uint8_t region, uint8_t begin) {
    if (region < 3) marker_table[region][begin ? 1 : 0]();
}

/* Measure nothing once, so the cost of a marker pair is known. */
static void marker_calibrate(void) {
    port_mark(2, 1);
    port_mark(2, 0);
}

/* ---- stack ---- */
extern uint8_t _sstack[], _estack[];

int port_stack_bounds(uint8_t **lo, uint8_t **hi) {
    *lo = _sstack;
    *hi = _estack;
    return 1;
}

/* Shared part of port_init: the store's name and the marker calibration. */
static void qemu_common_init(void) {
    store_find_name();
    marker_calibrate();
}

#endif /* MCT_PORT_QEMU_COMMON_H */
