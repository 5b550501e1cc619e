/* mct_feat.h - the signal front end: features computed from raw sensor windows by the same C on the host
 * trainer and on the device (feat_*.c), so a model sees the same bits in training and in the field.
 *
 * A pipeline is one mct_feat_cfg (its fields: MCT_FEAT_FIELDS below). Its constant tables (window, FFT
 * twiddles, mel weights, DCT, filter coefficients, ...) are computed from the config by mct_feat_tables with
 * the core's own math (mct_math.h), so every target computes the same tables; a firmware may keep them in
 * flash as the host computed them. Nothing allocates: the caller owns the tables, the scratch and the output,
 * sized by mct_feat_size. Built with -ffp-contract=off, host and device give the same bits.
 *
 * Pipelines (kind):
 *   MFCC, LOGMEL  audio of n_samples samples (channels = 1): frames of frame_len samples every frame_step
 *                 samples (n_frames = 1 + (n_samples - frame_len) / frame_step); per frame: optional
 *                 pre-emphasis y[t] = x[t] - pre_emph * x[t - 1] (over the whole signal, y[0] = x[0]),
 *                 window (periodic Hann or Hamming of frame_len), zero-padding to n_fft (a power of two),
 *                 real FFT, |X_k| (spectrum MAGNITUDE) or |X_k|^2 (POWER), a triangular mel filterbank of
 *                 n_mels bands from fmin to fmax (mel_scale HTK: 1127 ln(1 + f/700); SLANEY: linear below
 *                 1 kHz, logarithmic above; mel_norm SLANEY divides each triangle by half its width in Hz),
 *                 log(mel + log_eps); MFCC adds a DCT-II keeping n_coef coefficients, scaled sqrt(2/n_mels)
 *                 (dct_norm SQRT2N, as TensorFlow and CMSIS-DSP) or orthonormal (ORTHO: coefficient 0 has
 *                 sqrt(1/n_mels), as librosa and SciPy norm='ortho'). Output [n_frames][n_coef or n_mels].
 *   MOTION        a window of n_samples samples of `channels` axes, interleaved [n_samples][channels]; per axis
 *                 c: s = x * axis_scale[c], an optional biquad (filter LOWPASS / HIGHPASS at cutoff Hz, quality
 *                 q; RBJ cookbook coefficients, zero initial state), then the statistics of the `stats` bit mask
 *                 (MCT_FEAT_STAT_LIST order: mean, RMS, population standard deviation, min, max) and n_bands
 *                 band powers: the FFT of s (window applied, zero-padded to n_fft) gives P_k = |X_k|^2 / n_fft^2;
 *                 band b sums P_k over the bins whose frequency k * sample_rate / n_fft lies in
 *                 [band_lo + b w, band_lo + (b + 1) w), w = (band_hi - band_lo) / n_bands. Output [channels][n_stats + n_bands].
 * Inputs are floats, or int16 samples (mct_feat_run_i16) multiplied by in_scale first (1/32768 is exact, so
 * int16 and the floats x / 32768 give the same bits).
 */
#ifndef MCT_FEAT_H
#define MCT_FEAT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Pipelines (mct_feat_cfg.kind): X(NAME, value). */
#define MCT_FEAT_KIND_LIST(X) \
    X(NONE, 0)                \
    X(MFCC, 1)                \
    X(LOGMEL, 2)              \
    X(MOTION, 3)

/* Windows (mct_feat_cfg.window): X(NAME, value); periodic, as for spectral analysis. */
#define MCT_FEAT_WINDOW_LIST(X) \
    X(NONE, 0)                  \
    X(HANN, 1)   /* 0.5 - 0.5 cos(2 pi n / L) */ \
    X(HAMMING, 2) /* 0.54 - 0.46 cos(2 pi n / L) */

/* Mel scales (mct_feat_cfg.mel_scale): X(NAME, value). */
#define MCT_FEAT_MEL_LIST(X) \
    X(HTK, 0)                \
    X(SLANEY, 1)

/* Mel filter normalisations (mct_feat_cfg.mel_norm): X(NAME, value). */
#define MCT_FEAT_MELNORM_LIST(X) \
    X(NONE, 0)                   \
    X(SLANEY, 1) /* each triangle times 2 / (its upper edge - its lower edge) in Hz */

/* DCT scalings (mct_feat_cfg.dct_norm): X(NAME, value). */
#define MCT_FEAT_DCT_LIST(X) \
    X(SQRT2N, 0)             \
    X(ORTHO, 1)

/* Spectra (mct_feat_cfg.spectrum): X(NAME, value). */
#define MCT_FEAT_SPECTRUM_LIST(X) \
    X(MAGNITUDE, 1)               \
    X(POWER, 2)

/* Motion filters (mct_feat_cfg.filter): X(NAME, value). */
#define MCT_FEAT_FILTER_LIST(X) \
    X(NONE, 0)                  \
    X(LOWPASS, 1)               \
    X(HIGHPASS, 2)

/* Motion statistics (bit value of mct_feat_cfg.stats), in output order: X(NAME, bit). */
#define MCT_FEAT_STAT_LIST(X) \
    X(MEAN, 0)                \
    X(RMS, 1)                 \
    X(STD, 2)                 \
    X(MIN, 3)                 \
    X(MAX, 4)

/* Axes a motion window may have (the length of axis_scale). */
#define MCT_FEAT_MAX_AXES 8

/* The fields of struct mct_feat_cfg: X(type, field, numpy kind, count), in declaration order. */
#define MCT_FEAT_FIELDS(X)                                                                              \
    X(uint8_t, kind, 'u', 1)        /* enum mct_feat_kind */                                           \
    X(uint8_t, window, 'u', 1)      /* enum mct_feat_window */                                         \
    X(uint8_t, mel_scale, 'u', 1)   /* enum mct_feat_mel */                                            \
    X(uint8_t, mel_norm, 'u', 1)    /* enum mct_feat_melnorm */                                        \
    X(uint8_t, dct_norm, 'u', 1)    /* enum mct_feat_dct */                                            \
    X(uint8_t, spectrum, 'u', 1)    /* enum mct_feat_spectrum */                                       \
    X(uint8_t, filter, 'u', 1)      /* enum mct_feat_filter (MOTION) */                                \
    X(uint8_t, stats, 'u', 1)       /* bit mask of MCT_FEAT_STAT_LIST (MOTION) */                      \
    X(uint16_t, channels, 'u', 1)   /* axes per sample (MOTION; audio: 1) */                           \
    X(uint16_t, frame_len, 'u', 1)  /* samples per frame (audio) */                                    \
    X(uint16_t, frame_step, 'u', 1) /* samples between frame starts (audio) */                         \
    X(uint16_t, n_fft, 'u', 1)      /* FFT length, a power of two >= 4 (0: no FFT, MOTION only) */     \
    X(uint16_t, n_mels, 'u', 1)     /* mel bands (audio) */                                            \
    X(uint16_t, n_coef, 'u', 1)     /* MFCC coefficients kept (MFCC) */                                \
    X(uint16_t, n_bands, 'u', 1)    /* spectral bands (MOTION) */                                      \
    X(uint16_t, reserved, 'u', 1)                                                                       \
    X(uint32_t, n_samples, 'u', 1)  /* samples per window (per axis) */                                \
    X(float, sample_rate, 'f', 1)   /* Hz */                                                            \
    X(float, fmin, 'f', 1)          /* lowest mel edge, Hz */                                          \
    X(float, fmax, 'f', 1)          /* highest mel edge, Hz (<= sample_rate / 2) */                    \
    X(float, pre_emph, 'f', 1)      /* pre-emphasis coefficient (0: off) */                            \
    X(float, log_eps, 'f', 1)       /* added before the log */                                         \
    X(float, in_scale, 'f', 1)      /* int16 input samples are multiplied by this */                   \
    X(float, cutoff, 'f', 1)        /* filter cutoff, Hz (MOTION) */                                   \
    X(float, q, 'f', 1)             /* filter quality (MOTION; 0.7071 = Butterworth) */                \
    X(float, band_lo, 'f', 1)       /* spectral bands from band_lo ... */                              \
    X(float, band_hi, 'f', 1)       /* ... to band_hi Hz (MOTION) */                                   \
    X(float, axis_scale, 'f', MCT_FEAT_MAX_AXES) /* per-axis factor (MOTION) */

/* A struct member from a field entry: a scalar when COUNT is 1, else an array (the count's token is pasted). */
#define MCT_FEAT_FIELD_MEMBER(T, NAME, KIND, COUNT) MCT_FEAT_PICK_##COUNT(T, NAME, COUNT)
#define MCT_FEAT_PICK_1(T, NAME, COUNT) T NAME;
#define MCT_FEAT_PICK_MCT_FEAT_MAX_AXES(T, NAME, COUNT) T NAME[COUNT];

#define MCT_FEAT_KIND_ENUM(NAME, VALUE) MCT_FEAT_##NAME = VALUE,
enum mct_feat_kind { MCT_FEAT_KIND_LIST(MCT_FEAT_KIND_ENUM) MCT_FEAT_KIND_END_ };
#undef MCT_FEAT_KIND_ENUM
#define MCT_FEAT_WINDOW_ENUM(NAME, VALUE) MCT_FEAT_WIN_##NAME = VALUE,
enum mct_feat_window { MCT_FEAT_WINDOW_LIST(MCT_FEAT_WINDOW_ENUM) MCT_FEAT_WIN_END_ };
#undef MCT_FEAT_WINDOW_ENUM
#define MCT_FEAT_MEL_ENUM(NAME, VALUE) MCT_FEAT_MEL_##NAME = VALUE,
enum mct_feat_mel { MCT_FEAT_MEL_LIST(MCT_FEAT_MEL_ENUM) MCT_FEAT_MEL_END_ };
#undef MCT_FEAT_MEL_ENUM
#define MCT_FEAT_MELNORM_ENUM(NAME, VALUE) MCT_FEAT_MELNORM_##NAME = VALUE,
enum mct_feat_melnorm { MCT_FEAT_MELNORM_LIST(MCT_FEAT_MELNORM_ENUM) MCT_FEAT_MELNORM_END_ };
#undef MCT_FEAT_MELNORM_ENUM
#define MCT_FEAT_DCT_ENUM(NAME, VALUE) MCT_FEAT_DCT_##NAME = VALUE,
enum mct_feat_dct { MCT_FEAT_DCT_LIST(MCT_FEAT_DCT_ENUM) MCT_FEAT_DCT_END_ };
#undef MCT_FEAT_DCT_ENUM
#define MCT_FEAT_SPECTRUM_ENUM(NAME, VALUE) MCT_FEAT_SPEC_##NAME = VALUE,
enum mct_feat_spectrum { MCT_FEAT_SPECTRUM_LIST(MCT_FEAT_SPECTRUM_ENUM) MCT_FEAT_SPEC_END_ };
#undef MCT_FEAT_SPECTRUM_ENUM
#define MCT_FEAT_FILTER_ENUM(NAME, VALUE) MCT_FEAT_FILTER_##NAME = VALUE,
enum mct_feat_filter { MCT_FEAT_FILTER_LIST(MCT_FEAT_FILTER_ENUM) MCT_FEAT_FILTER_END_ };
#undef MCT_FEAT_FILTER_ENUM
#define MCT_FEAT_STAT_ENUM(NAME, BIT) MCT_FEAT_STAT_##NAME = BIT,
enum mct_feat_stat { MCT_FEAT_STAT_LIST(MCT_FEAT_STAT_ENUM) MCT_FEAT_STAT_END_ };
#undef MCT_FEAT_STAT_ENUM

/* A feature pipeline: the fields of MCT_FEAT_FIELDS, which documents them. */
typedef struct mct_feat_cfg { MCT_FEAT_FIELDS(MCT_FEAT_FIELD_MEMBER) } mct_feat_cfg;

/* What a pipeline needs and makes (mct_feat_size). */
typedef struct mct_feat_sizes {
    uint32_t n_in;        /* input values per window: n_samples * channels */
    uint32_t n_frames;    /* output rows: audio frames, or MOTION's axes */
    uint32_t n_per_frame; /* output values per row */
    uint32_t n_out;       /* output values per window: n_frames * n_per_frame */
    uint32_t tables;      /* floats of constant tables (mct_feat_tables) */
    uint32_t scratch;     /* floats of scratch for one window */
} mct_feat_sizes;

/* Sizes of pipeline c into *s; returns 1 when the config is valid, else 0 (and *s is zero). */
int mct_feat_size(const mct_feat_cfg *c, mct_feat_sizes *s);
/* Fill the constant tables of pipeline c (tab: mct_feat_size's tables floats); returns 1, or 0 for an invalid config. */
int mct_feat_tables(const mct_feat_cfg *c, float *tab);
/* Features of one window of floats x (n_in values) into out (n_out floats); scratch: mct_feat_size's scratch floats. */
void mct_feat_run(const mct_feat_cfg *c, const float *tab, const float *x, float *out, float *scratch);
/* mct_feat_run on int16 samples, each multiplied by in_scale first. */
void mct_feat_run_i16(const mct_feat_cfg *c, const float *tab, const int16_t *x, float *out, float *scratch);
/* One audio frame (MFCC / LOGMEL) of features: frame f of the window x (floats, or int16 when xi is not NULL). */
void mct_feat_frame(const mct_feat_cfg *c, const float *tab, const float *x, const int16_t *xi, uint32_t f,
                    float *out, float *scratch);
/* In-place real FFT of n (a power of two >= 4) floats with twiddles cs (cos, then sin, of 2 pi k / n, k < n / 2):
 * X_0, X_{n/2} (both real), then Re, Im of X_k for k = 1 .. n/2 - 1. */
void mct_feat_rfft(float *buf, uint32_t n, const float *cs);

#ifdef __cplusplus
}
#endif
#endif /* MCT_FEAT_H */
