/* layer_conv1d.c - Conv1d: single-channel valid cross-correlation, stride 1, no padding.
 * y_o = sum_f w_f x_(o+f), n_out = n_in - F + 1 (F = k). dx_i = sum_o g_o w_(i-o), dw_f = sum_o x_(o+f) g_o.
 * Parameters: w [F] (connection weights). */
#include "mct_layers.h"

void mct_conv1d_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    (void)aux;
    uint32_t I = L->n_in, O = L->n_out, F = L->k;
    for (uint32_t s = 0; s < nb; s++) {
        const float *xs = x + (size_t)s * I;
        float *ys = y + (size_t)s * O;
        for (uint32_t o = 0; o < O; o++) {
            float acc = p[0] * xs[o];
            for (uint32_t f = 1; f < F; f++) acc = acc + p[f] * xs[o + f];
            ys[o] = acc;
        }
    }
}

void mct_conv1d_backward(const mct_layer *L, float *p, const mct_bwd *b) {
    uint32_t I = L->n_in, O = L->n_out, F = L->k, nb = b->nb;
    if (b->gx)
        for (uint32_t s = 0; s < nb; s++) {
            const float *gs = b->gy + (size_t)s * O;
            float *gx = b->gx + (size_t)s * I;
            for (uint32_t i = 0; i < I; i++) {
                /* o runs over max(0, i-F+1) .. min(i, O-1), ascending */
                uint32_t o0 = i + 1 > F ? i + 1 - F : 0, o1 = i < O - 1 ? i : O - 1;
                float acc = 0.0f;
                for (uint32_t o = o0; o <= o1; o++) acc = acc + gs[o] * p[i - o];
                gx[i] = acc;
            }
        }
    if (!b->sink) return;
    for (uint32_t f = 0; f < F; f++) {
        float acc = 0.0f;
        for (uint32_t s = 0; s < nb; s++) {
            const float *xs = b->x + (size_t)s * I, *gs = b->gy + (size_t)s * O;
            for (uint32_t o = 0; o < O; o++) acc = acc + xs[o + f] * gs[o];
        }
        mct_sink_put(b->sink, L, p, f, acc);
    }
}

int mct_conv1d_check(const mct_layer *L) { return L->k >= 1 && L->n_in >= L->k && L->n_out == L->n_in - L->k + 1; }

void mct_conv1d_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)nb; (void)host;
    s->params = L->k;
}
