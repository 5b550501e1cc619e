/* layer_dwconv2d.c - depthwise Conv2d, channels last, c_out = c_in m (m = depth multiplier): output channel o reads
 * input channel o / m only. y[oy][ox][o] = sum_{ky,kx} x[iy][ix][o / m] W[ky][kx][o] (+ b[o]) (mct.h, "Spatial ops").
 * dx[iy][ix][o / m] += gy[oy][ox][o] W[ky][kx][o], dW[ky][kx][o] = sum x[iy][ix][o / m] gy[oy][ox][o], db = sum gy.
 * Parameters: W [kh][kw][c_out] (connection weights, TFLite's depthwise layout), then b [c_out] if kind 1. */
#include "mct_layers.h"



/* The forward pass with the parameters in RAM (p) or in the const blob (c): f32, or int8 weights q (MCT_STORE_I8;
 * each output's sum of x * (float)W8, then times its channel's scale once, then the bias). */
static MCT_INLINE void dwconv2d_fwd(const mct_layer *L, const float *p, const uint8_t *c, const uint8_t *q,
                                    const float *x, float *y, uint32_t nb) {
    const uint32_t Co = L->c_out, KW = L->kw, m = Co / L->c_in, nw = (uint32_t)L->kh * KW * Co;
    MCT_FOR_WINDOWS(L, nb, {
        const float *xs = x + (size_t)s * L->n_in;
        float *restrict yo = y + (size_t)s * L->n_out + ((size_t)oy * L->w_out + ox) * Co;
        for (uint32_t o = 0; o < Co; o++) yo[o] = 0.0f;
        for (uint32_t ky = ky0; ky < ky1; ky++)
            for (uint32_t kx = kx0; kx < kx1; kx++) {
                const float *restrict xp = xs + mct_tap_at(L, oy, ox, ky, kx);
                const size_t wp = ((size_t)ky * KW + kx) * Co;
                if (m == 1)
                    for (uint32_t o = 0; o < Co; o++) yo[o] = yo[o] + xp[o] * mct_wget8(p, c, q, wp + o);
                else
                    for (uint32_t o = 0; o < Co; o++) yo[o] = yo[o] + xp[o / m] * mct_wget8(p, c, q, wp + o);
            }
        if (q)
            for (uint32_t o = 0; o < Co; o++) yo[o] = yo[o] * mct_cload_f32(c + 4u * o);
        if (L->kind)
            for (uint32_t o = 0; o < Co; o++)
                yo[o] = yo[o] + (q ? mct_cload_f32(c + 4u * (Co + o)) : mct_wget(p, c, nw + o));
    })
}

void mct_dwconv2d_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    (void)aux;
    dwconv2d_fwd(L, p, NULL, NULL, x, y, nb);
}

void mct_dwconv2d_const_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    const uint8_t *q = mct_conv_i8(L, c);
    if (MCT_CONV_I8_SPLIT && !q) dwconv2d_fwd(L, NULL, c, NULL, x, y, nb);
    else dwconv2d_fwd(L, NULL, c, q, x, y, nb);
}

/* The backward pass: dL/dx (if asked; int8 weights q: gy[o] scale[o] W8[o]), and with the parameters in RAM (c NULL)
 * their gradients to the sink. */
static MCT_INLINE void dwconv2d_bwd(const mct_layer *L, float *p, const uint8_t *c, const uint8_t *q,
                                    const mct_bwd *b) {
    const uint32_t Co = L->c_out, KW = L->kw, m = Co / L->c_in, nw = (uint32_t)L->kh * KW * Co;
    const int grads = !c && b->sink;
    float *restrict gw = grads ? b->tmp : NULL, *restrict gb = grads ? b->tmp + nw : NULL;
    if (b->gx)
        for (size_t j = 0; j < (size_t)L->n_in * b->nb; j++) b->gx[j] = 0.0f;
    if (gw)
        for (uint32_t j = 0; j < nw + Co; j++) gw[j] = 0.0f;
    MCT_FOR_WINDOWS(L, b->nb, {
        const float *xs = b->x + (size_t)s * L->n_in;
        const float *restrict gyo = b->gy + (size_t)s * L->n_out + ((size_t)oy * L->w_out + ox) * Co;
        for (uint32_t ky = ky0; ky < ky1; ky++)
            for (uint32_t kx = kx0; kx < kx1; kx++) {
                const size_t at = mct_tap_at(L, oy, ox, ky, kx), wp = ((size_t)ky * KW + kx) * Co;
                if (b->gx) {
                    float *restrict gxp = b->gx + (size_t)s * L->n_in + at;
                    if (q)
                        for (uint32_t o = 0; o < Co; o++)
                            gxp[o / m] = gxp[o / m] + (gyo[o] * mct_cload_f32(c + 4u * o)) * mct_wget8(p, c, q, wp + o);
                    else if (m == 1)
                        for (uint32_t o = 0; o < Co; o++) gxp[o] = gxp[o] + gyo[o] * mct_wget(p, c, wp + o);
                    else
                        for (uint32_t o = 0; o < Co; o++) gxp[o / m] = gxp[o / m] + gyo[o] * mct_wget(p, c, wp + o);
                }
                if (gw) {
                    const float *restrict xp = xs + at;
                    float *restrict gwp = gw + wp;
                    if (m == 1)
                        for (uint32_t o = 0; o < Co; o++) gwp[o] = gwp[o] + xp[o] * gyo[o];
                    else
                        for (uint32_t o = 0; o < Co; o++) gwp[o] = gwp[o] + xp[o / m] * gyo[o];
                }
            }
        if (gb)
            for (uint32_t o = 0; o < Co; o++) gb[o] = gb[o] + gyo[o];
    })
    if (!gw) return;
    uint32_t n = L->kind ? nw + Co : nw;
    for (uint32_t j = 0; j < n; j++) mct_sink_put(b->sink, L, p, j, gw[j]);
}

void mct_dwconv2d_backward(const mct_layer *L, float *p, const mct_bwd *b) { dwconv2d_bwd(L, p, NULL, NULL, b); }

void mct_dwconv2d_const_backward(const mct_layer *L, const uint8_t *c, const mct_bwd *b) {
    const uint8_t *q = mct_conv_i8(L, c);
    if (MCT_CONV_I8_SPLIT && !q) dwconv2d_bwd(L, NULL, c, NULL, b);
    else dwconv2d_bwd(L, NULL, c, q, b);
}

int mct_dwconv2d_check(const mct_layer *L) {
    return L->kind <= 1 && L->c_in && L->c_out % L->c_in == 0 && mct_spatial_check(L);
}

void mct_dwconv2d_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)nb; (void)host;
    uint32_t nw = (uint32_t)L->kh * L->kw * L->c_out;
    s->params = L->kind ? nw + L->c_out : nw;
    s->scratch = L->storage == MCT_STORE_RAM ? nw + L->c_out : 0;   /* a frozen const layer sums no gradients */
    if (L->storage == MCT_STORE_F32) s->consts = 4u * s->params;
    else if (MCT_WITH_OP(MCT_I8_WEIGHTS_BIT) && L->storage == MCT_STORE_I8)
        s->consts = 4u * (s->params - nw + L->c_out) + nw;   /* scales, b, W8 */
}
