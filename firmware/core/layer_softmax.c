/* layer_softmax.c - Softmax with temperature T (alpha): y = exp((x - max x) / T) / sum.
 * Backward uses the output: dx_i = y_i (g_i - sum_j y_j g_j) / T.
 * Followed by cross-entropy, the loss and its gradient w.r.t. the input x come in one step
 * (mct_softmax_xent): the gradient never passes through the outputs, which underflow once a wrong
 * answer is confident. */
#include "mct_layers.h"

void mct_softmax_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    (void)p; (void)aux;
    uint32_t n = L->n_out;
    float T = L->alpha;
    for (uint32_t s = 0; s < nb; s++) {
        const float *xs = x + (size_t)s * n;
        float *ys = y + (size_t)s * n;
        float m = xs[0];
        for (uint32_t j = 1; j < n; j++) m = xs[j] > m ? xs[j] : m;
        float sum = 0.0f;
        if (T == 1.0f)           /* the exponentials first (a loop that vectorises), then their sum in order */
            for (uint32_t j = 0; j < n; j++) ys[j] = mct_expf(xs[j] - m);
        else
            for (uint32_t j = 0; j < n; j++) ys[j] = mct_expf(mct_div(xs[j] - m, T));
        for (uint32_t j = 0; j < n; j++) sum = sum + ys[j];
        for (uint32_t j = 0; j < n; j++) ys[j] = mct_div(ys[j], sum);
    }
}

void mct_softmax_backward(const mct_layer *L, float *p, const mct_bwd *b) {
    (void)p;
    if (!b->gx) return;
    uint32_t n = L->n_out;
    float T = L->alpha;
    for (uint32_t s = 0; s < b->nb; s++) {
        const float *ys = b->y + (size_t)s * n, *gs = b->gy + (size_t)s * n;
        float *gx = b->gx + (size_t)s * n;
        float dot = 0.0f;
        for (uint32_t j = 0; j < n; j++) dot = dot + ys[j] * gs[j];
        for (uint32_t j = 0; j < n; j++) {
            float g = ys[j] * (gs[j] - dot);
            gx[j] = T == 1.0f ? g : mct_div(g, T);
        }
    }
}

float mct_softmax_xent(const mct_layer *L, const float *x, const float *p, const float *t, float *gx) {
    uint32_t n = L->n_out, top = 0;
    float T = L->alpha, st = 0.0f, loss = 0.0f;
    for (uint32_t j = 1; j < n; j++) top = x[j] > x[top] ? j : top;
    /* log p_j = z_j - log sum_k exp z_k with z = (x - max x) / T; p at the largest input is exp(0) / sum
     * = 1 / sum, so log p_max = -log sum: one log, no second pass of exponentials */
    float lpm = mct_logf(p[top]);
    for (uint32_t j = 0; j < n; j++) {
        st = st + t[j];
        if (t[j] == 0.0f) continue;   /* a zero target adds nothing (even when its z is very negative) */
        float z = T == 1.0f ? x[j] - x[top] : mct_div(x[j] - x[top], T);
        loss = loss - t[j] * (z + lpm);
    }
    for (uint32_t j = 0; j < n; j++) {   /* d/dz of -sum t log softmax(z) is p sum(t) - t; dz/dx = 1 / T */
        float g = p[j] * st - t[j];
        gx[j] = T == 1.0f ? g : mct_div(g, T);
    }
    return loss;
}

int mct_softmax_check(const mct_layer *L) { return L->n_in == L->n_out && L->alpha > 0.0f; }

void mct_softmax_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)L; (void)nb; (void)host; (void)s;
}
