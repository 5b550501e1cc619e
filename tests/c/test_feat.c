/* test_feat.c - runs the feature pipelines of feat_case.h (written by tests/test_features.py) and prints, per
 * case k, "k f32 HEX..." (features of the float window), "k i16 HEX..." (of the int16 window) and "k tables HASH"
 * (FNV-1a over the table words); the test compares them with the host trainer's bits.
 * Host: buffers are heap blocks of exactly the sizes mct_feat_size reports (AddressSanitizer sees overruns).
 * Devices (FEAT_DEVICE): static buffers; output through feat_putc, which the target's build provides
 * (FEAT_SEMIHOST: Arm semihosting, as under QEMU; FEAT_AVR: USART0 under simavr's harness). */
#include <stdint.h>
#include <string.h>

#include "feat_case.h"
#include "mct_feat.h"

#if defined(FEAT_AVR)
#include <avr/interrupt.h>
#include <avr/io.h>
#include <avr/sleep.h>
static void feat_putc(char ch) {
    loop_until_bit_is_set(UCSR0A, UDRE0);
    UDR0 = (uint8_t)ch;
}
static void feat_init(void) {
    UCSR0B = _BV(TXEN0);
    UCSR0C = _BV(UCSZ01) | _BV(UCSZ00);
}
static int feat_exit(int code) {
    loop_until_bit_is_set(UCSR0A, UDRE0);
    GPIOR0 = (uint8_t)code;
    cli();
    set_sleep_mode(SLEEP_MODE_PWR_DOWN);
    sleep_enable();
    for (;;) sleep_cpu();
    return code;
}
#elif defined(FEAT_SEMIHOST)
/* One semihosting request (BKPT 0xAB): SYS_WRITE0 prints a string, SYS_EXIT_EXTENDED ends QEMU with a code. */
static uintptr_t sh_call(uintptr_t op, const void *arg) {
    register uintptr_t r0 __asm("r0") = op;
    register const void *r1 __asm("r1") = arg;
    __asm volatile("bkpt 0xab" : "+r"(r0) : "r"(r1) : "memory");
    return r0;
}
static char line[129];
static uint32_t line_n;
static void feat_putc(char ch) {
    line[line_n++] = ch;
    if (ch == '\n' || line_n == sizeof line - 1u) {
        line[line_n] = 0;
        sh_call(0x04u, line);
        line_n = 0;
    }
}
static void feat_init(void) {}
static int feat_exit(int code) {
    uintptr_t blk[2] = {0x20026u, (uintptr_t)(intptr_t)code};   /* ADP_Stopped_ApplicationExit */
    for (;;) sh_call(0x20u, blk);
    return code;
}
/* The QEMU startup (platforms/qemu-arm/startup/startup.c) ends with port_exit(main()). */
void port_exit(int code);
void port_exit(int code) { feat_exit(code); }
#else
#include <stdio.h>
#include <stdlib.h>
static void feat_init(void) {}
static int feat_exit(int code) { return code; }
static void feat_putc(char ch) { putchar(ch); }
#endif

static void put_str(const char *s) {
    while (*s) feat_putc(*s++);
}
static void put_hex(uint32_t v) {
    for (int i = 7; i >= 0; i--) feat_putc("0123456789abcdef"[(v >> (4 * i)) & 15u]);
}
static void put_case(uint32_t k) {
    char b[8];
    int n = 0;
    do { b[n++] = (char)('0' + k % 10u); k /= 10u; } while (k);
    while (n) feat_putc(b[--n]);
}
static void put_floats(uint32_t k, const char *tag, const float *v, uint32_t n) {
    put_case(k);
    feat_putc(' ');
    put_str(tag);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        feat_putc(' ');
        put_hex(u);
    }
    feat_putc('\n');
}

#if defined(FEAT_AVR) || defined(FEAT_SEMIHOST)
static float tables[FEAT_MAX_TABLES], scratch[FEAT_MAX_SCRATCH], out[FEAT_MAX_OUT];
#define GET(buf, n) (buf)
#define PUT(buf)
#else
#define GET(buf, n) ((float *)malloc(sizeof(float) * ((n) ? (n) : 1u)))
#define PUT(buf) free(buf)
#endif

int main(void) {
    feat_init();
    for (uint32_t k = 0; k < FEAT_N_CASES; k++) {
        const mct_feat_cfg *c = &feat_cfgs[k];
        mct_feat_sizes s;
        if (!mct_feat_size(c, &s)) {
            put_str("invalid config\n");
            return feat_exit(2);
        }
        float *tab = GET(tables, s.tables), *sc = GET(scratch, s.scratch), *o = GET(out, s.n_out);
        if (!mct_feat_tables(c, tab)) return feat_exit(3);
        uint32_t h = 2166136261u;
        for (uint32_t i = 0; i < s.tables; i++) {
            uint32_t u;
            memcpy(&u, &tab[i], 4);
            h = (h ^ u) * 16777619u;
        }
        mct_feat_run(c, tab, feat_xs[k], o, sc);
        put_floats(k, "f32", o, s.n_out);
        mct_feat_run_i16(c, tab, feat_xis[k], o, sc);
        put_floats(k, "i16", o, s.n_out);
        put_case(k);
        put_str(" tables ");
        put_hex(h);
        feat_putc('\n');
        PUT(tab);
        PUT(sc);
        PUT(o);
    }
    put_str("done\n");
    return feat_exit(0);
}
