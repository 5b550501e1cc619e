/* layer_batchnorm.c - BatchNorm over the channels of a channels-last tensor [..][C] (C = c_in, P = n_in / C
 * positions per sample): y = g (x - mean) r + b with r = 1 / sqrt(var + eps), eps = alpha (mct.h, "Spatial ops").
 * Parameters: g [C], b [C], then the running mean and variance [C] each (not connection weights).
 * kind 0: mean and var are the running ones; the backward pass gives every parameter its true gradient
 *   (dg = sum gy xh, db = sum gy, dmean = -sum gy g r, dvar = -1/2 sum gy g (x - mean) r^3, dx = gy g r).
 * kind 1 (host training): mean and var are the batch's over all nb P values of a channel (biased variance), kept
 *   in aux; the running statistics do not enter y (gradient 0); with M = nb P,
 *   dx = g r / M (M gy - sum gy - xh sum gy xh), and a trained layer's backward pass moves the running statistics:
 *   run = (1 - beta) run + beta batch, with the variance made unbiased (times M / (M - 1)). */
#include "mct_layers.h"

/* 1 / sqrt(v + eps). */
static float inv_std(float v, float eps) { return mct_div(1.0f, mct_sqrtf(v + eps)); }

void mct_batchnorm_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    const uint32_t C = L->c_in, P = L->n_in / C;
    const size_t M = (size_t)nb * P;
    const float *g = p, *bb = p + C, *mean = p + 2 * C, *var = p + 3 * C;
    if (L->kind == 1) {
        /* batch statistics into aux: mean [C], var [C] */
        float *bm = aux, *bv = aux + C;
        for (uint32_t c = 0; c < C; c++) bm[c] = bv[c] = 0.0f;
        for (size_t j = 0; j < M; j++)
            for (uint32_t c = 0; c < C; c++) bm[c] = bm[c] + x[j * C + c];
        for (uint32_t c = 0; c < C; c++) bm[c] = mct_div(bm[c], (float)M);
        for (size_t j = 0; j < M; j++)
            for (uint32_t c = 0; c < C; c++) {
                float d = x[j * C + c] - bm[c];
                bv[c] = bv[c] + d * d;
            }
        for (uint32_t c = 0; c < C; c++) bv[c] = mct_div(bv[c], (float)M);
        /* kind 1 keeps r per channel in aux too, so that these loops run along the contiguous channels */
        float *br = aux + 2 * C;
        for (uint32_t c = 0; c < C; c++) br[c] = inv_std(bv[c], L->alpha);
        for (size_t j = 0; j < M; j++)
            for (uint32_t c = 0; c < C; c++) y[j * C + c] = g[c] * ((x[j * C + c] - bm[c]) * br[c]) + bb[c];
        return;
    }
    for (uint32_t c = 0; c < C; c++) {
        const float r = inv_std(var[c], L->alpha);
        for (size_t j = 0; j < M; j++) y[j * C + c] = g[c] * ((x[j * C + c] - mean[c]) * r) + bb[c];
    }
}

void mct_batchnorm_backward(const mct_layer *L, float *p, const mct_bwd *b) {
    const uint32_t C = L->c_in, P = L->n_in / C;
    const size_t M = (size_t)b->nb * P;
    const float *x = b->x, *gy = b->gy;
    float *g = p, *mean = p + 2 * C, *var = p + 3 * C;
    const float *um = L->kind == 1 ? b->aux : mean, *uv = L->kind == 1 ? b->aux + C : var;
    float *sg = b->tmp, *sb = b->tmp + C, *smean = b->tmp + 2 * C, *svar = b->tmp + 3 * C;
    for (uint32_t j = 0; j < 4 * C; j++) b->tmp[j] = 0.0f;
    if (L->kind == 1) { /* along the contiguous channels, with r from aux (the same sums in the same order) */
        const float *br = b->aux + 2 * C;
        for (size_t j = 0; j < M; j++)
            for (uint32_t c = 0; c < C; c++) {
                const float gv = gy[j * C + c];
                sb[c] = sb[c] + gv;
                sg[c] = sg[c] + gv * ((x[j * C + c] - um[c]) * br[c]);
            }
        if (b->gx) {
            float *k = b->tmp + 4 * C;
            for (uint32_t c = 0; c < C; c++) k[c] = mct_div(g[c] * br[c], (float)M);
            for (size_t j = 0; j < M; j++)
                for (uint32_t c = 0; c < C; c++) {
                    const float xh = (x[j * C + c] - um[c]) * br[c];
                    b->gx[j * C + c] = k[c] * ((float)M * gy[j * C + c] - sb[c] - xh * sg[c]);
                }
        }
    } else { /* kind 0: the running statistics; every parameter gets its gradient */
        for (uint32_t c = 0; c < C; c++) {
            const float r = inv_std(uv[c], L->alpha);
            for (size_t j = 0; j < M; j++) {
                const float d = x[j * C + c] - um[c], gv = gy[j * C + c];
                sb[c] = sb[c] + gv;
                sg[c] = sg[c] + gv * (d * r);
                svar[c] = svar[c] + gv * d;
            }
            smean[c] = -(sb[c] * g[c] * r);
            svar[c] = -0.5f * (svar[c] * g[c] * (r * r * r));
            if (b->gx)
                for (size_t j = 0; j < M; j++) b->gx[j * C + c] = gy[j * C + c] * (g[c] * r);
        }
    }
    if (!b->sink) return;
    if (L->kind == 1) {
        const float mom = L->beta, keep = 1.0f - L->beta;
        const float unbias = M > 1 ? mct_div((float)M, (float)(M - 1)) : 1.0f;
        for (uint32_t c = 0; c < C; c++) {
            mean[c] = keep * mean[c] + mom * um[c];
            var[c] = keep * var[c] + mom * (uv[c] * unbias);
        }
    }
    for (uint32_t j = 0; j < 4 * C; j++) mct_sink_put(b->sink, L, p, j, b->tmp[j]);
}

int mct_batchnorm_check(const mct_layer *L) {
    return L->kind <= 1 && L->c_in && L->n_in == L->n_out && L->n_in % L->c_in == 0 && L->alpha > 0.0f &&
           L->beta >= 0.0f && L->beta <= 1.0f;
}

void mct_batchnorm_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)nb; (void)host;
    s->params = 4u * L->c_in;
    s->scratch = 5u * L->c_in;
    /* kind 1 keeps the batch mean, variance and 1 / sqrt(var + eps): 3 C floats of aux per sample (only the first
     * sample's are used) */
    s->aux = L->kind == 1 ? 3u * L->c_in : 0u;
}
