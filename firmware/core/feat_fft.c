/* feat_fft.c - the real FFT of the feature pipelines: n real values are taken as n/2 complex ones
 * z_j = x_2j + i x_2j+1, transformed by an in-place decimation-in-time FFT of m = n/2 points, then split:
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

/* Forward complex FFT of m points in place (z interleaved re, im); twiddles of the n = 2m table. The radix-2
 * stages run two at a time (spans L and 2L fused: four points per butterfly, half the loads and stores), the
 * first two with their trivial twiddles 1 and -i; a last single stage when the count is odd. */
static void cfft(float *z, uint32_t m, const float *cs) {
    const float *cosv = cs, *sinv = cs + m;   /* table of n = 2m: cos and sin of 2 pi k / n, k < m */
    uint32_t len;
    bit_reverse(z, m);
    if (m >= 4) {   /* spans 2 and 4: twiddles 1, and 1 and -i */
        for (uint32_t i = 0; i < m; i += 4) {
            float *a = z + 2 * i;
            float b0r = a[0] + a[2], b0i = a[1] + a[3], b1r = a[0] - a[2], b1i = a[1] - a[3];
            float b2r = a[4] + a[6], b2i = a[5] + a[7], b3r = a[4] - a[6], b3i = a[5] - a[7];
            a[0] = b0r + b2r;
            a[1] = b0i + b2i;
            a[4] = b0r - b2r;
            a[5] = b0i - b2i;
            a[2] = b1r + b3i;     /* b1 + (-i) b3 */
            a[3] = b1i - b3r;
            a[6] = b1r - b3i;
            a[7] = b1i + b3r;
        }
        len = 8;
    } else {        /* m = 2: span 2 only */
        float ur = z[0], ui = z[1], vr = z[2], vi = z[3];
        z[0] = ur + vr;
        z[1] = ui + vi;
        z[2] = ur - vr;
        z[3] = ui - vi;
        len = 4;
    }
    for (; 2u * len <= m; len <<= 2) {   /* spans len (twiddle W_len^j) and 2 len (W_2len^j, W_2len^(j + len/2)) */
        uint32_t half = len >> 1, step1 = (2u * m) / len, step2 = m / len;
        for (uint32_t j = 0; j < half; j++) {
            float c1 = cosv[j * step1], s1 = sinv[j * step1], c2 = cosv[j * step2], s2 = sinv[j * step2];
            for (uint32_t g = j; g < m; g += 2u * len) {
                float *p0 = z + 2 * g, *p1 = p0 + len, *p2 = p0 + 2u * len, *p3 = p0 + 3u * len;
                float tr = p1[0] * c1 + p1[1] * s1, ti = p1[1] * c1 - p1[0] * s1;
                float ur = p3[0] * c1 + p3[1] * s1, ui = p3[1] * c1 - p3[0] * s1;
                float b0r = p0[0] + tr, b0i = p0[1] + ti, b1r = p0[0] - tr, b1i = p0[1] - ti;
                float b2r = p2[0] + ur, b2i = p2[1] + ui, b3r = p2[0] - ur, b3i = p2[1] - ui;
                float vr = b2r * c2 + b2i * s2, vi = b2i * c2 - b2r * s2;
                float wr = b3r * c2 + b3i * s2, wi = b3i * c2 - b3r * s2;
                p0[0] = b0r + vr;
                p0[1] = b0i + vi;
                p2[0] = b0r - vr;
                p2[1] = b0i - vi;
                p1[0] = b1r + wi;    /* b1 + (-i) w */
                p1[1] = b1i - wr;
                p3[0] = b1r - wi;
                p3[1] = b1i + wr;
            }
        }
    }
    if (len <= m) {   /* an odd number of stages: the last one alone */
        uint32_t half = len >> 1, step = (2u * m) / len;
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
