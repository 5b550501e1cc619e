/* layer_dense.c - Dense (y = x W) and Linear (y = x W + b, kind = 1).
 * Parameters: W [n_in][n_out] row-major (connection weights), then b [n_out] for Linear.
 * A frozen layer may instead live in the const blob (flash), as f32 or as int8 weights with a
 * scale per output (mct_dense_const_forward); every float sum runs over i ascending from the i = 0 term.
 * With int8 weights the input is quantized once per sample to int8 and the dot products are integer. */
#include "mct_layers.h"

void mct_dense_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    (void)aux;
    uint32_t I = L->n_in, O = L->n_out;
    mct_gemm(x, p, y, nb, I, O);
    if (L->kind) {
        const float *b = p + (size_t)I * O;
        for (uint32_t s = 0; s < nb; s++)
            for (uint32_t o = 0; o < O; o++) y[(size_t)s * O + o] = y[(size_t)s * O + o] + b[o];
    }
}

void mct_dense_backward(const mct_layer *L, float *p, const mct_bwd *b) {
    uint32_t I = L->n_in, O = L->n_out;
    mct_matmul_backward(L, p, 0, b->x, b->gy, b->gx, b->nb, I, O, b->sink, b->tmp, b->host);
    if (L->kind && b->sink) mct_bias_grads(L, p, I * O, b->gy, b->nb, O, b->sink);
}

/* Values of x quantized per chunk on the stack (int8 weights): small enough for any target's stack. */
#if defined(__AVR__)
#define MCT_I8_CHUNK 4u
#else
#define MCT_I8_CHUNK 64u
#endif

/* An int32 kept in a float's 4 bytes (the int8 layer's accumulators live in its output). */
static MCT_INLINE int32_t acc_get(const float *p) { int32_t v; memcpy(&v, p, sizeof v); return v; }
static MCT_INLINE void acc_set(float *p, int32_t v) { memcpy(p, &v, sizeof v); }

/* Integer dot products of an int8-weight layer for one sample: acc[o] += sum over i in [i0, i0 + n) of
 * xq[i - i0] * W[o][i], MCT_DOT8_ROWS outputs per pass over xq (mct_dot8_rows). The sums are exact
 * (|acc| <= 127 * 128 * 65535 < 2^31), so their order does not matter. */
static void i8_dot_chunk(const int8_t *xq, const uint8_t *w, uint32_t i0, uint32_t n, uint32_t I, uint32_t O,
                         float *acc) {
    for (uint32_t o = 0; o < O; o += MCT_DOT8_ROWS) {
        uint32_t r = O - o < MCT_DOT8_ROWS ? O - o : MCT_DOT8_ROWS;
        int32_t d[MCT_DOT8_ROWS];
        mct_dot8_rows(xq, w + (size_t)o * I + i0, n, I, r, d);
        for (uint32_t k = 0; k < r; k++) acc_set(acc + o + k, acc_get(acc + o + k) + d[k]);
    }
}

/* One sample through an int8-weight layer (storage I8, layout at enum mct_storage): x quantized once,
 * symmetric, q = round(x * 127 / max|x|) (ties to even); the int32 dot products accumulate in y's floats (the
 * same 4 bytes, reinterpreted); then one float scale per output. A function of its own, so that the f32 loops
 * beside it keep their registers. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void i8_forward_1(const mct_layer *L, const uint8_t *c, const float *xs, float *ys) {
    uint32_t I = L->n_in, O = L->n_out;
    const uint8_t *bias = c + 4u * O, *w = c + 4u * (O + (L->kind ? O : 0));
    /* max |x| from the magnitudes' bits: non-negative floats order as their bits do, inf and NaN above the rest */
    uint32_t mbits = 0;
    for (uint32_t i = 0; i < I; i++) {
        uint32_t m = mct_f2u(xs[i]) & 0x7FFFFFFFu;
        mbits = m > mbits ? m : mbits;
    }
    float amax = mct_u2f(mbits);
    if (mbits >= 0x7F800000u) {   /* an inf or NaN input: every output is NaN */
        for (uint32_t o = 0; o < O; o++) ys[o] = mct_u2f(0x7fc00000u);
        return;
    }
    for (uint32_t o = 0; o < O; o++) acc_set(ys + o, 0);
    /* an input below 1e-30 in magnitude counts as 0 (127 / m would overflow) */
    float inv = amax > 1e-30f ? mct_div(127.0f, amax) : 0.0f, sx = mct_div(amax, 127.0f);
    for (uint32_t i0 = 0; i0 < I; i0 += MCT_I8_CHUNK) {
        int8_t xq[MCT_I8_CHUNK];
        uint32_t n = I - i0 < MCT_I8_CHUNK ? I - i0 : MCT_I8_CHUNK;
        for (uint32_t i = 0; i < n; i++) {
            int32_t q = mct_rint_to_i32(xs[i0 + i] * inv);   /* its v + 1.5 * 2^23 rounds as mct_rintf(v) does */
            xq[i] = (int8_t)(q > 127 ? 127 : (q < -127 ? -127 : q));
        }
        i8_dot_chunk(xq, w, i0, n, I, O, ys);
    }
    for (uint32_t o = 0; o < O; o++) {
        float v = (float)acc_get(ys + o) * (sx * mct_cload_f32(c + 4u * o));
        ys[o] = L->kind ? v + mct_cload_f32(bias + 4u * o) : v;
    }
}

void mct_dense_const_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    uint32_t I = L->n_in, O = L->n_out;
    const uint8_t *bias = c + 4u * I * O, *w = c;
    for (uint32_t s = 0; s < nb; s++) {
        const float *xs = x + (size_t)s * I;
        float *ys = y + (size_t)s * O;
        if (MCT_WITH_OP(MCT_I8_WEIGHTS_BIT) && L->storage == MCT_STORE_I8) {   /* (mct_net_check: compiled in) */
            i8_forward_1(L, c, xs, ys);
            continue;
        }
#if MCT_VFP_ASM   /* the FPU tiles of gemm.c read the blob's floats with VLDM; then the biases */
        mct_gemm(xs, (const float *)(const void *)w, ys, 1, I, O);
        if (L->kind)
            for (uint32_t o = 0; o < O; o++) ys[o] = ys[o] + mct_cload_f32(bias + 4u * o);
#else
        uint32_t o = 0;
#if !defined(__AVR__)   /* (on AVR the tile saves little: the soft-float products dominate; flash is scarcer) */
        for (; o + 4u <= O; o += 4u) {   /* four outputs at a time, each summed over i ascending */
            const uint8_t *wi = w + 4u * o;
            float x0 = xs[0];
            float a0 = x0 * mct_cload_f32(wi), a1 = x0 * mct_cload_f32(wi + 4), a2 = x0 * mct_cload_f32(wi + 8),
                  a3 = x0 * mct_cload_f32(wi + 12);
            for (uint32_t i = 1; i < I; i++) {
                float xi = xs[i];
                wi += 4u * O;
                a0 = a0 + xi * mct_cload_f32(wi);
                a1 = a1 + xi * mct_cload_f32(wi + 4);
                a2 = a2 + xi * mct_cload_f32(wi + 8);
                a3 = a3 + xi * mct_cload_f32(wi + 12);
            }
            ys[o] = L->kind ? a0 + mct_cload_f32(bias + 4u * o) : a0;
            ys[o + 1] = L->kind ? a1 + mct_cload_f32(bias + 4u * o + 4) : a1;
            ys[o + 2] = L->kind ? a2 + mct_cload_f32(bias + 4u * o + 8) : a2;
            ys[o + 3] = L->kind ? a3 + mct_cload_f32(bias + 4u * o + 12) : a3;
        }
#endif
        for (; o < O; o++) {   /* pointers, not indices: on AVR the loop's state then fits its registers */
            const uint8_t *wi = w + 4u * o;
            const size_t step = 4u * (size_t)O;
            float acc = xs[0] * mct_cload_f32(wi);
            for (const float *xi = xs + 1, *xe = xs + I; xi != xe; xi++) {
                wi += step;
                acc = acc + *xi * mct_cload_f32(wi);
            }
            ys[o] = L->kind ? acc + mct_cload_f32(bias + 4u * o) : acc;
        }
#endif
    }
}

void mct_dense_const_backward(const mct_layer *L, const uint8_t *c, const mct_bwd *b) {
    if (!b->gx) return;
    uint32_t I = L->n_in, O = L->n_out;
    int i8 = L->storage == MCT_STORE_I8;
    const uint8_t *w = i8 ? c + 4u * (O + (L->kind ? O : 0)) : c;
    for (uint32_t s = 0; s < b->nb; s++) {
        const float *gs = b->gy + (size_t)s * O;
        float *gx = b->gx + (size_t)s * I;
        for (uint32_t i = 0; i < I; i++) {
            float acc;
            if (i8) {   /* dL/dx[i] = sum_o gy[o] * scale[o] * W[o][i] */
                acc = gs[0] * (mct_cload_f32(c) * (float)mct_cload_i8(w + i));
                for (uint32_t o = 1; o < O; o++)
                    acc = acc + gs[o] * (mct_cload_f32(c + 4u * o) * (float)mct_cload_i8(w + (size_t)o * I + i));
            } else {
                acc = gs[0] * mct_cload_f32(w + 4u * (size_t)i * O);
                for (uint32_t o = 1; o < O; o++) acc = acc + gs[o] * mct_cload_f32(w + 4u * ((size_t)i * O + o));
            }
            gx[i] = acc;
        }
    }
}

int mct_dense_check(const mct_layer *L) { return L->kind <= 1; }

void mct_dense_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    uint32_t I = L->n_in, O = L->n_out, b = L->kind ? O : 0;
    s->params = I * O + b;
    s->scratch = mct_matmul_scratch(L, nb, host);
    if (L->storage == MCT_STORE_F32) s->consts = 4u * (I * O + b);
    else if (L->storage == MCT_STORE_I8) s->consts = 4u * (O + b) + I * O;
}
