/* layer_diag.c - Diag: a learned scale per element, y = d x. dx = d g, dd = x g.
 * Parameters: d [n] (not a connection weight). */
#include "mct_layers.h"

void mct_diag_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    (void)aux;
    uint32_t n = L->n_out;
    for (uint32_t s = 0; s < nb; s++)
        for (uint32_t j = 0; j < n; j++) y[(size_t)s * n + j] = p[j] * x[(size_t)s * n + j];
}

void mct_diag_backward(const mct_layer *L, float *p, const mct_bwd *b) {
    uint32_t n = L->n_out, nb = b->nb;
    if (b->gx)
        for (uint32_t s = 0; s < nb; s++)
            for (uint32_t j = 0; j < n; j++) b->gx[(size_t)s * n + j] = p[j] * b->gy[(size_t)s * n + j];
    if (!b->sink) return;
    for (uint32_t j = 0; j < n; j++) {
        float g = b->x[j] * b->gy[j];
        for (uint32_t s = 1; s < nb; s++) g = g + b->x[(size_t)s * n + j] * b->gy[(size_t)s * n + j];
        mct_sink_put(b->sink, L, p, j, g);
    }
}

int mct_diag_check(const mct_layer *L) { return L->n_in == L->n_out; }

void mct_diag_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)nb; (void)host;
    s->params = L->n_out;
}
