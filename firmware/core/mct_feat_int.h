/* mct_feat_int.h - what the feature pipeline's files (feat*.c) share; not part of the core's API. */
#ifndef MCT_FEAT_INT_H
#define MCT_FEAT_INT_H

#include "mct_feat.h"

#if defined(__GNUC__)
#define MCT_FEAT_INLINE inline __attribute__((always_inline))
#else
#define MCT_FEAT_INLINE inline
#endif

/* Is n a power of two >= 4 (an FFT length)? (1 = yes) */
int mct_feat_pow2(uint32_t n);
/* FFT twiddles of length n into cs: cos(2 pi k / n) for k < n/2, then sin(2 pi k / n) for k < n/2. */
void mct_feat_twiddles(uint32_t n, float *cs);
/* A periodic window (enum mct_feat_window, not NONE) of L points into w. */
void mct_feat_window(uint8_t kind, uint32_t L, float *w);
/* MOTION sizes (feat_motion.c): 1 when the config is valid (n_out is left to the caller). */
int mct_feat_motion_size(const mct_feat_cfg *c, mct_feat_sizes *s);
/* MOTION tables: biquad b0 b1 b2 a1 a2, then with bands the window (n_samples), twiddles (n_fft) and each bin's band. */
int mct_feat_motion_tables(const mct_feat_cfg *c, float *tab);
/* MOTION features of one window (x floats, or xi int16 when not NULL). */
void mct_feat_motion_run(const mct_feat_cfg *c, const float *tab, const float *x, const int16_t *xi, float *out,
                         float *scratch);

#endif /* MCT_FEAT_INT_H */
