/* layer_pool2d.c - MaxPool2d and AvgPool2d, channels last, c_out = c_in, no parameters (mct.h, "Spatial ops").
 * Max: y = the largest tap inside the input; its gradient goes to the first tap that holds it.
 * Avg: y = (sum of the taps inside the input) / their count (padding is not counted, as in TFLite);
 * dx of each of those taps += gy / count. A global pool is a window the size of the input. */
#include "mct_layers.h"

/* Walks the windows (MCT_FOR_WINDOWS) with xs, the first value of sample s, yo, the output position's first channel,
 * (iy0, ix0), the first tap inside the input, and nh x nw taps inside it. */
#define POOL_LOOP(BODY)                                                                                       \
    MCT_FOR_WINDOWS(L, nb, {                                                                                  \
        size_t xs = (size_t)s * L->n_in, yo = (size_t)s * L->n_out + ((size_t)oy * L->w_out + ox) * C;         \
        uint32_t iy0 = oy * L->sh + ky0 - L->pt, ix0 = ox * L->sw + kx0 - L->pl;                                \
        uint32_t nh = ky1 - ky0, nw = kx1 - kx0;                                                               \
        BODY                                                                                                   \
    })
/* Offset of channel 0 of tap (r, q) of the window (r, q counted from the first tap inside the input). */
#define TAP(r, q) (xs + ((size_t)(iy0 + (r)) * L->w_in + ix0 + (q)) * C)

void mct_maxpool2d_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    (void)p; (void)aux;
    const uint32_t C = L->c_in;
    POOL_LOOP({
        const float *x0 = x + TAP(0, 0);
        for (uint32_t c = 0; c < C; c++) y[yo + c] = x0[c];
        for (uint32_t r = 0; r < nh; r++)
            for (uint32_t q = 0; q < nw; q++) {
                const float *xt = x + TAP(r, q);
                for (uint32_t c = 0; c < C; c++) y[yo + c] = xt[c] > y[yo + c] ? xt[c] : y[yo + c];
            }
    })
}

void mct_maxpool2d_backward(const mct_layer *L, float *p, const mct_bwd *b) {
    (void)p;
    if (!b->gx) return;
    const uint32_t C = L->c_in, nb = b->nb;
    const float *x = b->x;
    for (size_t j = 0; j < (size_t)L->n_in * nb; j++) b->gx[j] = 0.0f;
    POOL_LOOP({
        for (uint32_t c = 0; c < C; c++) {
            size_t best = TAP(0, 0) + c;
            for (uint32_t r = 0; r < nh; r++)
                for (uint32_t q = 0; q < nw; q++) {
                    size_t at = TAP(r, q) + c;
                    if (x[at] > x[best]) best = at;
                }
            b->gx[best] = b->gx[best] + b->gy[yo + c];
        }
    })
}

void mct_avgpool2d_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    (void)p; (void)aux;
    const uint32_t C = L->c_in;
    POOL_LOOP({
        for (uint32_t c = 0; c < C; c++) y[yo + c] = 0.0f;
        for (uint32_t r = 0; r < nh; r++)
            for (uint32_t q = 0; q < nw; q++) {
                const float *xt = x + TAP(r, q);
                for (uint32_t c = 0; c < C; c++) y[yo + c] = y[yo + c] + xt[c];
            }
        const float cnt = (float)(nh * nw);
        for (uint32_t c = 0; c < C; c++) y[yo + c] = mct_div(y[yo + c], cnt);
    })
}

void mct_avgpool2d_backward(const mct_layer *L, float *p, const mct_bwd *b) {
    (void)p;
    if (!b->gx) return;
    const uint32_t C = L->c_in, nb = b->nb;
    for (size_t j = 0; j < (size_t)L->n_in * nb; j++) b->gx[j] = 0.0f;
    POOL_LOOP({
        const float cnt = (float)(nh * nw);
        for (uint32_t r = 0; r < nh; r++)
            for (uint32_t q = 0; q < nw; q++) {
                float *gt = b->gx + TAP(r, q);
                for (uint32_t c = 0; c < C; c++) gt[c] = gt[c] + mct_div(b->gy[yo + c], cnt);
            }
    })
}

int mct_maxpool2d_check(const mct_layer *L) { return L->kind == 0 && L->c_in == L->c_out && mct_spatial_check(L); }

void mct_maxpool2d_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) { (void)L; (void)nb; (void)host; (void)s; }

int mct_avgpool2d_check(const mct_layer *L) { return L->kind == 0 && L->c_in == L->c_out && mct_spatial_check(L); }

void mct_avgpool2d_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) { (void)L; (void)nb; (void)host; (void)s; }
