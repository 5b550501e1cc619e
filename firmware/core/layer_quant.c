/* layer_quant.c - the full-integer int8 ops: QUANT (f32 -> int8), DEQUANT (int8 -> f32), QDENSE (int8
 * dense with integer requantization) and QLUT (int8 elementwise table), for frozen layers on targets
 * without an FPU. Their constants and byte layouts are described at enum mct_op (mct.h).
 *
 * QDENSE and QLUT use integers only; QUANT and DEQUANT use one float multiply per element. Nothing here
 * can overflow a signed type or shift a negative number, whatever the blob holds: the sums of int8 products
 * and of weights are bounded by 65535 * 128 * 128 < 2^30 (their difference by 65535 * 255 * 128 < 2^31),
 * the biased accumulator saturates to 31 bits before the int64
 * product with the 31-bit multiplier, shifts are clamped to [1, 62] and rounding works on magnitudes.
 * Rounding is to nearest, ties away from zero, everywhere. */
#include "mct_layers.h"
#if defined(__ARM_FEATURE_SIMD32) && defined(__ARM_ARCH_ISA_THUMB)
#include <arm_acle.h>
#endif

/* A zero point read from the blob, clamped to the int8 range. */
static int32_t zero_point(const uint8_t *c) {
    int32_t z = mct_cload_i32(c);
    return z < -128 ? -128 : (z > 127 ? 127 : z);
}

/* Saturate to int8. */
static int8_t sat8(int32_t v) { return (int8_t)(v < -128 ? -128 : (v > 127 ? 127 : v)); }

/* round(v) + zp saturated to int8, ties away from zero; NaN and -inf give -128, +inf 127. */
static int8_t quant1(float v, int32_t zp) {
    int32_t q;
    if (!(v > -512.0f)) {
        q = -512;
    } else if (v > 512.0f) {
        q = 512;
    } else {
        q = (int32_t)v;                 /* toward zero; |v| <= 512 so it fits */
        float f = v - (float)q;         /* exact: the fraction of a float below 2^24 is representable */
        if (f >= 0.5f) q++;
        else if (f <= -0.5f) q--;
    }
    return sat8(q + zp);
}

int mct_quantize_check(const mct_layer *L) { return L->n_in == L->n_out; }

void mct_quantize_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)L; (void)nb; (void)host;
    s->consts = 8u;   /* f32 inv_scale, i32 zp */
}

int mct_dequantize_check(const mct_layer *L) { return L->n_in == L->n_out; }

void mct_dequantize_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)L; (void)nb; (void)host;
    s->consts = 8u;   /* f32 scale, i32 zp */
}

int mct_qdense_check(const mct_layer *L) { return L->kind == 0; }

void mct_qdense_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    uint64_t I = L->n_in, O = L->n_out;
    (void)nb; (void)host;
    s->consts = 8u + 12u * O + ((I * O + 3u) & ~(uint64_t)3u);
}

int mct_qlut_check(const mct_layer *L) { return L->n_in == L->n_out; }

void mct_qlut_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)L; (void)nb; (void)host;
    s->consts = 256u;   /* int8 T[256] */
}

void mct_quantize_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    uint32_t n = L->n_in;
    size_t stride = 4u * (size_t)mct_i8_floats(n);
    float inv = mct_cload_f32(c);
    int32_t zp = zero_point(c + 4);
    int8_t *q = (int8_t *)y;
    for (uint32_t s = 0; s < nb; s++) {
        const float *xs = x + (size_t)s * n;
        int8_t *qs = q + (size_t)s * stride;
        for (uint32_t i = 0; i < n; i++) qs[i] = quant1(xs[i] * inv, zp);
    }
}

void mct_dequantize_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    uint32_t n = L->n_in;
    size_t stride = 4u * (size_t)mct_i8_floats(n);
    float scale = mct_cload_f32(c);
    int32_t zp = zero_point(c + 4);
    const int8_t *q = (const int8_t *)x;
    for (uint32_t s = 0; s < nb; s++) {
        const int8_t *qs = q + (size_t)s * stride;
        float *ys = y + (size_t)s * n;
        for (uint32_t i = 0; i < n; i++) ys[i] = (float)((int32_t)qs[i] - zp) * scale;
    }
}

/* a * b of two int8 as a 16-bit product: one 8 x 8 multiply (AVR's muls, which a compiler would widen to a
 * 16 x 16 -> 32 call inside a 32-bit sum). */
static MCT_INLINE int16_t mul8(int8_t a, int8_t b) {
#if defined(__AVR__) && defined(__AVR_HAVE_MUL__)
    int16_t r;
    __asm__("muls %1, %2\n\tmovw %0, r0\n\tclr __zero_reg__" : "=r"(r) : "d"(a), "d"(b) : "r0", "r1");
    return r;
#else
    return (int16_t)(a * b);
#endif
}

/* sum of x[i] * w[i] (w in const memory) over n < 256 values, and the sum of the w[i] into *wsum; a function of
 * its own so that its few accumulators get registers on AVR. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static int32_t dot8(const int8_t *x, const uint8_t *w, uint32_t n, int16_t *wsum) {
    int32_t acc = 0;
    int16_t ws = 0;
#if defined(__ARM_FEATURE_SIMD32) && defined(__ARM_ARCH_ISA_THUMB)
    /* Cortex-M4/M7/M33: four bytes per load, two 16 x 16 products per SMLAD; the integer sums are exact, so
     * they equal the plain loop's below (and every other target's) */
    int32_t ws32 = 0;
    for (; n >= 4u; n -= 4u, x += 4, w += 4) {
        uint32_t xv, wv;
        memcpy(&xv, x, 4);
        memcpy(&wv, w, 4);
        int16x2_t w02 = __sxtb16(wv), w13 = __sxtb16(wv >> 8);
        acc = __smlad(__sxtb16(xv), w02, acc);
        acc = __smlad(__sxtb16(xv >> 8), w13, acc);
        ws32 = __smlad(w02, 0x00010001, ws32);
        ws32 = __smlad(w13, 0x00010001, ws32);
    }
    ws = (int16_t)ws32;
#endif
    for (; n; n--) {
        int8_t wv = mct_cload_i8(w++);
        acc += mul8(*x++, wv);
        ws = (int16_t)(ws + wv);
    }
    *wsum = ws;
    return acc;
}

/* round(a * mult / 2^shift), ties away from zero, for |a| < 2^31 and |mult| <= 2^31, saturated to +-2^30 (the
 * caller adds a zero point and clamps to int8, so that changes nothing). In 32-bit pieces: the 64-bit product
 * of the magnitudes from four 16 x 16 -> 32 products, then the rounding and the shift on its two halves (on
 * AVR a 64-bit multiply or shift is a slow library call); exact, so every target gets the same integer. */
static int32_t requantize(int32_t a, int32_t mult, int32_t shift) {
    uint32_t n = shift < 1 ? 1u : (shift > 62 ? 62u : (uint32_t)shift);
    uint32_t ma = a < 0 ? 0u - (uint32_t)a : (uint32_t)a, mm = mult < 0 ? 0u - (uint32_t)mult : (uint32_t)mult;
    uint16_t a0 = (uint16_t)ma, a1 = (uint16_t)(ma >> 16), b0 = (uint16_t)mm, b1 = (uint16_t)(mm >> 16);
    uint32_t lo = (uint32_t)a0 * b0, m1 = (uint32_t)a0 * b1, m2 = (uint32_t)a1 * b0, hi = (uint32_t)a1 * b1;
    uint32_t t = lo + (m1 << 16);
    hi += (m1 >> 16) + (m2 >> 16) + (t < lo);
    lo = t + (m2 << 16);
    hi += lo < t;                                    /* hi:lo = ma * mm <= 2^62 */
    if (n <= 32u) {                                  /* + 2^(n - 1): no carry out of hi (the sum is < 2^63) */
        t = lo + ((uint32_t)1 << (n - 1u));
        hi += t < lo;
        lo = t;
    } else {
        hi += (uint32_t)1 << (n - 33u);
    }
    uint32_t r, over;
    if (n < 32u) {
        r = (lo >> n) | (hi << (32u - n));
        over = hi >> n;
    } else {
        r = hi >> (n - 32u);
        over = 0;
    }
    if (over || r > 0x40000000u) r = 0x40000000u;
    return ((a < 0) != (mult < 0)) ? -(int32_t)r : (int32_t)r;
}

void mct_qdense_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    uint32_t I = L->n_in, O = L->n_out;
    size_t sx = 4u * (size_t)mct_i8_floats(I), sy = 4u * (size_t)mct_i8_floats(O);
    int32_t zx = zero_point(c), zy = zero_point(c + 4);
    const uint8_t *bias = c + 8, *mult = bias + 4u * O, *shift = mult + 4u * O, *w = shift + 4u * O;
    for (uint32_t s = 0; s < nb; s++) {
        const int8_t *xs = (const int8_t *)x + (size_t)s * sx;
        int8_t *ys = (int8_t *)y + (size_t)s * sy;
        for (uint32_t o = 0; o < O; o++) {
            const uint8_t *wo = w + (size_t)o * I;
            /* sum (x - zx) w = sum x w - zx sum w: each product of two int8 is an 8 x 8 multiply whose
             * result fits 16 bits (AVR's muls), summed in 32 bits; both sums are exact (|.| < 2^30) */
            int32_t xw = 0, ws = 0;
            for (uint32_t i0 = 0; i0 < I; i0 += 255u) {   /* at most 255 weights at a time: their sum fits 16 bits */
                uint32_t n = I - i0 < 255u ? I - i0 : 255u;
                int16_t ws16;
                xw += dot8(xs + i0, wo + i0, n, &ws16);
                ws += ws16;
            }
            int32_t acc = xw - zx * ws;
            int32_t bo = mct_cload_i32(bias + 4u * o), a;   /* bias + acc saturated to +-(2^31 - 1) */
            if (acc >= 0) a = bo > INT32_MAX - acc ? INT32_MAX : (bo + acc < -INT32_MAX ? -INT32_MAX : bo + acc);
            else a = bo < -INT32_MAX - acc ? -INT32_MAX : bo + acc;
            int32_t r = requantize(a, mct_cload_i32(mult + 4u * o), mct_cload_i32(shift + 4u * o)) + zy;
            ys[o] = (int8_t)(r < -128 ? -128 : (r > 127 ? 127 : r));
        }
    }
}

void mct_qlut_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    uint32_t n = L->n_in;
    size_t stride = 4u * (size_t)mct_i8_floats(n);
    for (uint32_t s = 0; s < nb; s++) {
        const int8_t *xs = (const int8_t *)x + (size_t)s * stride;
        int8_t *ys = (int8_t *)y + (size_t)s * stride;
        for (uint32_t i = 0; i < n; i++) ys[i] = mct_cload_i8(c + (uint8_t)(xs[i] + 128));
    }
}

void mct_qop_backward(const mct_layer *L, const mct_bwd *b) {
    if (!b->gx) return;
    for (size_t j = 0; j < (size_t)L->n_in * b->nb; j++) b->gx[j] = 0.0f;
}
