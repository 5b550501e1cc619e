/* math_variant.c - the core's math functions under one build's settings, renamed with VARIANT's suffix.
 * tests/test_math_variants.py compiles this file twice, as the host builds the core (-DMCT_HOST_KERNELS:
 * branch-free) and as devices do (branches around the rare cases), and links both into math_variants.c. */
#include "mct_layers.h"

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define NAME(f) CAT(f, VARIANT)

float NAME(v_exp)(float x) { return mct_expf(x); }
float NAME(v_tanh)(float x) { return mct_tanhf(x); }
float NAME(v_log)(float x) { return mct_logf(x); }
float NAME(v_log1p)(float x) { return mct_log1pf(x); }
float NAME(v_sigmoid)(float x) { return mct_sigmoidf(x); }
float NAME(v_div)(float a, float b) { return mct_div(a, b); }
