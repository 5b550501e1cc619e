/* layer_residual.c - residual blocks. Each op knows a partner by index (k).
 *
 * Identity shortcut, y = x + M(x): RES_BEGIN (k = its RES_END; its output is its input) ... body M ... RES_END
 * (k = its RES_BEGIN) adds the input of layer k, the block's input. In the backward pass RES_END keeps dL/dy in its
 * aux trace, and RES_BEGIN adds it to the gradient that came through the body.
 *
 * Projection shortcut, y = M(x) + S(x): RES_BEGIN (k = its RES_END) ... body M ... RES_SHORTCUT (k = its RES_BEGIN;
 * its output aliases the block's input, so S reads x again) ... shortcut body S ... RES_END (k = its RES_SHORTCUT)
 * adds the input of layer k, M(x). Backward: RES_END keeps dL/dy in its aux and sends it into S; RES_SHORTCUT keeps
 * what S gives for dL/dx in its own aux and sends RES_END's dL/dy into M; RES_BEGIN adds the kept dL/dx of S to
 * what M gives. No parameters: the layers of M and S have their own.
 *
 * An int8 block (full-integer, forward only) ends in QRES_END (layer_qadd.c) instead; its RES_BEGIN and
 * RES_SHORTCUT have kind 1, carry int8 tensors, keep no gradient (no aux) and give dL/dx = 0. */
#include "mct_layers.h"

int mct_res_begin_check(const mct_layer *L) { return L->n_in == L->n_out && L->kind <= 1; }

/* dL/dx = 0 of an int8 block's RES_BEGIN or RES_SHORTCUT (kind 1); 0 for the other blocks. */
static int int8_block_backward(const mct_layer *L, const mct_bwd *b) {
    if (L->kind != 1) return 0;
    mct_qop_backward(L, b);
    return 1;
}

void mct_res_begin_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)L; (void)nb; (void)host; (void)s;
}

void mct_res_begin_forward(const mct_net *net, const mct_layer *L, const float *x, float *y, float *arena,
                           uint32_t nb) {
    (void)net; (void)L; (void)x; (void)y; (void)arena; (void)nb;
}

void mct_res_begin_backward(const mct_net *net, const mct_layer *L, float *arena, const mct_bwd *b) {
    mct_layer Ec, Sc;
    if (int8_block_backward(L, b)) return;
    uint16_t s = mct_get_layer(net, L->k, &Ec)->k;   /* what its RES_END adds: this layer's input, or M(x) */
    /* identity: the gradient around the body is its RES_END's dL/dy; projection: what its RES_SHORTCUT kept */
    uint16_t holder = mct_get_layer(net, s, &Sc)->op == MCT_OP_RES_SHORTCUT ? s : L->k;
    const float *skip = arena + (size_t)mct_layer_off(net, holder, 1) * b->nb;
    size_t n = (size_t)L->n_out * b->nb;
    if (b->gx)
        for (size_t j = 0; j < n; j++) b->gx[j] = b->gy[j] + skip[j];
}

int mct_res_shortcut_check(const mct_layer *L) { return L->n_in > 0 && L->n_out > 0 && L->kind <= 1; }

void mct_res_shortcut_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)nb; (void)host;
    /* dL/dx through the shortcut body, for RES_BEGIN (its output is its RES_BEGIN's); none in an int8 block */
    s->aux = L->kind == 1 ? 0 : L->n_out;
}

void mct_res_shortcut_forward(const mct_net *net, const mct_layer *L, const float *x, float *y, float *arena,
                              uint32_t nb) {
    (void)net; (void)L; (void)x; (void)y; (void)arena; (void)nb;
}

void mct_res_shortcut_backward(const mct_net *net, const mct_layer *L, float *arena, const mct_bwd *b) {
    mct_layer Bc;
    if (int8_block_backward(L, b)) return;
    const mct_layer *B = mct_get_layer(net, L->k, &Bc);
    const float *gy_block = arena + (size_t)mct_layer_off(net, B->k, 1) * b->nb;   /* its RES_END's dL/dy */
    size_t n_x = (size_t)L->n_out * b->nb, n_m = (size_t)L->n_in * b->nb;
    for (size_t j = 0; j < n_x; j++) b->aux[j] = b->gy[j];
    if (b->gx)
        for (size_t j = 0; j < n_m; j++) b->gx[j] = gy_block[j];
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
