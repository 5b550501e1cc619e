/* layer_bias.c - Bias1d: y = x + b, b [n] (not a connection weight). With c_in set (a spatial tensor of h_in positions
 * by c_in channels, the bias of a convolution split off for bias-only training) b has one value per channel:
 * y[j][c] = x[j][c] + b[c], db[c] = sum over samples and positions of gy[j][c], in that order. */
#include "mct_layers.h"

void mct_bias_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    (void)aux;
    uint32_t C = L->c_in ? L->c_in : L->n_out, rows = (L->c_in ? L->h_in : 1u) * nb;
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t c = 0; c < C; c++) y[(size_t)r * C + c] = x[(size_t)r * C + c] + p[c];
}

void mct_bias_backward(const mct_layer *L, float *p, const mct_bwd *b) {
    uint32_t n = L->n_out;
    if (b->gx)
        for (uint32_t j = 0; j < n * b->nb; j++) b->gx[j] = b->gy[j];
    if (!b->sink) return;
    if (L->c_in) mct_bias_grads(L, p, 0, b->gy, (uint32_t)L->h_in * b->nb, L->c_in, b->sink);
    else mct_bias_grads(L, p, 0, b->gy, b->nb, n, b->sink);
}

int mct_bias_check(const mct_layer *L) {
    return L->n_in == L->n_out && (!L->c_in || (uint32_t)L->h_in * L->c_in == L->n_out);
}

void mct_bias_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)nb; (void)host;
    s->params = L->c_in ? L->c_in : L->n_out;
}
