/* mct_math.h - portable single-precision exp, log, tanh, sin, cos, sqrt.
 *
 * newlib, glibc, picolibc and avr-libc round their libm results differently, so the
 * core never calls libm: these functions use only +, -, *, / and integer bit work,
 * which every IEEE-754 single-precision target rounds the same way (build with
 * -ffp-contract=off). Each is a static inline, branch-free where it matters, so a
 * host compiler can vectorise the loops that call them.
 *
 * Accuracy (measured by tests/test_math.py against float64): exp, log, tanh, sin and
 * cos are within 1.5 ulp, log1p and sin/cos of large arguments within 2.5 ulp; sqrt is
 * correctly rounded.
 * Conventions: exp(x) is 0 for x < -86 (no subnormal results) and +inf for x > 88.5;
 * sin and cos are accurate for |x| <= 8192.
 */
#ifndef MCT_MATH_H
#define MCT_MATH_H

#include <stdint.h>
#include <string.h>

/* Reinterpret the bits of a float as a uint32_t. */
static inline uint32_t mct_f2u(float f) { uint32_t u; memcpy(&u, &f, sizeof u); return u; }
/* Reinterpret the bits of a uint32_t as a float. */
static inline float mct_u2f(uint32_t u) { float f; memcpy(&f, &u, sizeof f); return f; }

/* Device builds (no MCT_HOST_KERNELS) test the rare cases of mct_div and mct_expf with a branch or a
 * bit test, which costs fewer instructions per call; the host keeps them branch-free compares so
 * that its loops vectorise. Both give the same bits (tests/c/math_variants.c checks it). */
#if !defined(MCT_HOST_KERNELS) && !defined(MCT_BRANCH_FREE_MATH)
#define MCT_MATH_BRANCHES 1
#else
#define MCT_MATH_BRANCHES 0
#endif

/* a / b with a subnormal quotient flushed to a signed zero. avr-libc's division rounds some
 * subnormal quotients the other way; everywhere else the quotient is the IEEE one, so with this
 * every target gives the same bits. The core divides only through it. */
static inline float mct_div(float a, float b) {
    float q = a / b;
#if MCT_MATH_BRANCHES
    uint32_t u = mct_f2u(q);
    return (u & 0x7f800000u) ? q : mct_u2f(u & 0x80000000u);   /* exponent field 0: +-0 or subnormal */
#else
    float m = q < 0.0f ? -q : q;
    return m < 1.17549435e-38f ? q * 0.0f : q;    /* a compare, not a bit test: loops still vectorise */
#endif
}

/* Round a float (|x| < 2^22) to the nearest integer, ties to even, as a float. */
static inline float mct_rintf(float x) {
    const float magic = 12582912.0f; /* 1.5 * 2^23 */
    return (x + magic) - magic;
}

/* Integer part n of a float produced by mct_rintf (|n| < 2^22), without a float->int cast. */
static inline int32_t mct_rint_to_i32(float k) {
    return (int32_t)(mct_f2u(k + 12582912.0f) - mct_f2u(12582912.0f));
}

/* e^x for -86 <= xc <= 88.5 (the body of mct_expf). */
static inline float mct_exp_inrange(float xc) {
    float k = mct_rintf(xc * 1.44269502f);                   /* x / ln 2 */
    float r = xc - k * 0.693145752f;                           /* ln2 high part (exact product) */
    r = r - k * 1.42860677e-06f;                               /* ln2 low part */
    float p = 1.38146232e-03f;
    p = p * r + 8.36870726e-03f;
    p = p * r + 4.16683890e-02f;
    p = p * r + 1.66665211e-01f;
    p = p * r + 4.99999940e-01f;
    p = p * r * r + r;
    p = p + 1.0f;
    int32_t n = mct_rint_to_i32(k);                            /* -124 .. 128 */
    /* p * 2^n by adding n to p's exponent field: p is in [0.7, 1.42] (below 1 when n = 128), so the result
     * is a normal number and exactly the product */
    return mct_u2f(mct_f2u(p) + ((uint32_t)n << 23));
}

/* e^x: 0 below -86, +inf above 88.5, NaN for NaN; within 1 ulp elsewhere. */
static inline float mct_expf(float x) {
#if MCT_MATH_BRANCHES
    if (x >= -86.0f && x <= 88.5f) return mct_exp_inrange(x);
    return x != x ? x : (x < 0.0f ? 0.0f : mct_u2f(0x7f800000u));
#else
    float xc = x < -86.0f ? -86.0f : x;
    xc = xc > 88.5f ? 88.5f : xc;
    float y = mct_exp_inrange(xc);
    y = x < -86.0f ? 0.0f : y;
    y = x > 88.5f ? mct_u2f(0x7f800000u) : y;
    return x != x ? x : y;
#endif
}

/* Natural logarithm: -inf at 0, NaN below 0, within 1.5 ulp elsewhere (subnormals included). */
static inline float mct_logf(float x) {
    uint32_t ix0 = mct_f2u(x), ax = ix0 & 0x7fffffffu, ix = ix0;
    int32_t e = 0;
    if (ix < 0x00800000u) { x = x * 8388608.0f; ix = mct_f2u(x); e = -23; } /* positive subnormal, +0 */
    e += (int32_t)(ix >> 23) - 127;
    uint32_t mant = ix & 0x007fffffu;
    /* put the mantissa m in [sqrt(1/2), sqrt(2)) */
    uint32_t big = mant > 0x003504f3u;
    float m = mct_u2f(mant | (big ? 0x3f000000u : 0x3f800000u));
    e += (int32_t)big;
    float f = m - 1.0f;
    float p = -7.94637650e-02f;
    p = p * f + 1.23434819e-01f;
    p = p * f - 1.29018664e-01f;
    p = p * f + 1.42617151e-01f;
    p = p * f - 1.66524738e-01f;
    p = p * f + 1.99985623e-01f;
    p = p * f - 2.50000417e-01f;
    p = p * f + 3.33333611e-01f;
    float f2 = f * f;
    float ef = (float)e;
    float y = ef * 0.693145752f + (f - (0.5f * f2 - (f2 * f * p + ef * 1.42860677e-06f)));
    y = ax == 0u ? -mct_u2f(0x7f800000u) : y;          /* +-0 */
    y = ax >= 0x7f800000u ? x + x : y;                 /* +inf, NaN */
    return (ix0 >> 31) && ax ? mct_u2f(0x7fc00000u) : y; /* below zero (or -NaN): NaN */
}

/* log(1 + x), accurate also for tiny x. */
static inline float mct_log1pf(float x) {
    float u = 1.0f + x;
    float d = u - 1.0f;
    float y = mct_logf(u) * mct_div(x, d == 0.0f ? 1.0f : d);
    y = u == mct_u2f(0x7f800000u) ? u : y;             /* log1p(+inf) = +inf */
    return d == 0.0f ? x : y;
}

/* Hyperbolic tangent, within 1.5 ulp. */
static inline float mct_tanhf(float x) {
    float a = x < 0.0f ? -x : x;
    float a2 = a * a;
    float p = -6.10563206e-03f;
    p = p * a2 + 2.10050065e-02f;
    p = p * a2 - 5.38531989e-02f;
    p = p * a2 + 1.33327946e-01f;
    p = p * a2 - 3.33333284e-01f;
    float small = a + a * a2 * p;
    float large = 1.0f - mct_div(2.0f, mct_expf(a + a) + 1.0f);
    float y = a < 0.625f ? small : large;
    y = (mct_f2u(x) >> 31) ? -y : y;
    return x != x ? x : y;
}

/* sin(r) and cos(r) for |r| <= pi/4 (internal helpers of mct_sinf / mct_cosf). */
static inline float mct_sin_kernel(float r) {
    float r2 = r * r;
    float p = 3.43373860e-06f;
    p = p * r2 - 1.99013352e-04f;
    p = p * r2 + 8.33345018e-03f;
    p = p * r2 - 1.66666672e-01f;
    return r + r * r2 * p;
}
/* cos(r) for |r| <= pi/4 (internal helper). */
static inline float mct_cos_kernel(float r) {
    float r2 = r * r;
    float p = -2.36267880e-07f;
    p = p * r2 + 2.47690390e-05f;
    p = p * r2 - 1.38888275e-03f;
    p = p * r2 + 4.16666679e-02f;
    return 1.0f - (0.5f * r2 - r2 * r2 * p);
}

/* Reduce x by pi/2: returns r in [-pi/4, pi/4] and the quadrant in *q (accurate for |x| <= 8192). */
static inline float mct_reduce_pio2(float x, uint32_t *q) {
    float k = mct_rintf(x * 0.636619747f);
    float r = x - k * 1.57080078f;       /* pi/2 in three parts; the first two have */
    r = r - k * -4.45358455e-06f;        /* 12 significant bits, so k*part is exact */
    r = r - k * -8.70551631e-10f;
    *q = (uint32_t)mct_rint_to_i32(k) & 3u;
    return r;
}

/* Sine, within 2.5 ulp for |x| <= 8192 (absolute error near the zeros). */
static inline float mct_sinf(float x) {
    uint32_t q;
    float r = mct_reduce_pio2(x, &q);
    float s = mct_sin_kernel(r), c = mct_cos_kernel(r);
    float y = (q & 1u) ? c : s;
    y = (q & 2u) ? -y : y;
    return x != x || x == 0.0f ? x : y;      /* NaN, and sin(-0) = -0 */
}

/* Cosine, within 2.5 ulp for |x| <= 8192 (absolute error near the zeros). */
static inline float mct_cosf(float x) {
    uint32_t q;
    float r = mct_reduce_pio2(x, &q);
    float s = mct_sin_kernel(r), c = mct_cos_kernel(r);
    float y = (q & 1u) ? s : c;
    y = ((q + 1u) & 2u) ? -y : y;
    return x != x ? x : y;
}

/* Correctly rounded square root using integer arithmetic only (for targets whose libm may not round correctly). */
static inline float mct_sqrtf_soft(float x) {
    uint32_t ix = mct_f2u(x);
    if (x != x || x == 0.0f || ix == 0x7f800000u) return x;      /* NaN, +-0, +inf */
    if (ix & 0x80000000u) return mct_u2f(0x7fc00000u);           /* negative */
    int32_t e = (int32_t)(ix >> 23);
    uint32_t m = ix & 0x007fffffu;
    if (e == 0) { while (!(m & 0x00800000u)) { m <<= 1; e--; } e++; } /* subnormal */
    else m |= 0x00800000u;
    e -= 127;
    uint64_t v = (uint64_t)m << ((e & 1) ? 24 : 23);          /* even exponent left over */
    int32_t eh = (e - ((e & 1) ? 1 : 0)) / 2;
    uint64_t res = 0, bit = (uint64_t)1 << 48;
    while (bit > v) bit >>= 2;
    while (bit) {
        if (v >= res + bit) { v -= res + bit; res = (res >> 1) + bit; }
        else res >>= 1;
        bit >>= 2;
    }
    if (v > res) res++;                                        /* round to nearest */
    return mct_u2f((uint32_t)((eh + 127) << 23) + (uint32_t)(res - 0x00800000u));
}

/* Correctly rounded square root: the FPU's instruction where there is one (and -fno-math-errno lets
 * the compiler use it inline), otherwise mct_sqrtf_soft; both give the same bits. */
static inline float mct_sqrtf(float x) {
#if !defined(MCT_SOFT_SQRT) && defined(__NO_MATH_ERRNO__) && \
    (defined(__SSE__) || defined(__ARM_FP) || defined(__aarch64__) || defined(__riscv_flen))
    return __builtin_sqrtf(x);
#else
    return mct_sqrtf_soft(x);
#endif
}

#endif /* MCT_MATH_H */
