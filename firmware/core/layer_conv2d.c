/* layer_conv2d.c - Conv2d, channels last: y[oy][ox][o] = sum_{ky,kx,c} x[iy][ix][c] W[ky][kx][c][o] (+ b[o]),
 * iy = oy sh - pt + ky, ix = ox sw - pl + kx, taps outside the input skipped (mct.h, "Spatial ops").
 * dx[iy][ix][c] += gy[oy][ox][o] W[ky][kx][c][o], dW[ky][kx][c][o] = sum x[iy][ix][c] gy[oy][ox][o], db = sum gy.
 * Every sum runs in a fixed order: output positions ascending, then taps, then channels; a 1x1 convolution is a
 * Dense layer per position. Parameters: W [kh][kw][c_in][c_out] (connection weights), then b [c_out] if kind 1.
 * The shared geometry check of every spatial op lives here too. */
#include "mct_layers.h"

int mct_spatial_check(const mct_layer *L) {
    uint32_t hi = L->h_in, wi = L->w_in, ho = L->h_out, wo = L->w_out;
    if (!hi || !wi || !L->c_in || !ho || !wo || !L->c_out || !L->kh || !L->kw || !L->sh || !L->sw) return 0;
    if ((uint64_t)hi * wi * L->c_in != L->n_in || (uint64_t)ho * wo * L->c_out != L->n_out) return 0;
    if (L->pt >= L->kh || L->pl >= L->kw) return 0;
    /* the last window starts inside the input and pads at most kh - 1 rows below (kw - 1 columns right) */
    uint64_t last_r = (uint64_t)(ho - 1) * L->sh, last_c = (uint64_t)(wo - 1) * L->sw;
    if (last_r > (uint64_t)hi - 1 + L->pt || last_c > (uint64_t)wi - 1 + L->pl) return 0;
    if (last_r + L->kh > (uint64_t)hi + L->pt + L->kh - 1 || last_c + L->kw > (uint64_t)wi + L->pl + L->kw - 1) return 0;
    return 1;
}



/* The forward pass with the parameters in RAM (p) or in the const blob (c): f32, or int8 weights q (MCT_STORE_I8;
 * each output's sum of x * (float)W8 in the same order, then times its channel's scale once, then the bias). */
static MCT_INLINE void conv2d_fwd(const mct_layer *L, const float *p, const uint8_t *c, const uint8_t *q,
                                  const float *x, float *y, uint32_t nb) {
    const uint32_t Ci = L->c_in, Co = L->c_out, KW = L->kw, nw = (uint32_t)L->kh * KW * Ci * Co;
    MCT_FOR_WINDOWS(L, nb, {
        const float *xs = x + (size_t)s * L->n_in;
        float *restrict yo = y + (size_t)s * L->n_out + ((size_t)oy * L->w_out + ox) * Co;
        for (uint32_t o = 0; o < Co; o++) yo[o] = 0.0f;
        for (uint32_t ky = ky0; ky < ky1; ky++)
            for (uint32_t kx = kx0; kx < kx1; kx++) {
                const float *xp = xs + mct_tap_at(L, oy, ox, ky, kx);
                const size_t wp = ((size_t)ky * KW + kx) * Ci * Co;
                for (uint32_t ci = 0; ci < Ci; ci++) {
                    const float xv = xp[ci];
                    const size_t wr = wp + (size_t)ci * Co;
                    for (uint32_t o = 0; o < Co; o++) yo[o] = yo[o] + xv * mct_wget8(p, c, q, wr + o);
                }
            }
        if (q)
            for (uint32_t o = 0; o < Co; o++) yo[o] = yo[o] * mct_cload_f32(c + 4u * o);
        if (L->kind)
            for (uint32_t o = 0; o < Co; o++)
                yo[o] = yo[o] + (q ? mct_cload_f32(c + 4u * (Co + o)) : mct_wget(p, c, nw + o));
    })
}

void mct_conv2d_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    (void)aux;
    conv2d_fwd(L, p, NULL, NULL, x, y, nb);
}

void mct_conv2d_const_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    const uint8_t *q = mct_conv_i8(L, c);
    if (MCT_CONV_I8_SPLIT && !q) conv2d_fwd(L, NULL, c, NULL, x, y, nb);
    else conv2d_fwd(L, NULL, c, q, x, y, nb);
}

/* dL/dx into b->gx (parameters in RAM or in the const blob, f32 or int8 weights q; wt: on the host, W transposed per
 * tap to [o][c_in], which gives the same sums in the same order with the inner loop over contiguous values). dx[c]
 * gets, per output position and tap, gy[o] W[c][o] for o ascending (int8 weights: (gy[o] scale[o]) W8[c][o]). */
static MCT_INLINE void conv2d_gx(const mct_layer *L, const float *p, const uint8_t *c, const uint8_t *q,
                                 const float *wt, const mct_bwd *b) {
    const uint32_t Ci = L->c_in, Co = L->c_out, KW = L->kw;
    for (size_t j = 0; j < (size_t)L->n_in * b->nb; j++) b->gx[j] = 0.0f;
    MCT_FOR_WINDOWS(L, b->nb, {
        const float *gyo = b->gy + (size_t)s * L->n_out + ((size_t)oy * L->w_out + ox) * Co;
        for (uint32_t ky = ky0; ky < ky1; ky++)
            for (uint32_t kx = kx0; kx < kx1; kx++) {
                float *restrict gxp = b->gx + (size_t)s * L->n_in + mct_tap_at(L, oy, ox, ky, kx);
                const size_t wp = ((size_t)ky * KW + kx) * Ci * Co;
                if (wt)
                    for (uint32_t o = 0; o < Co; o++) {
                        const float g = gyo[o];
                        const float *restrict wr = wt + wp + (size_t)o * Ci;
                        for (uint32_t ci = 0; ci < Ci; ci++) gxp[ci] = gxp[ci] + g * wr[ci];
                    }
                else
                    for (uint32_t o = 0; o < Co; o++) {
                        const float g = q ? gyo[o] * mct_cload_f32(c + 4u * o) : gyo[o];
                        for (uint32_t ci = 0; ci < Ci; ci++)
                            gxp[ci] = gxp[ci] + g * mct_wget8(p, c, q, wp + (size_t)ci * Co + o);
                    }
            }
    })
}

void mct_conv2d_const_backward(const mct_layer *L, const uint8_t *c, const mct_bwd *b) {
    if (!b->gx) return;
    const uint8_t *q = mct_conv_i8(L, c);
    if (MCT_CONV_I8_SPLIT && !q) conv2d_gx(L, NULL, c, NULL, NULL, b);
    else conv2d_gx(L, NULL, c, q, NULL, b);
}

void mct_conv2d_backward(const mct_layer *L, float *p, const mct_bwd *b) {
    const uint32_t Ci = L->c_in, Co = L->c_out, KW = L->kw, nw = (uint32_t)L->kh * KW * Ci * Co;
    if (b->gx) {
        float *wt = NULL;
        if (MCT_HOST && b->host) { /* the host: W per tap transposed into scratch after the gradient sums */
            wt = b->tmp + nw + Co;
            for (uint32_t t = 0; t < (uint32_t)L->kh * KW; t++)
                mct_transpose(p + (size_t)t * Ci * Co, wt + (size_t)t * Ci * Co, Ci, Co);
        }
        conv2d_gx(L, p, NULL, NULL, wt, b);
    }
    if (!b->sink) return;
    /* parameter gradients summed in tmp (nw + c_out floats), then handed to the sink */
    float *restrict gw = b->tmp, *restrict gb = b->tmp + nw;
    for (uint32_t j = 0; j < nw + Co; j++) gw[j] = 0.0f;
    MCT_FOR_WINDOWS(L, b->nb, {
        const float *xs = b->x + (size_t)s * L->n_in;
        const float *restrict gyo = b->gy + (size_t)s * L->n_out + ((size_t)oy * L->w_out + ox) * Co;
        for (uint32_t ky = ky0; ky < ky1; ky++)
            for (uint32_t kx = kx0; kx < kx1; kx++) {
                const float *xp = xs + mct_tap_at(L, oy, ox, ky, kx);
                float *gwp = gw + ((size_t)ky * KW + kx) * Ci * Co;
                for (uint32_t ci = 0; ci < Ci; ci++) {
                    const float xv = xp[ci];
                    float *restrict gr = gwp + (size_t)ci * Co;
                    for (uint32_t o = 0; o < Co; o++) gr[o] = gr[o] + xv * gyo[o];
                }
            }
        for (uint32_t o = 0; o < Co; o++) gb[o] = gb[o] + gyo[o];
    })
    uint32_t n = L->kind ? nw + Co : nw;
    for (uint32_t j = 0; j < n; j++) mct_sink_put(b->sink, L, p, j, gw[j]);
}

int mct_conv2d_check(const mct_layer *L) { return L->kind <= 1 && mct_spatial_check(L); }

void mct_conv2d_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)nb;
    uint32_t nw = (uint32_t)L->kh * L->kw * L->c_in * L->c_out;
    s->params = L->kind ? nw + L->c_out : nw;
    /* gradient sums, and on the host W transposed for dL/dx; a frozen const layer sums no gradients */
    s->scratch = L->storage == MCT_STORE_RAM ? nw + L->c_out + (host ? nw : 0u) : 0u;
    if (L->storage == MCT_STORE_F32) s->consts = 4u * s->params;
    else if (MCT_WITH_OP(MCT_I8_WEIGHTS_BIT) && L->storage == MCT_STORE_I8)
        s->consts = 4u * (s->params - nw + L->c_out) + nw;   /* scales, b, W8 */
}
