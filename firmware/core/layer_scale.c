/* layer_scale.c - ScalarScale: one learned scalar, y = s x. dx = s g, ds = sum_j x_j g_j.
 * Parameters: s (not a connection weight). */
#include "mct_layers.h"

void mct_scale_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    (void)aux;
    uint32_t n = (uint32_t)L->n_out * nb;
    for (uint32_t j = 0; j < n; j++) y[j] = p[0] * x[j];
}

void mct_scale_backward(const mct_layer *L, float *p, const mct_bwd *b) {
    uint32_t n = (uint32_t)L->n_out * b->nb;
    float g = 0.0f;
    for (uint32_t j = 0; j < n; j++) g = g + b->x[j] * b->gy[j];
    if (b->gx)
        for (uint32_t j = 0; j < n; j++) b->gx[j] = p[0] * b->gy[j];
    if (b->sink) mct_sink_put(b->sink, L, p, 0, g);
}

int mct_scale_check(const mct_layer *L) { return L->n_in == L->n_out; }

void mct_scale_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)L; (void)nb; (void)host;
    s->params = 1;
}
