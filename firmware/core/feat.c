/* feat.c - the feature pipelines' sizes, constant tables and the audio front end (MFCC, log-mel); the
 * motion pipeline is feat_motion.c, the FFT feat_fft.c. What each pipeline computes: mct_feat.h.
 *
 * Audio tables, in order: k_lo, k_hi (the FFT bins that reach a mel band, as floats), the window (frame_len
 * floats, none for window NONE), the twiddles (n_fft floats), per bin k_lo..k_hi three floats: the segment j
 * of the mel points its frequency lies in (p_j <= f < p_j+1), its weight in band j (rising edge) and in band
 * j - 1 (falling edge), the Slaney normalisation folded in; then the DCT (n_coef x n_mels, MFCC only). */
#include "mct_feat.h"
#include "mct_feat_int.h"
#include "mct_math.h"

#include <string.h>

#define TWO_PI 6.28318548f   /* 2 pi rounded to float */
#define PI_F 3.14159274f

int mct_feat_pow2(uint32_t n) { return n >= 4u && (n & (n - 1u)) == 0u; }

/* cos and sin of 2 pi r / n for r <= n / 4 (n a multiple of 4), by the octant: exact at 0 and pi/2. */
static void twiddle_q(uint32_t r, uint32_t n, float *c, float *s) {
    uint32_t q = n / 4u;
    if (2u * r <= q) {
        float a = mct_div((float)r * TWO_PI, (float)n);
        *c = r ? mct_cosf(a) : 1.0f;
        *s = r ? mct_sinf(a) : 0.0f;
    } else {
        float a = mct_div((float)(q - r) * TWO_PI, (float)n);
        *c = r == q ? 0.0f : mct_sinf(a);
        *s = r == q ? 1.0f : mct_cosf(a);
    }
}

void mct_feat_twiddles(uint32_t n, float *cs) {
    uint32_t m = n / 2u, q = n / 4u;
    for (uint32_t k = 0; k < m; k++) {
        float c, s;
        if (k <= q) {
            twiddle_q(k, n, &c, &s);
        } else {   /* pi/2 + theta: cos = -sin theta, sin = cos theta */
            float c0, s0;
            twiddle_q(k - q, n, &c0, &s0);
            c = -s0;
            s = c0;
        }
        cs[k] = c;
        cs[m + k] = s;
    }
}

/* cos(2 pi i / L) with the argument folded into [0, pi]. */
static float cos_frac(uint32_t i, uint32_t L) {
    uint32_t r = i % L;
    if (2u * r > L) r = L - r;
    return r ? mct_cosf(mct_div((float)r * TWO_PI, (float)L)) : 1.0f;
}

void mct_feat_window(uint8_t kind, uint32_t L, float *w) {
    float a = kind == MCT_FEAT_WIN_HAMMING ? 0.54f : 0.5f, b = kind == MCT_FEAT_WIN_HAMMING ? 0.46f : 0.5f;
    for (uint32_t i = 0; i < L; i++) w[i] = a - b * cos_frac(i, L);
}

/* ---- mel scale ---- */
#define SLANEY_LOGSTEP 0.0687517762f   /* ln(6.4) / 27 */
static float hz_to_mel(uint8_t scale, float f) {
    if (scale == MCT_FEAT_MEL_HTK) return 1127.0f * mct_log1pf(mct_div(f, 700.0f));
    if (f < 1000.0f) return mct_div(3.0f * f, 200.0f);
    return 15.0f + mct_div(mct_logf(mct_div(f, 1000.0f)), SLANEY_LOGSTEP);
}
static float mel_to_hz(uint8_t scale, float m) {
    if (scale == MCT_FEAT_MEL_HTK) return 700.0f * (mct_expf(mct_div(m, 1127.0f)) - 1.0f);
    if (m < 15.0f) return mct_div(200.0f * m, 3.0f);
    return 1000.0f * mct_expf(SLANEY_LOGSTEP * (m - 15.0f));
}
/* Mel point i of n_mels + 2 (Hz), evenly spaced in mel from fmin to fmax; point 0 is fmin itself. */
static float mel_point(const mct_feat_cfg *c, uint32_t i) {
    if (i == 0) return c->fmin;
    float lo = hz_to_mel(c->mel_scale, c->fmin), hi = hz_to_mel(c->mel_scale, c->fmax);
    return mel_to_hz(c->mel_scale, lo + mct_div((float)i * (hi - lo), (float)(c->n_mels + 1u)));
}
/* Frequency of FFT bin k, Hz. */
static float bin_hz(const mct_feat_cfg *c, uint32_t k) { return mct_div((float)k * c->sample_rate, (float)c->n_fft); }

/* The FFT bins strictly inside the mel range: [*lo, *hi]; 0 when there are none. */
static int mel_bins(const mct_feat_cfg *c, uint32_t *lo, uint32_t *hi) {
    float p0 = mel_point(c, 0), p1 = mel_point(c, c->n_mels + 1u);
    uint32_t m = c->n_fft / 2u, k = 0;
    while (k <= m && !(bin_hz(c, k) > p0)) k++;
    *lo = k;
    while (k <= m && bin_hz(c, k) < p1) k++;
    if (k == *lo) return 0;
    *hi = k - 1u;
    return 1;
}

static int is_audio(uint8_t kind) { return kind == MCT_FEAT_MFCC || kind == MCT_FEAT_LOGMEL; }

/* Audio table offsets. */
typedef struct audio_layout {
    uint32_t k_lo, k_hi, win, tw, mel, dct, total;
} audio_layout;

static int audio_layout_of(const mct_feat_cfg *c, audio_layout *a) {
    if (!mel_bins(c, &a->k_lo, &a->k_hi)) return 0;
    a->win = 2u;
    a->tw = a->win + (c->window != MCT_FEAT_WIN_NONE ? c->frame_len : 0u);
    a->mel = a->tw + c->n_fft;
    a->dct = a->mel + 3u * (a->k_hi - a->k_lo + 1u);
    a->total = a->dct + (c->kind == MCT_FEAT_MFCC ? (uint32_t)c->n_coef * c->n_mels : 0u);
    return 1;
}

static int audio_valid(const mct_feat_cfg *c) {
    if (c->channels != 1u || !mct_feat_pow2(c->n_fft) || c->frame_len == 0u || c->frame_len > c->n_fft) return 0;
    if (c->frame_step == 0u || c->n_samples < c->frame_len || c->n_samples > UINT32_C(16777216) || c->n_mels == 0u) return 0;
    if (!(c->sample_rate > 0.0f && c->sample_rate < 1e7f) || !(c->fmin >= 0.0f) || !(c->fmax > c->fmin)) return 0;
    if (!(c->fmax <= 0.5f * c->sample_rate) || !(c->log_eps >= 0.0f && c->log_eps < 1e30f)) return 0;
    if (!(c->pre_emph >= -1.0f && c->pre_emph <= 1.0f) || !(c->in_scale == c->in_scale)) return 0;
    if (c->window >= MCT_FEAT_WIN_END_ || c->mel_scale >= MCT_FEAT_MEL_END_ || c->mel_norm >= MCT_FEAT_MELNORM_END_)
        return 0;
    if (c->spectrum != MCT_FEAT_SPEC_MAGNITUDE && c->spectrum != MCT_FEAT_SPEC_POWER) return 0;
    if (c->kind == MCT_FEAT_MFCC && (c->n_coef == 0u || c->n_coef > c->n_mels || c->dct_norm >= MCT_FEAT_DCT_END_))
        return 0;
    return 1;
}

int mct_feat_size(const mct_feat_cfg *c, mct_feat_sizes *s) {
    memset(s, 0, sizeof *s);
    if (!c) return 0;
    if (is_audio(c->kind)) {
        audio_layout a;
        if (!audio_valid(c) || !audio_layout_of(c, &a)) return 0;
        s->n_in = c->n_samples;
        s->n_frames = 1u + (c->n_samples - c->frame_len) / c->frame_step;
        s->n_per_frame = c->kind == MCT_FEAT_MFCC ? c->n_coef : c->n_mels;
        s->tables = a.total;
        s->scratch = (uint32_t)c->n_fft + c->n_mels;
    } else if (c->kind == MCT_FEAT_MOTION) {
        if (!mct_feat_motion_size(c, s)) {
            memset(s, 0, sizeof *s);
            return 0;
        }
    } else {
        return 0;
    }
    s->n_out = s->n_frames * s->n_per_frame;
    return 1;
}

int mct_feat_tables(const mct_feat_cfg *c, float *tab) {
    mct_feat_sizes sz;
    if (!mct_feat_size(c, &sz)) return 0;
    if (c->kind == MCT_FEAT_MOTION) return mct_feat_motion_tables(c, tab);
    audio_layout a;
    audio_layout_of(c, &a);
    tab[0] = (float)a.k_lo;
    tab[1] = (float)a.k_hi;
    if (c->window != MCT_FEAT_WIN_NONE) mct_feat_window(c->window, c->frame_len, tab + a.win);
    mct_feat_twiddles(c->n_fft, tab + a.tw);
    /* mel weights: bin k in segment j gets (f - p_j) / (p_j+1 - p_j) of band j and (p_j+1 - f) / (...) of band j-1 */
    uint32_t M = c->n_mels, j = 0;
    float pj = mel_point(c, 0), pn = mel_point(c, 1);
    float *w = tab + a.mel;
    for (uint32_t k = a.k_lo; k <= a.k_hi; k++) {
        float f = bin_hz(c, k);
        while (j < M && !(f < pn)) {
            j++;
            pj = pn;
            pn = mel_point(c, j + 1u);
        }
        float d = pn - pj, rise = mct_div(f - pj, d), fall = mct_div(pn - f, d);
        if (c->mel_norm == MCT_FEAT_MELNORM_SLANEY) {
            if (j < M) rise = rise * mct_div(2.0f, mel_point(c, j + 2u) - pj);
            if (j >= 1u) fall = fall * mct_div(2.0f, pn - mel_point(c, j - 1u));
        }
        w[0] = (float)j;
        w[1] = j < M ? rise : 0.0f;
        w[2] = j >= 1u ? fall : 0.0f;
        w += 3;
    }
    if (c->kind == MCT_FEAT_MFCC) {
        /* D[i][m] = s_i cos(pi i (2m + 1) / (2M)), s_i = sqrt(2/M) (ORTHO: sqrt(1/M) for i = 0) */
        float *d = tab + a.dct, s = mct_sqrtf(mct_div(2.0f, (float)M));
        for (uint32_t i = 0; i < c->n_coef; i++) {
            float si = (i == 0 && c->dct_norm == MCT_FEAT_DCT_ORTHO) ? mct_sqrtf(mct_div(1.0f, (float)M)) : s;
            for (uint32_t m = 0; m < M; m++) {
                uint32_t r = (i * (2u * m + 1u)) % (4u * M);   /* the angle is pi r / (2M), r < 4M */
                d[i * M + m] = si * cos_frac(r, 4u * M);
            }
        }
    }
    return 1;
}

/* Sample t of the window: a float, or an int16 times in_scale. */
static MCT_FEAT_INLINE float sample(const mct_feat_cfg *c, const float *x, const int16_t *xi, uint32_t t) {
    return xi ? (float)xi[t] * c->in_scale : x[t];
}

void mct_feat_frame(const mct_feat_cfg *c, const float *tab, const float *x, const int16_t *xi, uint32_t f,
                    float *out, float *scratch) {
    audio_layout a;
    a.k_lo = (uint32_t)tab[0];
    a.k_hi = (uint32_t)tab[1];
    a.win = 2u;
    a.tw = a.win + (c->window != MCT_FEAT_WIN_NONE ? c->frame_len : 0u);
    a.mel = a.tw + c->n_fft;
    a.dct = a.mel + 3u * (a.k_hi - a.k_lo + 1u);
    uint32_t n = c->n_fft, L = c->frame_len, M = c->n_mels, start = f * c->frame_step;
    float *buf = scratch, *mel = scratch + n;
    const float *win = tab + a.win;
    float pe = c->pre_emph;
    /* frame, pre-emphasis, window, zero padding */
    int windowed = c->window != MCT_FEAT_WIN_NONE;
    if (pe != 0.0f) {
        float prev = start ? sample(c, x, xi, start - 1u) : sample(c, x, xi, 0);
        for (uint32_t i = 0; i < L; i++) {
            float v = sample(c, x, xi, start + i);
            buf[i] = (start + i) ? v - pe * prev : v;
            prev = v;
        }
        if (windowed)
            for (uint32_t i = 0; i < L; i++) buf[i] = buf[i] * win[i];
    } else if (xi) {
        float sc = c->in_scale;
        if (windowed)
            for (uint32_t i = 0; i < L; i++) buf[i] = ((float)xi[start + i] * sc) * win[i];
        else
            for (uint32_t i = 0; i < L; i++) buf[i] = (float)xi[start + i] * sc;
    } else if (windowed) {
        for (uint32_t i = 0; i < L; i++) buf[i] = x[start + i] * win[i];
    } else {
        for (uint32_t i = 0; i < L; i++) buf[i] = x[start + i];
    }
    for (uint32_t i = L; i < n; i++) buf[i] = 0.0f;
    mct_feat_rfft(buf, n, tab + a.tw);
    /* spectrum and mel bands */
    for (uint32_t m = 0; m < M; m++) mel[m] = 0.0f;
    const float *w = tab + a.mel;
    uint32_t half = n / 2u;
    int mag = c->spectrum == MCT_FEAT_SPEC_MAGNITUDE;
    for (uint32_t k = a.k_lo; k <= a.k_hi; k++, w += 3) {
        float p;
        if (k == 0u) p = buf[0] * buf[0];
        else if (k == half) p = buf[1] * buf[1];
        else p = buf[2u * k] * buf[2u * k] + buf[2u * k + 1u] * buf[2u * k + 1u];
        if (mag) p = mct_sqrtf(p);
        uint32_t j = (uint32_t)w[0];
        if (j < M) mel[j] = mel[j] + w[1] * p;
        if (j >= 1u) mel[j - 1u] = mel[j - 1u] + w[2] * p;
    }
    float eps = c->log_eps;
    if (c->kind == MCT_FEAT_LOGMEL) {
        for (uint32_t m = 0; m < M; m++) out[m] = mct_logf(mel[m] + eps);
        return;
    }
    for (uint32_t m = 0; m < M; m++) mel[m] = mct_logf(mel[m] + eps);
    const float *d = tab + a.dct;
    for (uint32_t i = 0; i < c->n_coef; i++, d += M) {
        float acc = d[0] * mel[0];
        for (uint32_t m = 1; m < M; m++) acc = acc + d[m] * mel[m];
        out[i] = acc;
    }
}

/* Both inputs: x floats, or xi int16 when not NULL. */
static void run(const mct_feat_cfg *c, const float *tab, const float *x, const int16_t *xi, float *out,
                float *scratch) {
    if (c->kind == MCT_FEAT_MOTION) {
        mct_feat_motion_run(c, tab, x, xi, out, scratch);
        return;
    }
    uint32_t frames = 1u + (c->n_samples - c->frame_len) / c->frame_step;
    uint32_t per = c->kind == MCT_FEAT_MFCC ? c->n_coef : c->n_mels;
    for (uint32_t f = 0; f < frames; f++) mct_feat_frame(c, tab, x, xi, f, out + (size_t)f * per, scratch);
}

void mct_feat_run(const mct_feat_cfg *c, const float *tab, const float *x, float *out, float *scratch) {
    run(c, tab, x, NULL, out, scratch);
}

void mct_feat_run_i16(const mct_feat_cfg *c, const float *tab, const int16_t *x, float *out, float *scratch) {
    run(c, tab, NULL, x, out, scratch);
}
