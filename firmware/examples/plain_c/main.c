/* main.c - mcutrain's plain C example: a device that learns by itself from its own sensor stream, with no host.
 *
 * The "sensor" is synthetic (a seeded xorshift generator, the same numbers on every target) and the label
 * comes from a rule (class 1 when the first reading exceeds the second): replace both with your own. The
 * model is whatever `mcutrain export --library` wrote (it needs two inputs or more). The example trains
 * STEPS steps, saves what it learned, and reports the mean loss of the first and the last WINDOW steps and
 * the accuracy on fresh readings through port_write (mct_port.h). It exits with 0 when the loss fell.
 *
 * Build: every .c file of the library's src/ folder (and the port from src/ports/ if mcutrain ships one for
 * the board) plus this file, with -DMCT_PORT_xxx for the port and -ffp-contract=off; on this computer:
 *   cc -std=c99 -O2 -ffp-contract=off -DMCT_PORT_POSIX -Isrc src/[a-z]*.c src/ports/port_posix.c main.c
 * On another board, write mct_port.h's functions for it (port_write and the three port_store_* are used
 * here; the others may be empty). */
#include <string.h>

#include "mct_port.h"
#include "mcutrain.h"

#if MCT_N_IN < 2
#error "this example's labelling rule needs a model with two inputs or more"
#endif

#ifndef STEPS
#define STEPS 3000u
#endif
#ifndef WINDOW
#define WINDOW 200u
#endif

#ifdef MCT_PORT_POSIX
int mct_posix_argc;      /* the POSIX port reads its options from here */
char **mct_posix_argv;
#endif

/* The synthetic sensor: a reading in [-1, 1). */
static float read_sensor(uint32_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 17;
    *s ^= *s << 5;
    return (float)(*s >> 8) * (1.0f / 8388608.0f) - 1.0f;
}

/* The label of a sample as the model's target: one-hot over the outputs (or 0/1 for a single output). */
static uint8_t label(const float *x, float *target) {
    uint8_t c = x[0] > x[1] ? 1u : 0u;
    for (uint16_t j = 0; j < MCT_N_OUT; j++) target[j] = 0.0f;
    target[MCT_N_OUT > 1 ? c : 0] = MCT_N_OUT > 1 ? 1.0f : (float)c;
    return c;
}

static void put_text(const char *s) { port_write((const uint8_t *)s, (uint16_t)strlen(s)); }

/* A non-negative number with 6 decimals (no printf: not every board has one). */
static void put_fixed6(float v) {
    char b[24];
    uint8_t n = 0;
    uint32_t whole = (uint32_t)v, frac = (uint32_t)((v - (float)whole) * 1000000.0f + 0.5f);
    if (frac >= 1000000u) { whole++; frac -= 1000000u; }
    for (uint8_t k = 0; k < 6; k++) { b[n++] = (char)('0' + frac % 10u); frac /= 10u; }
    b[n++] = '.';
    do { b[n++] = (char)('0' + whole % 10u); whole /= 10u; } while (whole && n < sizeof b);
    while (n) port_write((const uint8_t *)&b[--n], 1);
}

static void put_uint(uint32_t v) {
    char b[10];
    uint8_t n = 0;
    do { b[n++] = (char)('0' + v % 10u); v /= 10u; } while (v);
    while (n) port_write((const uint8_t *)&b[--n], 1);
}

int main(void) {
    float x[MCT_N_IN], target[MCT_N_OUT], y[MCT_N_OUT], loss = 0.0f, first = 0.0f, last = 0.0f;
    uint32_t s = 0x2545F491u, right = 0;
    port_init();
    int loaded = mct_model_init();                      /* 1: carries on from the last save */
    for (uint32_t k = 0; k < STEPS; k++) {
        for (uint16_t i = 0; i < MCT_N_IN; i++) x[i] = read_sensor(&s);
        label(x, target);
        if (mct_model_train(x, target, &loss) != MCT_ST_OK) { put_text("a training step was refused\n"); return 2; }
        if (k < WINDOW) first += loss;
        if (k >= STEPS - WINDOW) last += loss;
    }
    first /= (float)WINDOW;
    last /= (float)WINDOW;
    for (uint32_t k = 0; k < 200u; k++) {               /* accuracy on fresh readings */
        for (uint16_t i = 0; i < MCT_N_IN; i++) x[i] = read_sensor(&s);
        uint8_t c = label(x, target), p = 0;
        mct_model_predict(x, y);
        if (MCT_N_OUT > 1) { for (uint16_t j = 1; j < MCT_N_OUT; j++) if (y[j] > y[p]) p = (uint8_t)j; }
        else p = y[0] > 0.5f ? 1u : 0u;
        right += p == c;
    }
    int saved = mct_model_save();
    put_text("mcutrain example: loaded ");
    put_uint((uint32_t)loaded);
    put_text(" steps ");
    put_uint(mct_model_steps());
    put_text(" loss first ");
    put_fixed6(first);
    put_text(" last ");
    put_fixed6(last);
    put_text(" accuracy ");
    put_uint(right);
    put_text("/200 save ");
    put_uint((uint32_t)saved);
    put_text("\n");
#if MCT_N_CLASSES > 0
    {   /* a model trained on text labels knows its classes by name */
        static const char *const names[MCT_N_CLASSES] = MCT_CLASS_NAMES;
        uint16_t p = 0;
        for (uint16_t j = 1; j < MCT_N_OUT; j++) if (y[j] > y[p]) p = j;
        put_text("the last reading is ");
        put_text(names[p]);
        put_text("\n");
    }
#endif
    port_flush();
    return last < first ? 0 : 1;
}
