/* layer_residual.c - residual blocks y = x + M(x): RES_BEGIN (its output is its input) ... body ... RES_END
 * (adds the block's input). Each knows its partner by index (k). In the backward pass RES_END keeps dL/dy in
 * its aux trace, and RES_BEGIN adds it to the gradient that came through the body. No parameters. */
#include "mct_layers.h"

int mct_res_begin_check(const mct_layer *L) { return L->n_in == L->n_out; }

void mct_res_begin_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)L; (void)nb; (void)host; (void)s;
}

void mct_res_begin_forward(const mct_net *net, const mct_layer *L, const float *x, float *y, float *arena,
                           uint32_t nb) {
    (void)net; (void)L; (void)x; (void)y; (void)arena; (void)nb;
}

void mct_res_begin_backward(const mct_net *net, const mct_layer *L, float *arena, const mct_bwd *b) {
    const float *skip = arena + (size_t)mct_layer_off(net, L->k, 1) * b->nb;
    size_t n = (size_t)L->n_out * b->nb;
    if (b->gx)
        for (size_t j = 0; j < n; j++) b->gx[j] = b->gy[j] + skip[j];
}

int mct_res_end_check(const mct_layer *L) { return L->n_in == L->n_out; }

void mct_res_end_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)nb; (void)host;
    s->aux = L->n_out;
}

void mct_res_end_forward(const mct_net *net, const mct_layer *L, const float *x, float *y, float *arena,
                         uint32_t nb) {
    const float *skip = arena + (size_t)mct_layer_off(net, L->k, 0) * nb;
    for (size_t j = 0; j < (size_t)L->n_out * nb; j++) y[j] = x[j] + skip[j];
}

void mct_res_end_backward(const mct_net *net, const mct_layer *L, float *arena, const mct_bwd *b) {
    size_t n = (size_t)L->n_out * b->nb;
    (void)net; (void)arena;
    for (size_t j = 0; j < n; j++) b->aux[j] = b->gy[j];
    if (b->gx)
        for (size_t j = 0; j < n; j++) b->gx[j] = b->gy[j];
}
