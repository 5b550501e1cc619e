/* layer_quant.c - the full-integer int8 ops: QUANT (f32 -> int8), DEQUANT (int8 -> f32), QDENSE (int8
 * dense with integer requantization) and QLUT (int8 elementwise table), for frozen layers on targets
 * without an FPU. Their constants and byte layouts are described at enum mct_op (mct.h).
 *
 * QDENSE and QLUT use integers only; QUANT and DEQUANT use one float multiply per element. Nothing here
 * can overflow a signed type or shift a negative number, whatever the blob holds: a sum of int8 products is
 * bounded by 65535 * 128 * 128 < 2^30, the biased accumulator saturates to 31 bits before the 64-bit
 * product of magnitudes with the 31-bit multiplier, shifts are clamped to [1, 62] and rounding works on
 * magnitudes.
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

/* sum of x[i] * w[i] (w in const memory) over n <= 65535 values: |x[i] w[i]| <= 2^14, so |sum| < 2^30, exact in
 * int32 on every target; a function of its own so that its few accumulators get registers on AVR. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static int32_t dot8(const int8_t *x, const uint8_t *w, uint32_t n) {
    int32_t acc = 0;
    for (; n; n--) acc += mul8(*x++, mct_cload_i8(w++));
    return acc;
}

#if defined(__ARM_FEATURE_SIMD32) && defined(__ARM_ARCH_ISA_THUMB)
#define MCT_QDENSE_ROWS 2u
/* v rotated right by 8 bits: bytes 1 and 3 where SXTB16 reads (it folds into SXTB16's rotation) */
static MCT_INLINE uint32_t ror8(uint32_t v) { return (v >> 8) | (v << 24); }
/* Cortex-M4/M7/M33: dot8 of x with two weight rows w0 and w1 at once (the loads and sign extensions of x shared),
 * four bytes per load, two 16 x 16 products per SMLAD. The integer sums are exact (bound at dot8), so they
 * equal the plain loop's and every other target's. */
static void dot8x2(const int8_t *x, const uint8_t *w0, const uint8_t *w1, uint32_t n, int32_t *a) {
    int32_t a0 = 0, a1 = 0;
    for (; n >= 4u; n -= 4u, x += 4, w0 += 4, w1 += 4) {
        uint32_t xv, v0, v1;
        memcpy(&xv, x, 4);
        memcpy(&v0, w0, 4);
        memcpy(&v1, w1, 4);
        int16x2_t x02 = __sxtb16(xv), x13 = __sxtb16(ror8(xv));
        a0 = __smlad(x02, __sxtb16(v0), a0);
        a0 = __smlad(x13, __sxtb16(ror8(v0)), a0);
        a1 = __smlad(x02, __sxtb16(v1), a1);
        a1 = __smlad(x13, __sxtb16(ror8(v1)), a1);
    }
    for (; n; n--, x++) {
        a0 += *x * mct_cload_i8(w0++);
        a1 += *x * mct_cload_i8(w1++);
    }
    a[0] = a0;
    a[1] = a1;
}
#else
#define MCT_QDENSE_ROWS 1u
#endif

/* round(a * mult / 2^shift), ties away from zero, for |a| < 2^31 and |mult| <= 2^31, saturated to +-2^30 (the
 * caller adds a zero point and clamps to int8, so that changes nothing). In 32-bit pieces: the 64-bit product
 * of the magnitudes from four 16 x 16 -> 32 products, then the rounding and the shift on its two halves (on
 * AVR a 64-bit multiply or shift is a slow library call); exact, so every target gets the same integer. */
static int32_t requantize(int32_t a, int32_t mult, int32_t shift) {
    uint32_t n = shift < 1 ? 1u : (shift > 62 ? 62u : (uint32_t)shift);
    uint32_t ma = a < 0 ? 0u - (uint32_t)a : (uint32_t)a, mm = mult < 0 ? 0u - (uint32_t)mult : (uint32_t)mult;
    uint32_t r;
#if defined(__AVR__)
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
    uint32_t over;
    if (n < 32u) {
        r = (lo >> n) | (hi << (32u - n));
        over = hi >> n;
    } else {
        r = hi >> (n - 32u);
        over = 0;
    }
    if (over || r > 0x40000000u) r = 0x40000000u;
#else
    /* the same integer from one 32 x 32 -> 64 multiply (ma * mm + 2^(n - 1) <= 2^62 + 2^61 < 2^64) */
    uint64_t p = ((uint64_t)ma * mm + ((uint64_t)1 << (n - 1u))) >> n;
    r = p > 0x40000000u ? 0x40000000u : (uint32_t)p;
#endif
    return ((a < 0) != (mult < 0)) ? -(int32_t)r : (int32_t)r;
}

/* One output of QDENSE from its integer dot product xw: bias added (saturated to +-(2^31 - 1)), requantized,
 * zero point added, saturated to int8. */
static int8_t qdense_out(const uint8_t *bias, const uint8_t *mult, const uint8_t *shift, int32_t zy, int32_t xw) {
    int32_t bo = mct_cload_i32(bias), a;
    if (xw >= 0) a = bo > INT32_MAX - xw ? INT32_MAX : (bo + xw < -INT32_MAX ? -INT32_MAX : bo + xw);
    else a = bo < -INT32_MAX - xw ? -INT32_MAX : bo + xw;
    return sat8(requantize(a, mct_cload_i32(mult), mct_cload_i32(shift)) + zy);
}

void mct_qdense_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    uint32_t I = L->n_in, O = L->n_out;
    size_t sx = 4u * (size_t)mct_i8_floats(I), sy = 4u * (size_t)mct_i8_floats(O);
    int32_t zy = zero_point(c + 4);   /* (zx at c is folded into the bias by the exporter: not read) */
    const uint8_t *bias = c + 8, *mult = bias + 4u * O, *shift = mult + 4u * O, *w = shift + 4u * O;
    for (uint32_t s = 0; s < nb; s++) {
        const int8_t *xs = (const int8_t *)x + (size_t)s * sx;
        int8_t *ys = (int8_t *)y + (size_t)s * sy;
        uint32_t o = 0;
#if MCT_QDENSE_ROWS > 1
        for (; o + MCT_QDENSE_ROWS <= O; o += MCT_QDENSE_ROWS) {
            int32_t xw[MCT_QDENSE_ROWS];
            dot8x2(xs, w + (size_t)o * I, w + (size_t)(o + 1u) * I, I, xw);
            for (uint32_t k = 0; k < MCT_QDENSE_ROWS; k++)
                ys[o + k] = qdense_out(bias + 4u * (o + k), mult + 4u * (o + k), shift + 4u * (o + k), zy, xw[k]);
        }
#endif
        for (; o < O; o++)
            ys[o] = qdense_out(bias + 4u * o, mult + 4u * o, shift + 4u * o, zy, dot8(xs, w + (size_t)o * I, I));
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
