/* layer_dense.c - Dense (y = x W) and Linear (y = x W + b, kind = 1).
 * Parameters: W [n_in][n_out] row-major (connection weights), then b [n_out] for Linear. */
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
