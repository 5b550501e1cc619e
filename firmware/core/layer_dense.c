/* layer_dense.c - Dense (y = x W) and Linear (y = x W + b, kind = 1).
 * Parameters: W [n_in][n_out] row-major (connection weights), then b [n_out] for Linear.
 * A frozen layer may instead live in the const blob (flash), as f32 or as int8 weights with a
 * scale per output (mct_dense_const_forward); every sum runs over i ascending from the i = 0 term. */
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

void mct_dense_const_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    uint32_t I = L->n_in, O = L->n_out;
    int i8 = L->storage == MCT_STORE_I8;
    const uint8_t *bias = i8 ? c + 4u * O : c + 4u * I * O;
    const uint8_t *w = i8 ? c + 4u * (O + (L->kind ? O : 0)) : c;
    for (uint32_t s = 0; s < nb; s++) {
        const float *xs = x + (size_t)s * I;
        float *ys = y + (size_t)s * O;
        for (uint32_t o = 0; o < O; o++) {
            float acc;
            if (i8) {
                acc = xs[0] * (float)mct_cload_i8(w + o);
                for (uint32_t i = 1; i < I; i++) acc = acc + xs[i] * (float)mct_cload_i8(w + (size_t)i * O + o);
                acc = acc * mct_cload_f32(c + 4u * o);
            } else {
                acc = xs[0] * mct_cload_f32(w + 4u * o);
                for (uint32_t i = 1; i < I; i++) acc = acc + xs[i] * mct_cload_f32(w + 4u * ((size_t)i * O + o));
            }
            ys[o] = L->kind ? acc + mct_cload_f32(bias + 4u * o) : acc;
        }
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
            if (i8) {   /* dL/dx[i] = sum_o gy[o] * scale[o] * W[i][o] */
                acc = gs[0] * (mct_cload_f32(c) * (float)mct_cload_i8(w + (size_t)i * O));
                for (uint32_t o = 1; o < O; o++)
                    acc = acc + gs[o] * (mct_cload_f32(c + 4u * o) * (float)mct_cload_i8(w + (size_t)i * O + o));
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
