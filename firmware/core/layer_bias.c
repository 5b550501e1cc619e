/* layer_bias.c - Bias1d: y = x + b, b [n] (not a connection weight). */
#include "mct_layers.h"

void mct_bias_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    (void)aux;
    uint32_t n = L->n_out;
    for (uint32_t s = 0; s < nb; s++)
        for (uint32_t j = 0; j < n; j++) y[(size_t)s * n + j] = x[(size_t)s * n + j] + p[j];
}

void mct_bias_backward(const mct_layer *L, float *p, const mct_bwd *b) {
    uint32_t n = L->n_out;
    if (b->gx)
        for (uint32_t j = 0; j < n * b->nb; j++) b->gx[j] = b->gy[j];
    if (b->sink) mct_bias_grads(L, p, 0, b->gy, b->nb, n, b->sink);
}

int mct_bias_check(const mct_layer *L) { return L->n_in == L->n_out; }

void mct_bias_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)nb; (void)host;
    s->params = L->n_out;
}
