/* layer_dropout.c - Dropout at rate r = alpha with seed k. kind 0 (inference, the device): y = x. kind 1 (host
 * training): y_j = x_j / (1 - r) where a hash of (seed, step counter, sample, j) keeps the value, else 0, each value
 * kept with probability 1 - r; dx_j = dy_j times the same factor. The step counter is the layer's one parameter
 * (a float from 0 to 2^24 - 1, not learned: its gradient is 0): a trained layer's backward pass advances it, so
 * every step draws new masks and a resumed run draws the same ones; no state outside the parameters. */
#include "mct_layers.h"

/* A 32-bit mix of v (an integer hash with good avalanche, portable: uint32 arithmetic only). */
static uint32_t mix32(uint32_t v) {
    v ^= v >> 16;
    v *= 0x7feb352du;
    v ^= v >> 15;
    v *= 0x846ca68bu;
    v ^= v >> 16;
    return v;
}

/* The factor of value j of sample s at this step: 1 / (1 - r) when kept, else 0. */
static float keep_factor(const mct_layer *L, uint32_t step, uint32_t s, uint32_t j, float scale) {
    uint32_t h = mix32(mix32(mix32(((uint32_t)L->k << 16) ^ 0x5bd1e995u) ^ step) ^ s);
    h = mix32(h ^ j);
    /* kept when h / 2^32 >= r, compared in integers: r 2^32 rounded down */
    uint32_t cut = L->alpha >= 1.0f ? 0xffffffffu : (uint32_t)(L->alpha * 4294967296.0f);
    return h >= cut ? scale : 0.0f;
}

void mct_dropout_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    (void)aux;
    const uint32_t n = L->n_out;
    if (L->kind == 0) {
        for (size_t j = 0; j < (size_t)n * nb; j++) y[j] = x[j];
        return;
    }
    const uint32_t step = (uint32_t)p[0];
    const float scale = mct_div(1.0f, 1.0f - L->alpha);
    for (uint32_t s = 0; s < nb; s++)
        for (uint32_t j = 0; j < n; j++)
            y[(size_t)s * n + j] = x[(size_t)s * n + j] * keep_factor(L, step, s, j, scale);
}

void mct_dropout_backward(const mct_layer *L, float *p, const mct_bwd *b) {
    const uint32_t n = L->n_out, nb = b->nb;
    if (b->gx) {
        if (L->kind == 0) {
            for (size_t j = 0; j < (size_t)n * nb; j++) b->gx[j] = b->gy[j];
        } else {
            const uint32_t step = (uint32_t)p[0];
            const float scale = mct_div(1.0f, 1.0f - L->alpha);
            for (uint32_t s = 0; s < nb; s++)
                for (uint32_t j = 0; j < n; j++)
                    b->gx[(size_t)s * n + j] = b->gy[(size_t)s * n + j] * keep_factor(L, step, s, j, scale);
        }
    }
    if (!b->sink) return;
    if (L->kind == 1) p[0] = p[0] >= 16777215.0f ? 0.0f : p[0] + 1.0f;
    mct_sink_put(b->sink, L, p, 0, 0.0f);
}

int mct_dropout_check(const mct_layer *L) {
    return L->kind <= 1 && L->n_in == L->n_out && L->alpha >= 0.0f && L->alpha < 1.0f;
}

void mct_dropout_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)L; (void)nb; (void)host;
    s->params = 1;
}
