/* layer_quant.c - the full-integer int8 ops: QUANT (f32 -> int8), DEQUANT (int8 -> f32), QDENSE (int8
 * dense with integer requantization) and QLUT (int8 elementwise table), for frozen layers on targets
 * without an FPU. Their constants and byte layouts are described at enum mct_op (mct.h).
 *
 * QDENSE and QLUT use integers only; QUANT and DEQUANT use one float multiply per element. Nothing here
 * can overflow a signed type or shift a negative number, whatever the blob holds: the sum of int8 products
 * is bounded by 65535 * 255 * 128 < 2^31, the biased accumulator saturates to 31 bits before the int64
 * product with the 31-bit multiplier, shifts are clamped to [1, 62] and rounding works on magnitudes.
 * Rounding is to nearest, ties away from zero, everywhere. */
#include "mct_layers.h"

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

/* round(a * mult / 2^shift), ties away from zero, for |a| < 2^31 and |mult| <= 2^31. */
static int64_t requantize(int32_t a, int32_t mult, int32_t shift) {
    int32_t n = shift < 1 ? 1 : (shift > 62 ? 62 : shift);
    int64_t p = (int64_t)a * (int64_t)mult;     /* |p| <= 2^62 */
    int64_t half = (int64_t)1 << (n - 1);
    return p >= 0 ? (p + half) >> n : -((-p + half) >> n);
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
            int32_t acc = 0;
            for (uint32_t i = 0; i < I; i++) {
                /* |x - zx| <= 255 and |w| <= 128: the product fits a 16-bit int (AVR) */
                int16_t d = (int16_t)((int16_t)xs[i] - (int16_t)zx);
                acc += (int32_t)(d * (int16_t)mct_cload_i8(wo + i));
            }
            int64_t a = (int64_t)mct_cload_i32(bias + 4u * o) + acc;
            if (a > INT32_MAX) a = INT32_MAX;
            else if (a < -INT32_MAX) a = -INT32_MAX;
            int64_t r = requantize((int32_t)a, mct_cload_i32(mult + 4u * o), mct_cload_i32(shift + 4u * o)) + zy;
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
