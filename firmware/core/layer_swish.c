/* layer_swish.c - Swish with a learned beta per element: y = x sigmoid(beta x).
 * dx = g s (1 + beta x (1 - s)), dbeta = g x^2 s (1 - s), with s = sigmoid(beta x).
 * Parameters: beta [n] (an activation parameter: no L1/L2). */
#include "mct_layers.h"

void mct_swish_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    (void)aux;
    uint32_t n = L->n_out;
    for (uint32_t s = 0; s < nb; s++)
        for (uint32_t j = 0; j < n; j++) {
            float v = x[(size_t)s * n + j];
            y[(size_t)s * n + j] = v * mct_sigmoidf(p[j] * v);
        }
}

void mct_swish_backward(const mct_layer *L, float *p, const mct_bwd *b) {
    uint32_t n = L->n_out, nb = b->nb;
    if (b->gx)
        for (uint32_t s = 0; s < nb; s++)
            for (uint32_t j = 0; j < n; j++) {
                size_t i = (size_t)s * n + j;
                float v = b->x[i], sg = mct_sigmoidf(p[j] * v);
                b->gx[i] = b->gy[i] * (sg * (1.0f + p[j] * v * (1.0f - sg)));
            }
    if (!b->sink) return;
    for (uint32_t j = 0; j < n; j++) {
        float g = 0.0f;
        for (uint32_t s = 0; s < nb; s++) {
            size_t i = (size_t)s * n + j;
            float v = b->x[i], sg = mct_sigmoidf(p[j] * v);
            g = g + b->gy[i] * (v * v * sg * (1.0f - sg));
        }
        mct_sink_put(b->sink, L, p, j, g);
    }
}

int mct_swish_check(const mct_layer *L) { return L->n_in == L->n_out; }

void mct_swish_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)nb; (void)host;
    s->params = L->n_out;
}
