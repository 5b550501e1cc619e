/* layer_rmsnorm.c - RMSNorm with a learned gain: y = g x / r, r = sqrt(mean(x^2) + eps), eps = alpha.
 * dx_k = g_k gy_k / r - x_k sum_j(gy_j g_j x_j) / (n r^3); dg_j = gy_j x_j / r.
 * Parameters: g [n] (not a connection weight). Aux trace: r per sample. */
#include "mct_layers.h"

void mct_rmsnorm_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    uint32_t n = L->n_out;
    for (uint32_t s = 0; s < nb; s++) {
        const float *xs = x + (size_t)s * n;
        float *ys = y + (size_t)s * n;
        float ss = 0.0f;
        for (uint32_t j = 0; j < n; j++) ss = ss + xs[j] * xs[j];
        float r = mct_sqrtf(mct_div(ss, (float)n) + L->alpha);
        aux[s] = r;
        for (uint32_t j = 0; j < n; j++) ys[j] = p[j] * mct_div(xs[j], r);
    }
}

void mct_rmsnorm_backward(const mct_layer *L, float *p, const mct_bwd *b) {
    uint32_t n = L->n_out, nb = b->nb;
    if (b->gx)
        for (uint32_t s = 0; s < nb; s++) {
            const float *xs = b->x + (size_t)s * n, *gs = b->gy + (size_t)s * n;
            float *gx = b->gx + (size_t)s * n;
            float r = b->aux[s];
            float dot = 0.0f;
            for (uint32_t j = 0; j < n; j++) dot = dot + gs[j] * p[j] * xs[j];
            float c = mct_div(dot, (float)n * r * r * r);
            for (uint32_t j = 0; j < n; j++) gx[j] = mct_div(p[j] * gs[j], r) - xs[j] * c;
        }
    if (!b->sink) return;
    for (uint32_t j = 0; j < n; j++) {
        float g = b->gy[j] * mct_div(b->x[j], b->aux[0]);
        for (uint32_t s = 1; s < nb; s++) g = g + b->gy[(size_t)s * n + j] * mct_div(b->x[(size_t)s * n + j], b->aux[s]);
        mct_sink_put(b->sink, L, p, j, g);
    }
}

int mct_rmsnorm_check(const mct_layer *L) { return L->n_in == L->n_out && L->alpha >= 0.0f; }

void mct_rmsnorm_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)nb; (void)host;
    s->params = L->n_out;
    s->aux = 1;
}
