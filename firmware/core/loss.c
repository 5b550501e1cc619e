/* loss.c - losses of one sample and their gradients w.r.t. the network output y.
 *   MSE        mean (y - t)^2                              grad 2 (y - t) / n
 *   Huber(b)   mean of d^2/2 if |d| < b else b (|d| - b/2)  grad d / n or b sign(d) / n
 *   BCE        -mean t log y + (1 - t) log(1 - y), y in (0, 1) (clamped to [1e-7, 1 - 1e-7])
 *   XENT       -sum t log y on softmax outputs (y clamped at 1e-30); a network that ends in Softmax trains
 *              through the fused mct_softmax_xent instead (mct_net_loss, train.c)
 *   COSINE     1 - cos(y, t) (0 gradient when a norm is 0) */
#include "mct_layers.h"

float mct_loss(uint8_t kind, float param, const float *y, const float *t, uint16_t n, float *grad) {
    float sum = 0.0f, fn = (float)n;
    switch (MCT_LOSS_KIND(kind)) {
    case MCT_LOSS_HUBER:
        for (uint16_t j = 0; j < n; j++) {
            float d = y[j] - t[j], a = d < 0.0f ? -d : d;
            if (a < param) {
                sum = sum + 0.5f * d * d;
                grad[j] = mct_div(d, fn);
            } else {
                sum = sum + param * (a - 0.5f * param);
                grad[j] = mct_div(d < 0.0f ? -param : param, fn);
            }
        }
        return mct_div(sum, fn);
    case MCT_LOSS_BCE:   /* the terms go through grad first: the logs vectorise, the sum stays in order */
        for (uint16_t j = 0; j < n; j++) {
            float p = y[j] < 1e-7f ? 1e-7f : (y[j] > 0.99999988f ? 0.99999988f : y[j]);
            grad[j] = t[j] * mct_logf(p) + (1.0f - t[j]) * mct_logf(1.0f - p);
        }
        for (uint16_t j = 0; j < n; j++) sum = sum - grad[j];
        for (uint16_t j = 0; j < n; j++) {
            float p = y[j] < 1e-7f ? 1e-7f : (y[j] > 0.99999988f ? 0.99999988f : y[j]);
            grad[j] = mct_div(mct_div(p - t[j], p * (1.0f - p)), fn);
        }
        return mct_div(sum, fn);
    case MCT_LOSS_XENT:
        for (uint16_t j = 0; j < n; j++) grad[j] = t[j] * mct_logf(y[j] < 1e-30f ? 1e-30f : y[j]);
        for (uint16_t j = 0; j < n; j++) sum = sum - grad[j];
        for (uint16_t j = 0; j < n; j++) grad[j] = mct_div(-t[j], y[j] < 1e-30f ? 1e-30f : y[j]);
        return sum;
    case MCT_LOSS_COSINE: {
        float yy = 0.0f, tt = 0.0f, yt = 0.0f;
        for (uint16_t j = 0; j < n; j++) {
            yy = yy + y[j] * y[j];
            tt = tt + t[j] * t[j];
            yt = yt + y[j] * t[j];
        }
        if (yy == 0.0f || tt == 0.0f) {
            for (uint16_t j = 0; j < n; j++) grad[j] = 0.0f;
            return 1.0f;
        }
        float ny = mct_sqrtf(yy), nt = mct_sqrtf(tt), c = mct_div(yt, ny * nt);
        for (uint16_t j = 0; j < n; j++) grad[j] = -(mct_div(t[j], ny * nt) - mct_div(c * y[j], yy));
        return 1.0f - c;
    }
    default: /* MCT_LOSS_MSE */
        for (uint16_t j = 0; j < n; j++) {
            float d = y[j] - t[j];
            sum = sum + d * d;
            grad[j] = mct_div(d + d, fn);
        }
        return mct_div(sum, fn);
    }
}
