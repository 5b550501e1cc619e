/* loss.c - losses and their gradients w.r.t. the network output y, of one sample (mct_loss) or of a batch
 * (mct_loss_batch, which computes BCE's and cross-entropy's logarithms for the whole batch in one loop).
 *   MSE        mean (y - t)^2                              grad 2 (y - t) / n
 *   Huber(b)   mean of d^2/2 if |d| < b else b (|d| - b/2)  grad d / n or b sign(d) / n
 *   BCE        -mean t log y + (1 - t) log(1 - y), y in (0, 1) (clamped to [1e-7, 1 - 1e-7])
 *   XENT       -sum t log y on softmax outputs (y clamped at 1e-30); a network that ends in Softmax trains
 *              through the fused mct_softmax_xent instead (mct_net_loss, train.c)
 *   COSINE     1 - cos(y, t) (0 gradient when a norm is 0) */
#include "mct_layers.h"

/* The losses computed sample by sample (Huber, cosine, MSE): one sample's loss and gradient. */
static float loss_1(uint8_t kind, float param, const float *y, const float *t, uint16_t n, float *grad) {
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

/* Clamp of BCE's outputs: y in [1e-7, 1 - 1e-7]. */
static MCT_INLINE float bce_p(float y) { return y < 1e-7f ? 1e-7f : (y > 0.99999988f ? 0.99999988f : y); }
/* Clamp of cross-entropy's outputs: y at least 1e-30. */
static MCT_INLINE float xent_p(float y) { return y < 1e-30f ? 1e-30f : y; }

float mct_loss_batch(uint8_t kind, float param, const float *y, const float *t, uint16_t n, uint32_t nb, float *grad,
                     float *losses) {
    size_t all = (size_t)n * nb;
    float total = 0.0f, fn = (float)n;
    uint8_t k = MCT_LOSS_KIND(kind);
    if (k != MCT_LOSS_BCE && k != MCT_LOSS_XENT) {
        for (uint32_t s = 0; s < nb; s++) {
            size_t o = (size_t)s * n;
            float v = loss_1(k, param, y + o, t + o, n, grad + o);
            if (losses) losses[s] = v;
            total = total + v;
        }
        return total;
    }
    /* BCE and cross-entropy: the log terms of the whole batch go through grad first (the logs vectorise), then
     * each sample's sum in order, then the gradients */
    if (k == MCT_LOSS_BCE)
        for (size_t j = 0; j < all; j++) {
            float p = bce_p(y[j]);
            grad[j] = t[j] * mct_logf(p) + (1.0f - t[j]) * mct_logf(1.0f - p);
        }
    else
        for (size_t j = 0; j < all; j++) grad[j] = t[j] * mct_logf(xent_p(y[j]));
    for (uint32_t s = 0; s < nb; s++) {
        float sum = 0.0f;
        for (size_t j = (size_t)s * n; j < (size_t)(s + 1) * n; j++) sum = sum - grad[j];
        float v = k == MCT_LOSS_BCE ? mct_div(sum, fn) : sum;   /* BCE is a mean, cross-entropy a sum */
        if (losses) losses[s] = v;
        total = total + v;
    }
    if (k == MCT_LOSS_BCE)
        for (size_t j = 0; j < all; j++) {
            float p = bce_p(y[j]);
            grad[j] = mct_div(mct_div(p - t[j], p * (1.0f - p)), fn);
        }
    else
        for (size_t j = 0; j < all; j++) grad[j] = mct_div(-t[j], xent_p(y[j]));
    return total;
}

float mct_loss(uint8_t kind, float param, const float *y, const float *t, uint16_t n, float *grad) {
    return mct_loss_batch(kind, param, y, t, n, 1, grad, NULL);
}
