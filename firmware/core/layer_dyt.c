/* layer_dyt.c - DyT (dynamic tanh): y = g tanh(a x) + b with a scalar a and g, b per element.
 * dx = gy g a (1 - t^2), da = sum gy g x (1 - t^2), dg = gy t, db = gy, with t = tanh(a x).
 * Parameters: a, g [n], b [n] (none is a connection weight). */
#include "mct_layers.h"

void mct_dyt_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    (void)aux;
    uint32_t n = L->n_out;
    const float *g = p + 1, *bb = p + 1 + n;
    for (uint32_t s = 0; s < nb; s++)
        for (uint32_t j = 0; j < n; j++) {
            size_t i = (size_t)s * n + j;
            y[i] = g[j] * mct_tanhf(p[0] * x[i]) + bb[j];
        }
}

void mct_dyt_backward(const mct_layer *L, float *p, const mct_bwd *b) {
    uint32_t n = L->n_out, nb = b->nb;
    const float *g = p + 1;
    float da = 0.0f;
    for (uint32_t s = 0; s < nb; s++)
        for (uint32_t j = 0; j < n; j++) {
            size_t i = (size_t)s * n + j;
            float t = mct_tanhf(p[0] * b->x[i]);
            float d = b->gy[i] * g[j] * (1.0f - t * t);
            da = da + d * b->x[i];
            if (b->gx) b->gx[i] = d * p[0];
        }
    if (!b->sink) return;
    /* an APPLY-mode sink changes a parameter when it gets its gradient: a, read by dg below, goes last */
    for (uint32_t j = 0; j < n; j++) {
        float dg = b->gy[j] * mct_tanhf(p[0] * b->x[j]);
        for (uint32_t s = 1; s < nb; s++) {
            size_t i = (size_t)s * n + j;
            dg = dg + b->gy[i] * mct_tanhf(p[0] * b->x[i]);
        }
        mct_sink_put(b->sink, L, p, 1 + j, dg);
    }
    mct_bias_grads(L, p, 1 + n, b->gy, nb, n, b->sink);
    mct_sink_put(b->sink, L, p, 0, da);
}

int mct_dyt_check(const mct_layer *L) { return L->n_in == L->n_out; }

void mct_dyt_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)nb; (void)host;
    s->params = 1 + 2 * (uint32_t)L->n_out;
}
