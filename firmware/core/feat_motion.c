/* feat_motion.c - the MOTION pipeline (mct_feat.h): per axis scaling, an optional biquad low/high-pass,
 * statistics and spectral band powers of one window of n_samples x channels values.
 * Tables: b0 b1 b2 a1 a2 of the biquad (normalised by a0; 1 0 0 0 0 without a filter); with bands, the window
 * (n_samples floats, none for window NONE), the twiddles (n_fft floats) and per bin 0 .. n_fft/2 its band
 * (a float, -1 for none). */
#include "mct_feat_int.h"
#include "mct_math.h"

#include <string.h>

#define TWO_PI 6.28318548f

static uint32_t n_stats(uint8_t mask) {
    uint32_t n = 0;
    for (uint32_t b = 0; b < MCT_FEAT_STAT_END_; b++) n += (mask >> b) & 1u;
    return n;
}

int mct_feat_motion_size(const mct_feat_cfg *c, mct_feat_sizes *s) {
    if (c->channels == 0u || c->channels > MCT_FEAT_MAX_AXES || c->n_samples == 0u || c->n_samples > UINT32_C(1048576))
        return 0;
    if ((c->stats >> MCT_FEAT_STAT_END_) != 0u || c->filter >= MCT_FEAT_FILTER_END_) return 0;
    if (!(c->sample_rate > 0.0f && c->sample_rate < 1e7f) || !(c->in_scale == c->in_scale)) return 0;
    for (uint32_t a = 0; a < c->channels; a++)
        if (!(c->axis_scale[a] > -1e30f && c->axis_scale[a] < 1e30f)) return 0;
    if (c->filter != MCT_FEAT_FILTER_NONE &&
        !(c->cutoff > 0.0f && c->cutoff < 0.5f * c->sample_rate && c->q > 0.0f && c->q < 1e6f))
        return 0;
    uint32_t per = n_stats(c->stats) + c->n_bands;
    if (per == 0u) return 0;
    s->n_in = c->n_samples * c->channels;
    s->n_frames = c->channels;
    s->n_per_frame = per;
    s->tables = 5u;
    s->scratch = c->n_samples;
    if (c->n_bands) {
        if (!mct_feat_pow2(c->n_fft) || c->n_fft < c->n_samples || c->window >= MCT_FEAT_WIN_END_) return 0;
        if (!(c->band_lo >= 0.0f && c->band_hi > c->band_lo && c->band_hi <= 0.5f * c->sample_rate)) return 0;
        s->tables += (c->window != MCT_FEAT_WIN_NONE ? c->n_samples : 0u) + c->n_fft + c->n_fft / 2u + 1u;
        s->scratch = c->n_fft;
    } else if (c->n_fft != 0u) {
        return 0;
    }
    return 1;
}

int mct_feat_motion_tables(const mct_feat_cfg *c, float *tab) {
    float b0 = 1.0f, b1 = 0.0f, b2 = 0.0f, a1 = 0.0f, a2 = 0.0f;
    if (c->filter != MCT_FEAT_FILTER_NONE) {   /* RBJ audio EQ cookbook */
        float w0 = mct_div(TWO_PI * c->cutoff, c->sample_rate);
        float cw = mct_cosf(w0), alpha = mct_div(mct_sinf(w0), 2.0f * c->q), a0 = 1.0f + alpha;
        float sign = c->filter == MCT_FEAT_FILTER_LOWPASS ? -1.0f : 1.0f;   /* LPF: 1 - cos, HPF: 1 + cos */
        float g = 1.0f + sign * cw;
        b0 = mct_div(0.5f * g, a0);
        b1 = mct_div(-sign * g, a0);
        b2 = b0;
        a1 = mct_div(-2.0f * cw, a0);
        a2 = mct_div(1.0f - alpha, a0);
    }
    tab[0] = b0;
    tab[1] = b1;
    tab[2] = b2;
    tab[3] = a1;
    tab[4] = a2;
    if (!c->n_bands) return 1;
    float *t = tab + 5;
    if (c->window != MCT_FEAT_WIN_NONE) {
        mct_feat_window(c->window, c->n_samples, t);
        t += c->n_samples;
    }
    mct_feat_twiddles(c->n_fft, t);
    t += c->n_fft;
    float lo = c->band_lo, span = c->band_hi - c->band_lo;
    for (uint32_t k = 0; k <= c->n_fft / 2u; k++) {
        float f = mct_div((float)k * c->sample_rate, (float)c->n_fft);
        float band = -1.0f;
        for (uint32_t b = 0; b < c->n_bands; b++) {
            float e0 = lo + mct_div((float)b * span, (float)c->n_bands);
            float e1 = b + 1u == c->n_bands ? c->band_hi : lo + mct_div((float)(b + 1u) * span, (float)c->n_bands);
            if (f >= e0 && f < e1) band = (float)b;
        }
        t[k] = band;
    }
    return 1;
}

void mct_feat_motion_run(const mct_feat_cfg *c, const float *tab, const float *x, const int16_t *xi, float *out,
                         float *scratch) {
    uint32_t N = c->n_samples, C = c->channels, per = n_stats(c->stats) + c->n_bands;
    float b0 = tab[0], b1 = tab[1], b2 = tab[2], a1 = tab[3], a2 = tab[4];
    const float *win = tab + 5;
    const float *tw = win + (c->window != MCT_FEAT_WIN_NONE ? N : 0u);
    const float *band = tw + c->n_fft;
    float *s = scratch;
    for (uint32_t a = 0; a < C; a++, out += per) {
        float g = c->axis_scale[a];
        if (xi)
            for (uint32_t n = 0; n < N; n++) s[n] = ((float)xi[(size_t)n * C + a] * c->in_scale) * g;
        else
            for (uint32_t n = 0; n < N; n++) s[n] = x[(size_t)n * C + a] * g;
        if (c->filter != MCT_FEAT_FILTER_NONE) {   /* direct form I, zero initial state */
            float x1 = 0.0f, x2 = 0.0f, y1 = 0.0f, y2 = 0.0f;
            for (uint32_t n = 0; n < N; n++) {
                float v = s[n];
                float y = b0 * v + b1 * x1 + b2 * x2 - a1 * y1 - a2 * y2;
                x2 = x1;
                x1 = v;
                y2 = y1;
                y1 = y;
                s[n] = y;
            }
        }
        float sum = 0.0f, sq = 0.0f, lo = s[0], hi = s[0];
        for (uint32_t n = 0; n < N; n++) {
            float v = s[n];
            sum = sum + v;
            sq = sq + v * v;
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        float mean = mct_div(sum, (float)N), var = 0.0f;
        if ((c->stats >> MCT_FEAT_STAT_STD) & 1u) {
            for (uint32_t n = 0; n < N; n++) {
                float d = s[n] - mean;
                var = var + d * d;
            }
        }
        float st[MCT_FEAT_STAT_END_];
        st[MCT_FEAT_STAT_MEAN] = mean;
        st[MCT_FEAT_STAT_RMS] = mct_sqrtf(mct_div(sq, (float)N));
        st[MCT_FEAT_STAT_STD] = mct_sqrtf(mct_div(var, (float)N));
        st[MCT_FEAT_STAT_MIN] = lo;
        st[MCT_FEAT_STAT_MAX] = hi;
        uint32_t o = 0;
        for (uint32_t b = 0; b < MCT_FEAT_STAT_END_; b++)
            if ((c->stats >> b) & 1u) out[o++] = st[b];
        if (!c->n_bands) continue;
        uint32_t nf = c->n_fft, half = nf / 2u;
        if (c->window != MCT_FEAT_WIN_NONE)
            for (uint32_t n = 0; n < N; n++) s[n] = s[n] * win[n];
        for (uint32_t n = N; n < nf; n++) s[n] = 0.0f;
        mct_feat_rfft(s, nf, tw);
        float *bp = out + o, norm = (float)nf * (float)nf;
        for (uint32_t b = 0; b < c->n_bands; b++) bp[b] = 0.0f;
        for (uint32_t k = 0; k <= half; k++) {
            float bf = band[k];
            if (bf < 0.0f) continue;
            float p;
            if (k == 0u) p = s[0] * s[0];
            else if (k == half) p = s[1] * s[1];
            else p = s[2u * k] * s[2u * k] + s[2u * k + 1u] * s[2u * k + 1u];
            uint32_t b = (uint32_t)bf;
            bp[b] = bp[b] + mct_div(p, norm);
        }
    }
}
