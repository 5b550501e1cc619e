/* avr_float_probe.c - the float operations the core's results depend on, over pseudo-random operands,
 * written as raw little-endian 32-bit results: built for the host (stdout) and for the AVR (USART0 under
 * the simavr harness, serial=stdio), the two outputs must be equal byte for byte
 * (tests/test_sim_avr.py::test_avr_float_operations_match_the_host).
 *
 * Operand classes: NORMAL (operands and results well inside the normal range), TINY (results of + - *
 * in or near the subnormal range), ANY (any finite bit pattern; NaN payloads differ between targets).
 * Division results are only compared where they are not subnormal: avr-libc's __divsf3 rounds some
 * subnormal quotients down (see test_avr_float_operations_match_the_host). */
#include <stdint.h>

#include "mct_layers.h"

#ifndef PROBE_N
#define PROBE_N 256
#endif

#ifdef __AVR__
#include <avr/interrupt.h>
#include <avr/io.h>
#include <avr/sleep.h>
static void out_u32(uint32_t v) {
    for (uint8_t i = 0; i < 4; i++) {
        loop_until_bit_is_set(UCSR0A, UDRE0);
        UDR0 = (uint8_t)(v >> (8 * i));
    }
}
static void probe_begin(void) {
    UCSR0A = _BV(U2X0);
    UBRR0 = 0;
    UCSR0C = _BV(UCSZ01) | _BV(UCSZ00);
    UCSR0B = _BV(TXEN0);
}
static void probe_end(void) {
    loop_until_bit_is_set(UCSR0A, UDRE0);
    GPIOR0 = 0;
    cli();
    sleep_enable();
    for (;;) sleep_cpu();
}
#else
#include <stdio.h>
static void out_u32(uint32_t v) {
    for (int i = 0; i < 4; i++) putchar((int)((v >> (8 * i)) & 0xFFu));
}
static void probe_begin(void) {}
static void probe_end(void) {}
#endif

enum { NORMAL, TINY, ANY, N_CLASSES };
enum { ADD, SUB, MUL, DIV, EXP, LOG, TANH, SIGMOID, SQRT, LOG1P, SIN, COS, I2F, U2F, N_OPS };

static uint32_t rng_state = 2463534242u;
static uint32_t rnd(void) {            /* xorshift32 */
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

/* A random float of a class: sign and mantissa random, exponent by class. */
static float operand(uint8_t cls) {
    uint32_t m = rnd() & 0x807fffffu, e;
    if (cls == NORMAL) e = 107u + rnd() % 40u;            /* 2^-20 .. 2^20 */
    else if (cls == TINY) e = rnd() % 24u;                 /* subnormal .. 2^-103 */
    else e = rnd() % 255u;                                 /* no inf or NaN */
    return mct_u2f(m | (e << 23));
}

static float apply(uint8_t op, uint8_t cls, float a, float b, int32_t i) {
    /* the functions' interesting range for NORMAL: -100 .. 100 in steps of 2^-14 or so */
    float r = cls == NORMAL ? (float)(i % 2000000) * 0.00005f : a;
    switch (op) {
    case ADD: return a + b;
    case SUB: return a - b;
    case MUL: return cls == TINY ? a * mct_u2f(0x3f000000u | (mct_f2u(b) & 0x807fffffu)) : a * b;
    case DIV:
        if (cls == TINY) return 1.0f / a;                  /* huge quotients, inf for the smallest */
        a = a / b;                                         /* subnormal quotients: see the header */
        return (mct_f2u(a) & 0x7f800000u) ? a : 0.0f;
    case EXP: return mct_expf(r);
    case LOG: return mct_logf(a < 0.0f ? -a : a);
    case TANH: return mct_tanhf(r);
    case SIGMOID: return mct_sigmoidf(r);
    case SQRT: return mct_sqrtf(a < 0.0f ? -a : a);
    case LOG1P: return mct_log1pf(a < -1.0f ? -a : a);
    case SIN: return mct_sinf(r);
    case COS: return mct_cosf(r);
    case I2F: return (float)i;
    default: return (float)(uint32_t)i;
    }
}

int main(void) {
    probe_begin();
    for (uint8_t cls = 0; cls < N_CLASSES; cls++)
        for (uint8_t op = 0; op < N_OPS; op++)
            for (uint16_t k = 0; k < PROBE_N; k++) {
                float a = operand(cls), b = operand(cls);
                int32_t i = (int32_t)rnd();
                out_u32(mct_f2u(apply(op, cls, a, b, i)));
            }
    probe_end();
    return 0;
}
