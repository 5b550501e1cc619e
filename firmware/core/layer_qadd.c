/* layer_qadd.c - QRES_END, the end of an int8 residual block: the int8 sum of the body's output and the block's
 * skip tensor (its input, or the main body's output with a projection), each with its own scale and zero point,
 * requantized as TensorFlow Lite's int8 ADD (left shift 20, a multiplier per input and one for the output; layout
 * and formula at MCT_OP_QRES_END in mct.h). Integers only; forward only (dL/dx is 0, as every full-integer op's).
 * Nothing overflows whatever the blob holds: |x - zx| <= 255, so (x - zx) 2^20 < 2^28; requantized terms are
 * within +-2^30 and their sum is taken in int64 and saturated to 31 bits. */
#include "mct_layers.h"

/* words of the blob: zx, zs, zy, mult_x, shift_x, mult_s, shift_s, mult_y, shift_y, lo, hi */
#define QRES_WORDS 11u

int mct_qres_end_check(const mct_layer *L) { return L->n_in == L->n_out && L->kind == 0; }

void mct_qres_end_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)L; (void)nb; (void)host;
    s->consts = 4u * QRES_WORDS;
}

/* A zero point or clamp bound from the blob, clamped to the int8 range. */
static int32_t i8_word(const uint8_t *c) {
    int32_t z = mct_cload_i32(c);
    return z < -128 ? -128 : (z > 127 ? 127 : z);
}

/* round(a * mult / 2^shift) exactly as mct_requantize (ties away from zero, saturated to +-2^30, shift clamped to
 * [1, 62]), inline in uint64 for mcutrain's shift words (|a| <= 2^31 - 1, so the product and the rounding term stay
 * below 2^63); a word with the MCT_QSHIFT_TFLITE flag goes to mct_requantize. */
static MCT_INLINE int32_t qadd_requant(int32_t a, int32_t mult, int32_t shift) {
    if (shift > 0 && (shift & MCT_QSHIFT_TFLITE)) return mct_requantize(a, mult, shift);
    uint32_t n = shift < 1 ? 1u : (shift > 62 ? 62u : (uint32_t)shift);
    uint32_t ma = a < 0 ? 0u - (uint32_t)a : (uint32_t)a, mm = mult < 0 ? 0u - (uint32_t)mult : (uint32_t)mult;
    uint64_t p = ((uint64_t)ma * mm + ((uint64_t)1 << (n - 1u))) >> n;
    int32_t r = p > 0x40000000u ? 0x40000000 : (int32_t)p;
    return (a < 0) != (mult < 0) ? -r : r;
}

void mct_qres_end_forward(const mct_net *net, const mct_layer *L, const float *x, float *y, float *arena,
                          uint32_t nb) {
    const uint8_t *c = net->cdata + L->p_off;
    const int8_t *skip = (const int8_t *)(arena + (size_t)mct_layer_off(net, L->k, 0) * nb);
    int32_t zx = i8_word(c), zs = i8_word(c + 4), zy = i8_word(c + 8);
    int32_t mx = mct_cload_i32(c + 12), nx = mct_cload_i32(c + 16), ms = mct_cload_i32(c + 20);
    int32_t ns = mct_cload_i32(c + 24), my = mct_cload_i32(c + 28), ny = mct_cload_i32(c + 32);
    int32_t lo = i8_word(c + 36), hi = i8_word(c + 40);
    size_t stride = 4u * (size_t)mct_i8_floats(L->n_out);   /* x, skip and y: n_out int8 values per sample */
    for (uint32_t s = 0; s < nb; s++) {
        const int8_t *xs = (const int8_t *)x + s * stride, *ss = skip + s * stride;
        int8_t *ys = (int8_t *)y + s * stride;
        for (uint32_t j = 0; j < L->n_out; j++) {
            int64_t a = (int64_t)qadd_requant((xs[j] - zx) * ((int32_t)1 << 20), mx, nx) +
                        qadd_requant((ss[j] - zs) * ((int32_t)1 << 20), ms, ns);
            a = a > INT32_MAX ? INT32_MAX : (a < -INT32_MAX ? -INT32_MAX : a);
            int32_t v = zy + qadd_requant((int32_t)a, my, ny);
            ys[j] = (int8_t)(v < lo ? lo : (v > hi ? hi : v));
        }
    }
}

void mct_qres_end_backward(const mct_net *net, const mct_layer *L, float *arena, const mct_bwd *b) {
    (void)net; (void)arena;
    mct_qop_backward(L, b);
}
