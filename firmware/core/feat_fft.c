/* feat_fft.c - the real FFT of the feature pipelines: n real values are taken as n/2 complex ones
 * z_j = x_2j + i x_2j+1, transformed by an in-place radix-2 decimation-in-time FFT of m = n/2 points, then split:
 * with Z the FFT of z, E_k = (Z_k + conj Z_m-k) / 2, O_k = -i (Z_k - conj Z_m-k) / 2, W = e^(-2 pi i / n):
 * X_k = E_k + W^k O_k and X_m-k = conj(E_k - W^k O_k). Every sum in a fixed order, no contraction: the same
 * bits on every target. Twiddles cs: cos(2 pi k / n) for k < n/2, then sin(2 pi k / n) for k < n/2. */
#include "mct_feat.h"

#include <stddef.h>

/* Swap the complex values of z into bit-reversed order (m complex values, m a power of two). */
static void bit_reverse(float *z, uint32_t m) {
    uint32_t j = 0;
    for (uint32_t i = 0; i + 1 < m; i++) {
        if (i < j) {
            float tr = z[2 * i], ti = z[2 * i + 1];
            z[2 * i] = z[2 * j];
            z[2 * i + 1] = z[2 * j + 1];
            z[2 * j] = tr;
            z[2 * j + 1] = ti;
        }
        uint32_t bit = m >> 1;
        while (j & bit) {
            j ^= bit;
            bit >>= 1;
        }
        j |= bit;
    }
}

/* Forward complex FFT of m points in place (z interleaved re, im); twiddles of the n = 2m table. */
static void cfft(float *z, uint32_t m, const float *cs) {
    const float *cosv = cs, *sinv = cs + m;   /* table of n = 2m: cos and sin of 2 pi k / n, k < m */
    bit_reverse(z, m);
    /* stage of span 2: twiddle 1 */
    for (uint32_t i = 0; i < m; i += 2) {
        float *a = z + 2 * i, *b = a + 2;
        float ur = a[0], ui = a[1], vr = b[0], vi = b[1];
        a[0] = ur + vr;
        a[1] = ui + vi;
        b[0] = ur - vr;
        b[1] = ui - vi;
    }
    /* stage of span 4: twiddles 1 and -i */
    if (m >= 4) {
        for (uint32_t i = 0; i < m; i += 4) {
            float *a = z + 2 * i;
            float ur = a[0], ui = a[1], vr = a[4], vi = a[5];
            a[0] = ur + vr;
            a[1] = ui + vi;
            a[4] = ur - vr;
            a[5] = ui - vi;
            ur = a[2];
            ui = a[3];
            vr = a[7];     /* (vr + i vi) * (-i) = vi - i vr */
            vi = -a[6];
            a[2] = ur + vr;
            a[3] = ui + vi;
            a[6] = ur - vr;
            a[7] = ui - vi;
        }
    }
    for (uint32_t len = 8; len <= m; len <<= 1) {
        uint32_t half = len >> 1, step = (2u * m) / len;   /* W_len^j = W_n^(j n / len) */
        for (uint32_t j = 0; j < half; j++) {
            float c = cosv[j * step], s = sinv[j * step];   /* W = c - i s */
            for (uint32_t i = j; i < m; i += len) {
                float *a = z + 2 * i, *b = z + 2 * (i + half);
                float vr = b[0] * c + b[1] * s;
                float vi = b[1] * c - b[0] * s;
                float ur = a[0], ui = a[1];
                a[0] = ur + vr;
                a[1] = ui + vi;
                b[0] = ur - vr;
                b[1] = ui - vi;
            }
        }
    }
}

void mct_feat_rfft(float *buf, uint32_t n, const float *cs) {
    uint32_t m = n >> 1;
    cfft(buf, m, cs);
    const float *cosv = cs, *sinv = cs + m;
    float r0 = buf[0], i0 = buf[1];
    buf[0] = r0 + i0;     /* X_0 */
    buf[1] = r0 - i0;     /* X_m */
    for (uint32_t k = 1; k <= m / 2; k++) {
        float *a = buf + 2 * k, *b = buf + 2 * (m - k);
        float ar = a[0], ai = a[1], br = b[0], bi = b[1];
        float er = (ar + br) * 0.5f, ei = (ai - bi) * 0.5f;
        float orr = (ai + bi) * 0.5f, oi = (br - ar) * 0.5f;
        float c = cosv[k], s = sinv[k];
        float tr = c * orr + s * oi, ti = c * oi - s * orr;     /* (c - i s)(orr + i oi) */
        a[0] = er + tr;
        a[1] = ei + ti;
        if (k != m - k) {
            b[0] = er - tr;
            b[1] = ti - ei;
        }
    }
}
