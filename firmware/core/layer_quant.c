/* layer_quant.c - the full-integer int8 ops: QUANT (f32 -> int8), DEQUANT (int8 -> f32), QDENSE (int8
 * dense with integer requantization), QLUT (int8 elementwise table), and the spatial ones QCONV2D, QDWCONV2D
 * (requantized as QDENSE), QMAXPOOL2D and QAVGPOOL2D, for frozen layers. Their constants and byte layouts are described at enum mct_op (mct.h).
 *
 * QDENSE and QLUT use integers only; QUANT and DEQUANT use one float multiply per element. Nothing here
 * can overflow a signed type or shift a negative number, whatever the blob holds: a sum of int8 products is
 * bounded by 65535 * 128 * 128 < 2^30, the biased accumulator saturates to 31 bits before the 64-bit
 * product of magnitudes with the 31-bit multiplier, shifts are clamped to [1, 62] and rounding works on
 * magnitudes.
 * Rounding is to nearest, ties away from zero, everywhere. */
#include "mct_layers.h"
#if (defined(__ARM_FEATURE_SIMD32) || defined(__ARM_FEATURE_SAT)) && defined(__ARM_ARCH_ISA_THUMB)
#include <arm_acle.h>
#endif
/* Cortex-M4/M7/M33 (the DSP extension, SMLAD) with GNU inline assembly: mct_dot8_rows sums four rows at a time. */
#if MCT_GNU_ASM && defined(__ARM_FEATURE_SIMD32) && defined(__ARM_ARCH_ISA_THUMB)
#define QDOT_DSP 1
#else
#define QDOT_DSP 0
#endif
/* AVR with its hardware multiplier and GNU inline assembly: the 8 x 8 products in assembly. */
#if MCT_GNU_ASM && defined(__AVR__) && defined(__AVR_HAVE_MUL__)
#define QDOT_AVR_MUL 1
#else
#define QDOT_AVR_MUL 0
#endif

/* A zero point read from the blob, clamped to the int8 range. */
static int32_t zero_point(const uint8_t *c) {
    int32_t z = mct_cload_i32(c);
    return z < -128 ? -128 : (z > 127 ? 127 : z);
}

/* Saturate to int8. */
static MCT_INLINE int8_t sat8(int32_t v) {
#if defined(__ARM_FEATURE_SAT)
    return (int8_t)__ssat(v, 8);
#else
    return (int8_t)(v < -128 ? -128 : (v > 127 ? 127 : v));
#endif
}

/* round(v) + zp saturated to int8, ties away from zero; NaN and -inf give -128, +inf 127. Where floats are in
 * hardware, with one float conversion, no float rounding step and no branch: t = trunc(2 v) (2 v is exact), and
 * round(v) is floor((t + 1) / 2) for t >= 0 and floor(t / 2) for t < 0 (as floor(|v| + 1/2) =
 * floor((floor(2 |v|) + 1) / 2)), the floor taken on t + 2049 - [t < 0] > 0 (|t| <= 1024) as an unsigned shift.
 * With soft floats (AVR, Cortex-M0/M3, rv32imc) the same integer from v's bits, with integer operations only:
 * for 1/2 <= |v| < 512, |v| = m 2^(e - 150) with m the 24-bit significand, so floor(2 |v|) = m >> (149 - e). */
#if defined(__SSE__) || defined(__ARM_FP) || defined(__aarch64__) || defined(__riscv_flen)
static MCT_INLINE int8_t quant1(float v, int32_t zp) {
    v = v > -512.0f ? v : -512.0f;          /* also NaN */
    v = v < 512.0f ? v : 512.0f;
    int32_t t = (int32_t)(v + v);
    uint32_t u = (uint32_t)(t + 2049) - ((uint32_t)t >> 31);
    return sat8((int32_t)(u >> 1) - 1024 + zp);
}
#else
static int8_t quant1(float v, int32_t zp) {
    uint32_t b;
    memcpy(&b, &v, 4);
    uint32_t mag = b & 0x7FFFFFFFu;
    int16_t r;
    if (mag > 0x7F800000u) return sat8(-512 + zp);      /* NaN */
    if (mag >= 0x44000000u) {                           /* |v| >= 512, inf included */
        r = 512;
    } else if (mag < 0x3F000000u) {                     /* |v| < 1/2 */
        r = 0;
    } else {                                            /* 126 <= e <= 135: shifts of 8, then 6 to 15 */
        uint16_t t = (uint16_t)(((mag & 0x7FFFFFu) | 0x800000u) >> 8), hi = (uint16_t)(mag >> 16);
        uint8_t k = (uint8_t)(141u - (uint8_t)(hi >> 7));
        if (k >= 8u) {
            t >>= 8;
            k = (uint8_t)(k - 8u);
        }
        r = (int16_t)((uint16_t)((t >> k) + 1u) >> 1);
    }
    return sat8((int32_t)((b >> 31) ? -r : r) + zp);
}
#endif

int mct_quantize_check(const mct_layer *L) { return L->n_in == L->n_out; }

void mct_quantize_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)L; (void)nb; (void)host;
    s->consts = 8u;   /* f32 inv_scale, i32 zp */
}

int mct_dequantize_check(const mct_layer *L) { return L->n_in == L->n_out; }

void mct_dequantize_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)L; (void)nb; (void)host;
    s->consts = 8u;   /* f32 scale, i32 zp */
}

int mct_qdense_check(const mct_layer *L) { return L->kind == 0; }

void mct_qdense_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    uint64_t I = L->n_in, O = L->n_out;
    (void)nb; (void)host;
    s->consts = 8u + 12u * O + ((I * O + 3u) & ~(uint64_t)3u);
}

int mct_qlut_check(const mct_layer *L) { return L->n_in == L->n_out; }

void mct_qlut_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)L; (void)nb; (void)host;
    s->consts = 256u;   /* int8 T[256] */
}

int8_t mct_quantize_value(const uint8_t *c, float x) { return quant1(x * mct_cload_f32(c), zero_point(c + 4)); }

/* (q - zp) scale: one int8 value back to f32. */
static MCT_INLINE float dequant1(int8_t q, int32_t zp, float scale) { return (float)((int32_t)q - zp) * scale; }

float mct_dequantize_value(const uint8_t *c, int8_t q) { return dequant1(q, zero_point(c + 4), mct_cload_f32(c)); }

void mct_quantize_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    uint32_t n = L->n_in;
    size_t stride = 4u * (size_t)mct_i8_floats(n);
    float inv = mct_cload_f32(c);
    int32_t zp = zero_point(c + 4);
    int8_t *q = (int8_t *)y;
    for (uint32_t s = 0; s < nb; s++) {
        const float *xs = x + (size_t)s * n;
        int8_t *qs = q + (size_t)s * stride;
        for (uint32_t i = 0; i < n; i++) qs[i] = quant1(xs[i] * inv, zp);
    }
}

void mct_dequantize_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    uint32_t n = L->n_in;
    size_t stride = 4u * (size_t)mct_i8_floats(n);
    float scale = mct_cload_f32(c);
    int32_t zp = zero_point(c + 4);
    const int8_t *q = (const int8_t *)x;
    for (uint32_t s = 0; s < nb; s++) {
        const int8_t *qs = q + (size_t)s * stride;
        float *ys = y + (size_t)s * n;
        for (uint32_t i = 0; i < n; i++) ys[i] = dequant1(qs[i], zp, scale);
    }
}

/* QDENSE's dot products: sums of x[i] * w[i] (w in const memory) over n <= 65535 values; |x[i] w[i]| <= 2^14, so
 * |sum| < 2^30, exact in int32 on every target, whatever the order. */
#if QDOT_DSP
/* The int8 values 1 and 3 of v sign-extended into two int16 halves (SXTB16 with its rotation, one instruction). */
static MCT_INLINE int16x2_t sxtb16_hi(uint32_t v) {
    int16x2_t r;
    __asm__("sxtb16 %0, %1, ror #8" : "=r"(r) : "r"(v));
    return r;
}

/* One row's next four products added to a: four weights loaded, sign-extended in pairs, two SMLAD. */
static MCT_INLINE int32_t smlad4(int32_t a, int16x2_t x02, int16x2_t x13, const uint8_t **w) {
    uint32_t v;
    memcpy(&v, *w, 4);
    *w += 4;
    return __smlad(x13, sxtb16_hi(v), __smlad(x02, __sxtb16(v), a));
}

/* Cortex-M4/M7/M33: the loads and sign extensions of x shared by the four rows (a missing row repeats the last
 * one, its sums unused), four bytes per load, two 16 x 16 products per SMLAD. The integer sums are exact (bound
 * above), so they equal the plain loop's and every other target's. */
void mct_dot8_rows(const int8_t *x, const uint8_t *w, uint32_t n, uint32_t stride, uint32_t rows, int32_t *acc) {
    const uint8_t *w0 = w, *w1 = rows > 1u ? w0 + stride : w0, *w2 = rows > 2u ? w1 + stride : w1;
    const uint8_t *w3 = rows > 3u ? w2 + stride : w2;
    const int8_t *end = x + (n & ~3u);
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    while (x != end) {
        uint32_t xv;
        memcpy(&xv, x, 4);
        x += 4;
        int16x2_t x02 = __sxtb16(xv), x13 = sxtb16_hi(xv);
        a0 = smlad4(a0, x02, x13, &w0);
        a1 = smlad4(a1, x02, x13, &w1);
        a2 = smlad4(a2, x02, x13, &w2);
        a3 = smlad4(a3, x02, x13, &w3);
    }
    for (n &= 3u; n; n--, x++) {
        a0 += *x * mct_cload_i8(w0++);
        a1 += *x * mct_cload_i8(w1++);
        a2 += *x * mct_cload_i8(w2++);
        a3 += *x * mct_cload_i8(w3++);
    }
    acc[0] = a0;
    if (rows > 1u) acc[1] = a1;
    if (rows > 2u) acc[2] = a2;
    if (rows > 3u) acc[3] = a3;
}
#else
/* a * b of two int8 as a 16-bit product: one 8 x 8 multiply (AVR's muls, which a compiler would widen to a
 * 16 x 16 -> 32 call inside a 32-bit sum). */
static MCT_INLINE int16_t mul8(int8_t a, int8_t b) {
#if QDOT_AVR_MUL
    int16_t r;
    __asm__("muls %1, %2\n\tmovw %0, r0\n\tclr __zero_reg__" : "=r"(r) : "d"(a), "d"(b) : "r0", "r1");
    return r;
#else
    return (int16_t)(a * b);
#endif
}

/* The dot product of x and one weight row w of n values; a function of its own so that its few accumulators get
 * registers on AVR. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
#if QDOT_AVR_MUL && defined(__AVR_HAVE_LPMX__)
/* One product into the sum (AVR dot8_avr): x with ld X+, w from flash with lpm Z+, muls, the product's sign bit
 * flipped, added to the 24-bit sum. */
#define MCT_DOT8_STEP                                                                                          \
    "ld %[a], %a[x]+\n\t"                                                                                      \
    "lpm %[b], %a[w]+\n\t"                                                                                     \
    "muls %[a], %[b]\n\t"                                                                                      \
    "eor r1, %[flip]\n\t"                                                                                      \
    "add %A[acc], r0\n\t"                                                                                      \
    "adc %B[acc], r1\n\t"                                                                                      \
    "adc %C[acc], %[zero]\n\t"
/* AVR: dot8 over k = 1 to 255 values, 12.5 cycles a value (two per loop pass). Each product p (-16256 <= p <=
 * 16384) is added as p + 2^15 (its sign bit flipped: 16 bits unsigned) into a 24-bit sum that starts at
 * 2^24 - k 2^15, so modulo 2^24 it ends at sum p, which lies in (-2^22, 2^22): sign-extended from 24 bits, it is
 * the same integer as the plain loop's (mul8), which is the reference. */
static int32_t dot8_avr(const int8_t *x, const uint8_t *w, uint8_t k) {
    /* 2^24 - k 2^15 = (512 - k) 2^15: byte 2 = (512 - k) / 2 = 128 + (256 - k) / 2, byte 1 = (k & 1) 2^7 */
    uint32_t acc = ((uint32_t)(uint8_t)(((uint8_t)(0u - k) >> 1) | 0x80u) << 16) | (k & 1u ? 0x8000u : 0u);
    uint8_t n = k, a, b, flip, zero;
    __asm__ volatile(
        "ldi %[flip], 0x80\n\t"
        "clr %[zero]\n\t"
        "sbrs %[n], 0\n\t"
        "rjmp 2f\n\t"
        MCT_DOT8_STEP
        "2:\n\t"
        "lsr %[n]\n\t"
        "breq 3f\n"
        "1:\n\t"
        MCT_DOT8_STEP
        MCT_DOT8_STEP
        "dec %[n]\n\t"
        "brne 1b\n"
        "3:\n\t"
        "clr __zero_reg__"
        : [acc] "+r"(acc), [x] "+x"(x), [w] "+z"(w), [n] "+r"(n), [a] "=&d"(a), [b] "=&d"(b), [flip] "=&d"(flip),
          [zero] "=&r"(zero)
        :
        : "memory");
    return (int32_t)((acc & 0xFFFFFFu) ^ 0x800000u) - 0x800000;   /* the sum's 24 bits, sign-extended */
}
#undef MCT_DOT8_STEP
#endif

static int32_t dot8(const int8_t *x, const uint8_t *w, uint32_t n) {
    int32_t acc = 0;
#if QDOT_AVR_MUL && defined(__AVR_HAVE_LPMX__)
    for (; n > 255u; n -= 255u, x += 255, w += 255) acc += dot8_avr(x, w, 255u);
    if (n) acc += dot8_avr(x, w, (uint8_t)n);
#else
    for (; n; n--) acc += mul8(*x++, mct_cload_i8(w++));
#endif
    return acc;
}

#endif

#if !QDOT_DSP
void mct_dot8_rows(const int8_t *x, const uint8_t *w, uint32_t n, uint32_t stride, uint32_t rows, int32_t *acc) {
    for (uint32_t k = 0; k < rows; k++) acc[k] = dot8(x, w + (size_t)k * stride, n);
}
#endif

#if defined(__AVR__)
/* a * b of two uint16 as a uint32: four 8 x 8 mul (the compiler calls a 32 x 32 library multiply for it). */
static MCT_INLINE uint32_t mul16u(uint16_t a, uint16_t b) {
#if QDOT_AVR_MUL
    uint32_t r;
    uint8_t z;
    __asm__("clr %[z]\n\t"
            "mul %A[a], %A[b]\n\t"
            "movw %A[r], r0\n\t"
            "mul %B[a], %B[b]\n\t"
            "movw %C[r], r0\n\t"
            "mul %A[a], %B[b]\n\t"
            "add %B[r], r0\n\t"
            "adc %C[r], r1\n\t"
            "adc %D[r], %[z]\n\t"
            "mul %B[a], %A[b]\n\t"
            "add %B[r], r0\n\t"
            "adc %C[r], r1\n\t"
            "adc %D[r], %[z]\n\t"
            "clr __zero_reg__"
            : [r] "=&r"(r), [z] "=&r"(z)
            : [a] "r"(a), [b] "r"(b));
    return r;
#else
    return (uint32_t)a * b;
#endif
}

/* v >> k for k < 32, whole bytes first (AVR shifts one bit per instruction, in a loop for a variable count). */
static uint32_t shr32(uint32_t v, uint8_t k) {
    if (k >= 16u) {
        v >>= 16;
        k = (uint8_t)(k - 16u);
    }
    if (k >= 8u) {
        v >>= 8;
        k = (uint8_t)(k - 8u);
    }
    return v >> k;
}
#endif

#if !defined(__AVR__)
/* requantize's magnitude for shifts n <= 32, from the whole 64-bit sum (ma * mm + 2^(n - 1) <= 2^62 + 2^61 <
 * 2^64), saturated to 2^30; a function of its own, out of the way of the usual case's registers. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static uint32_t requantize_low(uint32_t ma, uint32_t mm, uint32_t n) {
    uint64_t p = ((uint64_t)ma * mm + ((uint64_t)1 << (n - 1u))) >> n;
    return p > 0x40000000u ? 0x40000000u : (uint32_t)p;
}
#endif

/* round(a * mult / 2^shift), ties away from zero, for |a| < 2^31 and |mult| <= 2^31, saturated to +-2^30 (the
 * caller adds a zero point and clamps to int8, so that changes nothing), on the magnitudes. On AVR in 32-bit
 * pieces: the 64-bit product from four 16 x 16 -> 32 products, then the rounding and the shift on its two halves
 * (there a 64-bit multiply or shift is a slow library call); elsewhere in uint64. Both are exact, so every target
 * gets the same integer. */
/* TensorFlow Lite Micro's MultiplyByQuantizedMultiplier (gemmlowp's SaturatingRoundingDoublingHighMul, then
 * RoundingDivideByPOT) for a shift n in [1, 62], i.e. TFLite's shift 31 - n: two roundings, the first half up and
 * the second ties away from zero; the left shift saturates to int32, the result to +-2^30 (as requantize). Floor
 * division by a power of two is done on magnitudes (no shift of a negative number). */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static int32_t requantize_tflite(int32_t a, int32_t mult, int32_t shift) {
    int32_t n = shift < 1 ? 1 : (shift > 62 ? 62 : shift);
    int64_t x = a, h, q;
    uint32_t right = n > 31 ? (uint32_t)(n - 31) : 0u;
    if (n < 31) {
        x *= (int64_t)1 << (31 - n);
        x = x > INT32_MAX ? INT32_MAX : (x < INT32_MIN ? INT32_MIN : x);
    }
    if (x == INT32_MIN && mult == INT32_MIN) {
        h = INT32_MAX;
    } else {
        int64_t p = x * (int64_t)mult;
        h = (p + (p >= 0 ? ((int64_t)1 << 30) : (1 - ((int64_t)1 << 30)))) / ((int64_t)1 << 31);
    }
    if (right > 0u) {
        int64_t mask = ((int64_t)1 << right) - 1;
        int64_t fl = h >= 0 ? h / ((int64_t)1 << right) : -((-h + mask) / ((int64_t)1 << right));
        int64_t rem = h - fl * ((int64_t)1 << right);
        q = fl + (rem > (mask >> 1) + (h < 0 ? 1 : 0));
    } else {
        q = h;
    }
    return (int32_t)(q > 0x40000000 ? 0x40000000 : (q < -0x40000000 ? -0x40000000 : q));
}

#if QDOT_DSP && defined(__GNUC__)
__attribute__((noinline))   /* where SMLAD is, qdense_out handles the usual shifts inline (qout_usual) */
#endif
static int32_t requantize(int32_t a, int32_t mult, int32_t shift) {
    if (shift > 0 && (shift & MCT_QSHIFT_TFLITE)) return requantize_tflite(a, mult, shift & 0xff);
    uint32_t n = shift < 1 ? 1u : (shift > 62 ? 62u : (uint32_t)shift);
    uint32_t ma = a < 0 ? 0u - (uint32_t)a : (uint32_t)a, mm = mult < 0 ? 0u - (uint32_t)mult : (uint32_t)mult;
    uint32_t r;
#if defined(__AVR__)
    uint16_t a0 = (uint16_t)ma, a1 = (uint16_t)(ma >> 16), b0 = (uint16_t)mm, b1 = (uint16_t)(mm >> 16);
    uint32_t lo = mul16u(a0, b0), m1 = mul16u(a0, b1), m2 = mul16u(a1, b0), hi = mul16u(a1, b1);
    uint32_t t = lo + (m1 << 16);
    hi += (m1 >> 16) + (m2 >> 16) + (t < lo);
    lo = t + (m2 << 16);
    hi += lo < t;                                    /* hi:lo = ma * mm <= 2^62 */
    if (n > 32u) {   /* the usual case: as below off AVR, floor((hi + 2^(k - 1)) / 2^k) = (hi / 2^(k - 1) + 1) / 2 */
        r = (shr32(hi, (uint8_t)(n - 33u)) + 1u) >> 1;
        return ((a < 0) != (mult < 0)) ? -(int32_t)r : (int32_t)r;
    }
    if (n <= 32u) {                                  /* + 2^(n - 1): no carry out of hi (the sum is < 2^63) */
        t = lo + ((uint32_t)1 << (n - 1u));
        hi += t < lo;
        lo = t;
    } else {
        hi += (uint32_t)1 << (n - 33u);
    }
    uint32_t over;
    if (n < 32u) {
        r = (lo >> n) | (hi << (32u - n));
        over = hi >> n;
    } else {
        r = hi >> (n - 32u);
        over = 0;
    }
    if (over || r > 0x40000000u) r = 0x40000000u;
#else
    if (n > 32u) {
        /* the usual case (multipliers below 1/2): the rounding term 2^(n - 1) only reaches the high word h, and
         * floor((h + 2^(k - 1)) / 2^k) = (h / 2^(k - 1) + 1) / 2 for k = n - 32 >= 1, at most (2^30 + 1) / 2:
         * no saturation */
        r = (((uint32_t)(((uint64_t)ma * mm) >> 32) >> (n - 33u)) + 1u) >> 1;
    } else {
        r = requantize_low(ma, mm, n);
    }
#endif
    return ((a < 0) != (mult < 0)) ? -(int32_t)r : (int32_t)r;
}

#if QDOT_DSP
/* |v| as an unsigned integer (2^31 for INT32_MIN). */
static MCT_INLINE uint32_t qabs(int32_t v) { return v < 0 ? 0u - (uint32_t)v : (uint32_t)v; }

/* qdense_out's int8 for shift words n = 33 to 62 (multipliers below 1/2, as mcutrain's exports make them), the
 * usual case, given a = the saturated biased sum (__qadd), mm = |mult| and k = n - 33: requantize's n > 32 branch
 * with nothing to clamp (-2^31 counts as -(2^31 - 1), as qdense_out makes it), so the same integer. */
static MCT_INLINE int8_t qout_usual(int32_t a, int32_t mult, uint32_t mm, uint32_t k, int32_t zy) {
    uint32_t ma = qabs(a);
    ma -= ma >> 31;
    uint32_t r = (((uint32_t)(((uint64_t)ma * mm) >> 32) >> k) + 1u) >> 1;
    return sat8(((a ^ mult) < 0 ? -(int32_t)r : (int32_t)r) + zy);
}
#endif

/* One output o of QDENSE (constants c, n_out O) from its integer dot product xw: bias added (saturated to
 * +-(2^31 - 1)), requantized, zero point zy added, saturated to int8. */
#if defined(__AVR__)
__attribute__((noinline))   /* its own registers: inlined, its 32-bit values spill to the stack */
#else
MCT_INLINE
#endif
static int8_t qdense_out(const uint8_t *c, uint32_t O, uint32_t o, int32_t zy, int32_t xw) {
    const uint8_t *bias = c + 8u + 4u * o;
    int32_t bo = mct_cload_i32(bias), a;
#if QDOT_DSP
    const int32_t mult = mct_cload_i32(bias + 4u * O), shift = mct_cload_i32(bias + 8u * O);
    a = __qadd(bo, xw);                          /* saturates to [-2^31, 2^31 - 1]: the same sum, and ... */
    if ((uint32_t)shift - 33u <= 29u) return qout_usual(a, mult, qabs(mult), (uint32_t)shift - 33u, zy);
    a += a == INT32_MIN;                         /* ... -2^31 becomes -(2^31 - 1) as below */
    return sat8(requantize(a, mult, shift) + zy);
#else
    if (xw >= 0) a = bo > INT32_MAX - xw ? INT32_MAX : (bo + xw < -INT32_MAX ? -INT32_MAX : bo + xw);
    else a = bo < -INT32_MAX - xw ? -INT32_MAX : bo + xw;
    return sat8(requantize(a, mct_cload_i32(bias + 4u * O), mct_cload_i32(bias + 8u * O)) + zy);
#endif
}

void mct_qdense_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    uint32_t I = L->n_in, O = L->n_out;
    size_t sx = 4u * (size_t)mct_i8_floats(I), sy = 4u * (size_t)mct_i8_floats(O);
    int32_t zy = zero_point(c + 4);   /* (zx at c is folded into the bias by the exporter: not read) */
    const uint8_t *w = c + 8u + 12u * O;
    for (uint32_t s = 0; s < nb; s++) {
        const int8_t *xs = (const int8_t *)x + (size_t)s * sx;
        int8_t *ys = (int8_t *)y + (size_t)s * sy;
#if QDOT_DSP
        for (uint32_t o = 0; o < O; o += MCT_DOT8_ROWS) {
            uint32_t r = O - o < MCT_DOT8_ROWS ? O - o : MCT_DOT8_ROWS;
            int32_t xw[MCT_DOT8_ROWS];
            mct_dot8_rows(xs, w + (size_t)o * I, I, I, r, xw);
            for (uint32_t k = 0; k < r; k++) ys[o + k] = qdense_out(c, O, o + k, zy, xw[k]);
        }
#else   /* one row at a time: nothing is shared between rows there */
        for (uint32_t o = 0; o < O; o++) ys[o] = qdense_out(c, O, o, zy, dot8(xs, w + (size_t)o * I, I));
#endif
    }
}

void mct_qlut_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    uint32_t n = L->n_in;
    size_t stride = 4u * (size_t)mct_i8_floats(n);
    for (uint32_t s = 0; s < nb; s++) {
        const int8_t *xs = (const int8_t *)x + (size_t)s * stride;
        int8_t *ys = (int8_t *)y + (size_t)s * stride;
        for (uint32_t i = 0; i < n; i++) ys[i] = mct_cload_i8(c + (uint8_t)(xs[i] + 128));
    }
}

/* ---- the spatial full-integer ops (QCONV2D, QDWCONV2D, QMAXPOOL2D, QAVGPOOL2D): plain reference kernels, every
 * window walked by MCT_FOR_WINDOWS as the f32 ops walk theirs, channels last; x and y are int8 tensors whose samples
 * start every 4 ceil(n / 4) bytes. The sums of (x - zx) w are exact in int32: |x - zx| <= 255, |w| <= 128, so a term
 * is below 2^15 and at most 65535 of them (the checks) stay below 2^31. */

int mct_qconv2d_check(const mct_layer *L) {
    return L->kind == 0 && mct_spatial_check(L) && (uint32_t)L->kh * L->kw * L->c_in <= 65535u;
}

void mct_qconv2d_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    uint64_t nw = (uint64_t)L->kh * L->kw * L->c_in * L->c_out;
    (void)nb; (void)host;
    s->consts = 8u + 12u * (uint64_t)L->c_out + ((nw + 3u) & ~(uint64_t)3u);
}

int mct_qdwconv2d_check(const mct_layer *L) {
    return L->kind == 0 && L->c_in && L->c_out % L->c_in == 0 && mct_spatial_check(L) &&
           (uint32_t)L->kh * L->kw <= 65535u;
}

void mct_qdwconv2d_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    uint64_t nw = (uint64_t)L->kh * L->kw * L->c_out;
    (void)nb; (void)host;
    s->consts = 8u + 12u * (uint64_t)L->c_out + ((nw + 3u) & ~(uint64_t)3u);
}

int mct_qmaxpool2d_check(const mct_layer *L) { return L->kind == 0 && L->c_in == L->c_out && mct_spatial_check(L); }

void mct_qmaxpool2d_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)L; (void)nb; (void)host; (void)s;
}

int mct_qavgpool2d_check(const mct_layer *L) {
    return L->kind == 0 && L->c_in == L->c_out && mct_spatial_check(L) && (uint32_t)L->kh * L->kw <= 65535u;
}

void mct_qavgpool2d_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)L; (void)nb; (void)host; (void)s;
}

/* (x - zx) w as a 16-bit product (|x - zx| <= 255, |w| <= 128: no overflow, one 16-bit multiply on AVR). */
static MCT_INLINE int16_t qterm(int8_t x, int16_t zx, int8_t w) { return (int16_t)((int16_t)(x - zx) * w); }

#if QDOT_DSP
/* Window values (kh kw c_in) the Cortex-M4/M7/M33 QCONV2D gathers on the stack (2 bytes each); larger windows take
 * the reference loop. */
#define QCOL_MAX 256u

/* acc[k] = sum_{i < n} col[i] * w[k stride + i] for k < rows (1 to 4), where col holds each group of four values in
 * the order (0, 2, 1, 3), the pairs SXTB16 makes of four weights, and the last n % 4 in order: two SMLAD per four
 * products, the col loads shared by the four rows. The sums are exact (|col| <= 255, |w| <= 128, n <= 65535), so
 * they equal the plain loop's in any order. */
static void dot16_rows(const int16_t *col, const uint8_t *w, uint32_t n, uint32_t stride, uint32_t rows,
                       int32_t *acc) {
    const uint8_t *w0 = w, *w1 = rows > 1u ? w0 + stride : w0, *w2 = rows > 2u ? w1 + stride : w1;
    const uint8_t *w3 = rows > 3u ? w2 + stride : w2;
    const int16_t *end = col + (n & ~3u);
    int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    while (col != end) {
        int16x2_t c02, c13;
        memcpy(&c02, col, 4);
        memcpy(&c13, col + 2, 4);
        col += 4;
        a0 = smlad4(a0, c02, c13, &w0);
        a1 = smlad4(a1, c02, c13, &w1);
        a2 = smlad4(a2, c02, c13, &w2);
        a3 = smlad4(a3, c02, c13, &w3);
    }
    for (n &= 3u; n; n--, col++) {
        a0 += *col * mct_cload_i8(w0++);
        a1 += *col * mct_cload_i8(w1++);
        a2 += *col * mct_cload_i8(w2++);
        a3 += *col * mct_cload_i8(w3++);
    }
    acc[0] = a0;
    if (rows > 1u) acc[1] = a1;
    if (rows > 2u) acc[2] = a2;
    if (rows > 3u) acc[3] = a3;
}

/* One window's values x - zx of kernel rows ky_lo to ky_hi - 1 in natural order, 0 for a padding tap (which adds
 * nothing, as the reference skips it), then each group of four reordered (0, 2, 1, 3) for dot16_rows. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void qgather(const mct_layer *L, const int8_t *xs, uint32_t oy, uint32_t ox, const uint32_t *win, int16_t zx,
                    uint32_t ky_lo, uint32_t ky_hi, int16_t *col) {
    const uint32_t Ci = L->c_in, KW = L->kw, K4 = ((ky_hi - ky_lo) * KW * Ci) & ~3u;
    const uint32_t before = win[2] * Ci, run = (win[3] - win[2]) * Ci, after = (KW - win[3]) * Ci;
    const int16x2_t zz = (int16x2_t)(((uint32_t)(uint16_t)zx << 16) | (uint16_t)zx);
    int16_t *p = col;
    for (uint32_t ky = ky_lo; ky < ky_hi; ky++) {
        if (ky < win[0] || ky >= win[1]) {   /* a padding row */
            for (uint32_t j = 0; j < KW * Ci; j++) *p++ = 0;
            continue;
        }
        /* the taps of a row inside the input are one run of consecutive values (channels last) */
        const int8_t *xp = xs + mct_tap_at(L, oy, ox, ky, win[2]);
        for (uint32_t j = 0; j < before; j++) *p++ = 0;
        uint32_t j = 0;
        for (; j + 4u <= run; j += 4u, p += 4) {   /* four at a time: two SXTB16, two SSUB16 */
            uint32_t v;
            memcpy(&v, xp + j, 4);
            int16x2_t e = __ssub16(__sxtb16(v), zz), o = __ssub16(sxtb16_hi(v), zz);   /* (0, 2), (1, 3) */
            p[0] = (int16_t)e;
            p[1] = (int16_t)o;
            p[2] = (int16_t)(e >> 16);
            p[3] = (int16_t)(o >> 16);
        }
        for (; j < run; j++) *p++ = (int16_t)(xp[j] - zx);
        for (j = 0; j < after; j++) *p++ = 0;
    }
    for (uint32_t q = 0; q < K4; q += 4u) {
        int16_t t = col[q + 1u];
        col[q + 1u] = col[q + 2u];
        col[q + 2u] = t;
    }
}

/* The c_out outputs of one window from its gathered values: four channels at a time, then requantized. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void qconv_outputs(const uint8_t *c, const int16_t *col, uint32_t K, uint32_t Co, int32_t zy, int8_t *yo) {
    const uint8_t *w = c + 8u + 12u * Co;
    for (uint32_t o = 0; o < Co; o += 4u) {
        const uint32_t r = Co - o < 4u ? Co - o : 4u;
        int32_t acc[4];
        dot16_rows(col, w + (size_t)o * K, K, K, r, acc);
        for (uint32_t q = 0; q < r; q++) yo[o + q] = qdense_out(c, Co, o + q, zy, acc[q]);
    }
}

/* The inner loops of the pointwise QCONV2D and of QDWCONV2D with multiplier 1 are inline assembly holding 13
 * registers: only where the compiler optimizes (at -O0 it cannot spare them; those layers take the C paths). */
#if defined(__OPTIMIZE__)
#define QASM_DSP 1
#else
#define QASM_DSP 0
#endif

#if QASM_DSP
/* Windows of up to QPAIR_MAX values (kh kw c_in) the Cortex-M4/M7/M33 QCONV2D takes two at a time (qconv2d_pairs):
 * their values on the stack as int32 words (4 bytes each), plus one window gathered as int16. */
#define QPAIR_MAX 160u   /* ResNet-8's 3x3 convolutions of 16 channels (144 values) included */

/* Output o of two pixels from their sums xa and xb (*yb not written when yb is NULL): the channel's constants read
 * and unpacked once for both, the same integers as qdense_out. */
static MCT_INLINE void qpair_out(const uint8_t *c, uint32_t O, uint32_t o, int32_t zy, int32_t xa, int32_t xb,
                                 int8_t *ya, int8_t *yb) {
    const uint8_t *bias = c + 8u + 4u * o;
    const int32_t bo = mct_cload_i32(bias), mult = mct_cload_i32(bias + 4u * O);
    const uint32_t k = (uint32_t)mct_cload_i32(bias + 8u * O) - 33u;
    if (k > 29u) {
        *ya = qdense_out(c, O, o, zy, xa);
        if (yb) *yb = qdense_out(c, O, o, zy, xb);
        return;
    }
    const uint32_t mm = qabs(mult);
    const int8_t ra = qout_usual(__qadd(bo, xa), mult, mm, k, zy), rb = qout_usual(__qadd(bo, xb), mult, mm, k, zy);
    *ya = ra;   /* both computed before the stores (which might alias the constants for the compiler) */
    if (yb) *yb = rb;
}

/* The c_out outputs of two windows a and b (*yb not written when yb is NULL) of K values each, given as col: for
 * each group q < K / 4 of four values v0..v3 the words (a v0, a v2) (a v1, a v3) (b v0, b v2) (b v1, b v3), the pairs
 * SXTB16 makes of four weights; then tail: a's last K % 4 values at 0, b's at 4. Two output channels at a time, so
 * that each weight word serves both windows and each col word both channels: per group 2 LDRD, 2 LDR, 4 SXTB16 and
 * 8 SMLAD for 16 products. The sums are exact (|value| <= 255, |w| <= 128, K <= 65535), so they equal the plain
 * loop's in any order: the same outputs. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void qpair_outputs(const uint8_t *c, const uint32_t *col, const int16_t *tail, uint32_t K, uint32_t Co,
                          int32_t zy, int8_t *ya, int8_t *yb) {
    const uint8_t *w = c + 8u + 12u * Co;
    const uint32_t K4 = K & ~3u;
    const uint32_t *end = col + K4;
    for (uint32_t o = 0; o < Co; o += 2u) {
        const uint8_t *w0 = w + (size_t)o * K, *w1 = o + 1u < Co ? w0 + K : w0;
        int32_t a0 = 0, a1 = 0, b0 = 0, b1 = 0;   /* window a, b; channel o, o + 1 */
        const uint32_t *cp = col;
        const uint8_t *v0 = w0, *v1 = w1;
        if (cp != end) {   /* in assembly (in C the compiler spills); 13 registers */
            uint32_t c0, c1, c2, c3, u, e;
            __asm__("1:\n\t"
                    "ldrd %[c0], %[c1], [%[cp]], #8\n\t"
                    "ldrd %[c2], %[c3], [%[cp]], #8\n\t"
                    "ldr %[u], [%[v0]], #4\n\t"
                    "sxtb16 %[e], %[u]\n\t"
                    "smlad %[a0], %[c0], %[e], %[a0]\n\t"
                    "smlad %[b0], %[c2], %[e], %[b0]\n\t"
                    "sxtb16 %[e], %[u], ror #8\n\t"
                    "smlad %[a0], %[c1], %[e], %[a0]\n\t"
                    "smlad %[b0], %[c3], %[e], %[b0]\n\t"
                    "ldr %[u], [%[v1]], #4\n\t"
                    "sxtb16 %[e], %[u]\n\t"
                    "smlad %[a1], %[c0], %[e], %[a1]\n\t"
                    "smlad %[b1], %[c2], %[e], %[b1]\n\t"
                    "sxtb16 %[e], %[u], ror #8\n\t"
                    "smlad %[a1], %[c1], %[e], %[a1]\n\t"
                    "smlad %[b1], %[c3], %[e], %[b1]\n\t"
                    "ldr %[e], %[end]\n\t"
                    "cmp %[cp], %[e]\n\t"
                    "bne 1b"
                    : [a0] "+r"(a0), [a1] "+r"(a1), [b0] "+r"(b0), [b1] "+r"(b1), [cp] "+r"(cp), [v0] "+r"(v0),
                      [v1] "+r"(v1), [c0] "=&r"(c0), [c1] "=&r"(c1), [c2] "=&r"(c2), [c3] "=&r"(c3), [u] "=&r"(u),
                      [e] "=&r"(e)
                    : [end] "m"(end), "m"(*(const uint32_t(*)[QPAIR_MAX])col)
                    : "cc");
        }
        for (uint32_t i = K4, j = 0; i < K; i++, j++) {
            const int32_t u0 = mct_cload_i8(w0 + i), u1 = mct_cload_i8(w1 + i);
            a0 += tail[j] * u0;
            a1 += tail[j] * u1;
            b0 += tail[j + 4u] * u0;
            b1 += tail[j + 4u] * u1;
        }
        qpair_out(c, Co, o, zy, a0, b0, ya + o, yb ? yb + o : NULL);
        if (o + 1u < Co) qpair_out(c, Co, o + 1u, zy, a1, b1, ya + o + 1u, yb ? yb + o + 1u : NULL);
    }
}

/* Window slot (0: a, 1: b) of qpair_outputs' col and tail for a pointwise (1x1, stride 1, no padding) QCONV2D: the
 * pixel's K = c_in values x - zx (SXTB16, SSUB16), no gathering. */
static void qpair_fill_pixel(const int8_t *xp, uint32_t K, int16_t zx, uint32_t *col, int16_t *tail, uint32_t slot) {
    const int16x2_t zz = (int16x2_t)(((uint32_t)(uint16_t)zx << 16) | (uint16_t)zx);
    const uint32_t K4 = K & ~3u;
    for (uint32_t i = 0; i < K4; i += 4u) {
        uint32_t v;
        memcpy(&v, xp + i, 4);
        col[i + 2u * slot] = (uint32_t)__ssub16(__sxtb16(v), zz);
        col[i + 2u * slot + 1u] = (uint32_t)__ssub16(sxtb16_hi(v), zz);
    }
    for (uint32_t i = K4; i < K; i++) tail[4u * slot + i - K4] = (int16_t)(xp[i] - zx);
}

/* Window slot of qpair_outputs' col and tail for output pixel p (row-major) of any QCONV2D: gathered by qgather
 * into g (its groups already in SXTB16's order), then copied word by word. */
static void qpair_fill_window(const mct_layer *L, const int8_t *xs, uint32_t p, int16_t zx, int16_t *g, uint32_t *col,
                              int16_t *tail, uint32_t slot) {
    const uint32_t K = (uint32_t)L->kh * L->kw * L->c_in, K4 = K & ~3u, oy = p / L->w_out, ox = p - oy * L->w_out;
    uint32_t win[4];
    mct_window(oy, L->sh, L->pt, L->kh, L->h_in, &win[0], &win[1]);
    mct_window(ox, L->sw, L->pl, L->kw, L->w_in, &win[2], &win[3]);
    qgather(L, xs, oy, ox, win, zx, 0, L->kh, g);
    for (uint32_t i = 0; i < K4; i += 4u) memcpy(col + i + 2u * slot, g + i, 8);
    for (uint32_t i = K4; i < K; i++) tail[4u * slot + i - K4] = g[i];
}

/* QCONV2D on Cortex-M4/M7/M33 for windows of up to QPAIR_MAX values: the output pixels two at a time (an odd last
 * one with itself, its second outputs not written), their values placed for qpair_outputs (a pointwise layer's
 * straight from x, any other's through qgather). */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void qconv2d_pairs(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    const uint32_t Co = L->c_out, K = (uint32_t)L->kh * L->kw * L->c_in, P = (uint32_t)L->h_out * L->w_out;
    const size_t sx = 4u * (size_t)mct_i8_floats(L->n_in), sy = 4u * (size_t)mct_i8_floats(L->n_out);
    const int16_t zx = (int16_t)zero_point(c);
    const int32_t zy = zero_point(c + 4);
    const int pointwise = L->kh == 1u && L->kw == 1u && L->sh == 1u && L->sw == 1u && L->pt == 0u && L->pl == 0u &&
                          L->h_out == L->h_in && L->w_out == L->w_in;
    uint32_t col[QPAIR_MAX];   /* (K / 4) 4 words */
    int16_t tail[8], g[QPAIR_MAX];
    for (uint32_t s = 0; s < nb; s++) {
        const int8_t *xs = (const int8_t *)x + (size_t)s * sx;
        int8_t *ys = (int8_t *)y + (size_t)s * sy;
        for (uint32_t p = 0; p < P; p += 2u) {
            const uint32_t q = p + 1u < P ? p + 1u : p;   /* window b */
            if (pointwise) {
                qpair_fill_pixel(xs + (size_t)p * K, K, zx, col, tail, 0u);
                qpair_fill_pixel(xs + (size_t)q * K, K, zx, col, tail, 1u);
            } else {
                qpair_fill_window(L, xs, p, zx, g, col, tail, 0u);
                qpair_fill_window(L, xs, q, zx, g, col, tail, 1u);
            }
            qpair_outputs(c, col, tail, K, Co, zy, ys + (size_t)p * Co, q != p ? ys + (size_t)q * Co : NULL);
        }
    }
}
#endif

/* QCONV2D on Cortex-M4/M7/M33: each window's values gathered once (qgather), then four output channels at a time
 * with SMLAD. The same exact integer sums as the reference, so the same outputs. */
#if defined(__GNUC__)
__attribute__((noinline))   /* its own frame: not added to qconv2d_pairs' in the caller */
#endif
static void qconv2d_dsp(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    const uint32_t Co = L->c_out, K = (uint32_t)L->kh * L->kw * L->c_in;
    const size_t sx = 4u * (size_t)mct_i8_floats(L->n_in), sy = 4u * (size_t)mct_i8_floats(L->n_out);
    const int16_t zx = (int16_t)zero_point(c);
    const int32_t zy = zero_point(c + 4);
    uint32_t colw[QCOL_MAX / 2u];   /* word aligned */
    int16_t *col = (int16_t *)(void *)colw;
    MCT_FOR_WINDOWS(L, nb, {
        const uint32_t win[4] = {ky0, ky1, kx0, kx1};
        qgather(L, (const int8_t *)x + (size_t)s * sx, oy, ox, win, zx, 0, L->kh, col);
        qconv_outputs(c, col, K, Co, zy, (int8_t *)y + (size_t)s * sy + ((size_t)oy * L->w_out + ox) * Co);
    })
}
#endif

#if QDOT_DSP
/* Output channels the Cortex-M4/M7/M33 QCONV2D of a window too large to gather at once (kh kw c_in > QCOL_MAX) sums
 * on the stack (int32, 256 B). */
#define QCONV_ROWS_CO 64u

/* QCONV2D on Cortex-M4/M7/M33 for windows of more than QCOL_MAX values whose kernel rows (kw c_in) fit: the window
 * gathered as many whole kernel rows at a time as QCOL_MAX holds (rows of padding only skipped), each part summed
 * into every output channel's int32 by dot16_rows, then requantized. The parts add up to the same exact integer sums
 * as the reference's, so the same outputs. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void qconv2d_rows_dsp(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    const uint32_t Co = L->c_out, KH = L->kh, row = (uint32_t)L->kw * L->c_in, K = KH * row, R = QCOL_MAX / row;
    const size_t sx = 4u * (size_t)mct_i8_floats(L->n_in), sy = 4u * (size_t)mct_i8_floats(L->n_out);
    const int16_t zx = (int16_t)zero_point(c);
    const int32_t zy = zero_point(c + 4);
    const uint8_t *w = c + 8u + 12u * Co;
    uint32_t colw[QCOL_MAX / 2u];   /* word aligned */
    int16_t *col = (int16_t *)(void *)colw;
    int32_t acc[QCONV_ROWS_CO];
    MCT_FOR_WINDOWS(L, nb, {
        const uint32_t win[4] = {ky0, ky1, kx0, kx1};
        for (uint32_t o = 0; o < Co; o++) acc[o] = 0;
        for (uint32_t r0 = ky0; r0 < ky1; r0 += R) {   /* the rows inside the input, R at a time */
            const uint32_t r1 = ky1 - r0 < R ? ky1 : r0 + R, n = (r1 - r0) * row;
            qgather(L, (const int8_t *)x + (size_t)s * sx, oy, ox, win, zx, r0, r1, col);
            for (uint32_t o = 0; o < Co; o += 4u) {
                const uint32_t r = Co - o < 4u ? Co - o : 4u;
                int32_t part[4];
                dot16_rows(col, w + (size_t)o * K + (size_t)r0 * row, n, K, r, part);
                for (uint32_t q = 0; q < r; q++) acc[o + q] += part[q];
            }
        }
        int8_t *yo = (int8_t *)y + (size_t)s * sy + ((size_t)oy * L->w_out + ox) * Co;
        for (uint32_t o = 0; o < Co; o++) yo[o] = qdense_out(c, Co, o, zy, acc[o]);
    })
}
#endif

void mct_qconv2d_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
#if QDOT_DSP
#if QASM_DSP
    if ((uint32_t)L->kh * L->kw * L->c_in <= QPAIR_MAX) {
        qconv2d_pairs(L, c, x, y, nb);
        return;
    }
#endif
    if ((uint32_t)L->kh * L->kw * L->c_in <= QCOL_MAX) {
        qconv2d_dsp(L, c, x, y, nb);
        return;
    }
    if ((uint32_t)L->kw * L->c_in <= QCOL_MAX && L->c_out <= QCONV_ROWS_CO) {
        qconv2d_rows_dsp(L, c, x, y, nb);
        return;
    }
#endif
    const uint32_t Ci = L->c_in, Co = L->c_out, KW = L->kw, row = (uint32_t)L->kh * KW * Ci;
    const size_t sx = 4u * (size_t)mct_i8_floats(L->n_in), sy = 4u * (size_t)mct_i8_floats(L->n_out);
    const int16_t zx = (int16_t)zero_point(c);
    const int32_t zy = zero_point(c + 4);
    const uint8_t *w = c + 8u + 12u * Co;
    MCT_FOR_WINDOWS(L, nb, {
        const int8_t *xs = (const int8_t *)x + (size_t)s * sx;
        int8_t *yo = (int8_t *)y + (size_t)s * sy + ((size_t)oy * L->w_out + ox) * Co;
        for (uint32_t o = 0; o < Co; o++) {
            const uint8_t *wo = w + (size_t)o * row;
            int32_t acc = 0;
            for (uint32_t ky = ky0; ky < ky1; ky++)
                for (uint32_t kx = kx0; kx < kx1; kx++) {
                    const int8_t *xp = xs + mct_tap_at(L, oy, ox, ky, kx);
                    const uint8_t *wp = wo + ((size_t)ky * KW + kx) * Ci;
                    for (uint32_t ci = 0; ci < Ci; ci++) acc += qterm(xp[ci], zx, mct_cload_i8(wp + ci));
                }
            yo[o] = qdense_out(c, Co, o, zy, acc);
        }
    })
}

#if QDOT_DSP
/* Output channels the Cortex-M4/M7/M33 QDWCONV2D sums at once (int32 sums on the stack, 256 B). */
#define QDW_BLOCK 64u

/* Window taps (kh kw) up to which the Cortex-M4/M7/M33 QDWCONV2D with depth multiplier 1 keeps the window's tap
 * offsets on the stack and four channels' sums in registers. */
#define QDW_TAPS 16u

/* One window of a QDWCONV2D with depth multiplier 1 (win = ky0, ky1, kx0, kx1): the taps' offsets computed once,
 * then four channels at a time over all taps (a word of x and of the weights per tap, SXTB16 into pairs, SSUB16 for
 * zx, SMLABB / SMLATT per product), the last c % 4 channels one by one. */
#if defined(__GNUC__)
__attribute__((noinline))
#endif
static void qdw1_window(const mct_layer *L, const uint8_t *c, const int8_t *xs, int8_t *yo, uint32_t oy, uint32_t ox,
                        const uint32_t *win, int16_t zx, int32_t zy) {
    const uint32_t C = L->c_out, KW = L->kw;
    const int16x2_t zz = (int16x2_t)(((uint32_t)(uint16_t)zx << 16) | (uint16_t)zx);
    const uint8_t *w = c + 8u + 12u * C;
    uint32_t off[2u * QDW_TAPS];   /* per tap: the offset in x, then in the weights */
    uint32_t nt = 0, ch = 0;
    for (uint32_t ky = win[0]; ky < win[1]; ky++)
        for (uint32_t kx = win[2]; kx < win[3]; kx++, nt++) {
            off[2u * nt] = (uint32_t)mct_tap_at(L, oy, ox, ky, kx);
            off[2u * nt + 1u] = ((uint32_t)ky * KW + kx) * C;
        }
    for (; ch + 4u <= C; ch += 4u) {
        int32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
#if QASM_DSP
        /* per tap: its two offsets (LDRD), a word of x and of the weights, SXTB16 into pairs (0, 2) and (1, 3),
         * SSUB16 for zx, SMLABB / SMLATT per product (in C the compiler spills) */
        const uint32_t *op = off, *end = off + 2u * nt;
        const int8_t *xb = xs + ch;
        const uint8_t *wb = w + ch;
        uint32_t xv, wv, t, u;
        if (nt)   /* (a window has a tap inside the input, mct_spatial_check) */
            __asm__("1:\n\t"
                "ldrd %[t], %[u], [%[op]], #8\n\t"
                "ldr %[xv], [%[xb], %[t]]\n\t"
                "ldr %[wv], [%[wb], %[u]]\n\t"
                "sxtb16 %[t], %[xv]\n\t"
                "ssub16 %[t], %[t], %[zz]\n\t"
                "sxtb16 %[u], %[wv]\n\t"
                "smlabb %[a0], %[t], %[u], %[a0]\n\t"
                "smlatt %[a2], %[t], %[u], %[a2]\n\t"
                "sxtb16 %[t], %[xv], ror #8\n\t"
                "ssub16 %[t], %[t], %[zz]\n\t"
                "sxtb16 %[u], %[wv], ror #8\n\t"
                "smlabb %[a1], %[t], %[u], %[a1]\n\t"
                "smlatt %[a3], %[t], %[u], %[a3]\n\t"
                "cmp %[op], %[end]\n\t"
                "bne 1b"
                : [a0] "+r"(a0), [a1] "+r"(a1), [a2] "+r"(a2), [a3] "+r"(a3), [op] "+r"(op), [xv] "=&r"(xv),
                  [wv] "=&r"(wv), [t] "=&r"(t), [u] "=&r"(u)
                : [xb] "r"(xb), [wb] "r"(wb), [zz] "r"(zz), [end] "r"(end),
                  "m"(*(const uint32_t(*)[2u * QDW_TAPS])off)
                : "cc");
#else
        for (uint32_t t = 0; t < nt; t++) {
            uint32_t xv, wv;
            memcpy(&xv, xs + off[2u * t] + ch, 4);
            memcpy(&wv, w + off[2u * t + 1u] + ch, 4);
            const int16x2_t xe = __ssub16(__sxtb16(xv), zz), xo = __ssub16(sxtb16_hi(xv), zz); /* (0, 2), (1, 3) */
            const int16x2_t we = __sxtb16(wv), wo = sxtb16_hi(wv);
            a0 = __smlabb(xe, we, a0);
            a1 = __smlabb(xo, wo, a1);
            a2 = __smlatt(xe, we, a2);
            a3 = __smlatt(xo, wo, a3);
        }
#endif
        const int8_t r0 = qdense_out(c, C, ch, zy, a0), r1 = qdense_out(c, C, ch + 1u, zy, a1);
        const int8_t r2 = qdense_out(c, C, ch + 2u, zy, a2), r3 = qdense_out(c, C, ch + 3u, zy, a3);
        yo[ch] = r0;   /* the four computed before the stores (which might alias the constants for the compiler) */
        yo[ch + 1u] = r1;
        yo[ch + 2u] = r2;
        yo[ch + 3u] = r3;
    }
    for (; ch < C; ch++) {
        int32_t acc = 0;
        for (uint32_t t = 0; t < nt; t++)
            acc += qterm(xs[off[2u * t] + ch], zx, mct_cload_i8(w + off[2u * t + 1u] + ch));
        yo[ch] = qdense_out(c, C, ch, zy, acc);
    }
}

/* QDWCONV2D on Cortex-M4/M7/M33 (depth multiplier m <= QDW_BLOCK): with m 1 and windows of up to QDW_TAPS taps,
 * qdw1_window; otherwise per window a block of output channels summed tap by tap with the channels innermost
 * (consecutive in x and in the weights). The same exact integer sums as the reference, so the same outputs. */
static void qdwconv2d_dsp(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    const uint32_t Ci = L->c_in, Co = L->c_out, KW = L->kw, m = Co / Ci, bci = QDW_BLOCK / m;
    const size_t sx = 4u * (size_t)mct_i8_floats(L->n_in), sy = 4u * (size_t)mct_i8_floats(L->n_out);
    const int16_t zx = (int16_t)zero_point(c);
    const int32_t zy = zero_point(c + 4);
    const uint8_t *w = c + 8u + 12u * Co;
    const int one = m == 1u && (uint32_t)L->kh * L->kw <= QDW_TAPS;
    int32_t acc[QDW_BLOCK];
    MCT_FOR_WINDOWS(L, nb, {
        const int8_t *xs = (const int8_t *)x + (size_t)s * sx;
        int8_t *yo = (int8_t *)y + (size_t)s * sy + ((size_t)oy * L->w_out + ox) * Co;
        const uint32_t win[4] = {ky0, ky1, kx0, kx1};
        if (one) {
            qdw1_window(L, c, xs, yo, oy, ox, win, zx, zy);
            continue;
        }
        for (uint32_t c0 = 0; c0 < Ci; c0 += bci) {
            const uint32_t n = Ci - c0 < bci ? Ci - c0 : bci, o0 = c0 * m;
            for (uint32_t q = 0; q < n * m; q++) acc[q] = 0;
            for (uint32_t ky = ky0; ky < ky1; ky++)
                for (uint32_t kx = kx0; kx < kx1; kx++) {
                    const int8_t *xp = xs + mct_tap_at(L, oy, ox, ky, kx) + c0;
                    const uint8_t *wp = w + ((size_t)ky * KW + kx) * Co + o0;
                    for (uint32_t ci = 0, q = 0; ci < n; ci++)   /* output o0 + q = (c0 + ci) m + j */
                        for (uint32_t j = 0; j < m; j++, q++) acc[q] += qterm(xp[ci], zx, mct_cload_i8(wp + q));
                }
            for (uint32_t q = 0; q < n * m; q++) yo[o0 + q] = qdense_out(c, Co, o0 + q, zy, acc[q]);
        }
    })
}
#endif

void mct_qdwconv2d_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
#if QDOT_DSP
    if (L->c_out / L->c_in <= QDW_BLOCK) {
        qdwconv2d_dsp(L, c, x, y, nb);
        return;
    }
#endif
    const uint32_t Ci = L->c_in, Co = L->c_out, KW = L->kw, m = Co / Ci;
    const size_t sx = 4u * (size_t)mct_i8_floats(L->n_in), sy = 4u * (size_t)mct_i8_floats(L->n_out);
    const int16_t zx = (int16_t)zero_point(c);
    const int32_t zy = zero_point(c + 4);
    const uint8_t *w = c + 8u + 12u * Co;
    MCT_FOR_WINDOWS(L, nb, {
        const int8_t *xs = (const int8_t *)x + (size_t)s * sx;
        int8_t *yo = (int8_t *)y + (size_t)s * sy + ((size_t)oy * L->w_out + ox) * Co;
        uint32_t o = 0;
        for (uint32_t ci = 0; ci < Ci; ci++)
            for (uint32_t j = 0; j < m; j++, o++) {   /* output channel o = ci m + j reads input channel ci */
                int32_t acc = 0;
                for (uint32_t ky = ky0; ky < ky1; ky++)
                    for (uint32_t kx = kx0; kx < kx1; kx++)
                        acc += qterm(xs[mct_tap_at(L, oy, ox, ky, kx) + ci], zx,
                                     mct_cload_i8(w + ((size_t)ky * KW + kx) * Co + o));
                yo[o] = qdense_out(c, Co, o, zy, acc);
            }
    })
}

#if QDOT_DSP
/* QMAXPOOL2D on Cortex-M4/M7/M33 for c_in a multiple of four: four channels at a time, SSUB8 setting a flag per
 * byte where the tap is larger and SEL taking those bytes (the same maxima as the reference). */
static void qmaxpool2d_dsp(const mct_layer *L, const float *x, float *y, uint32_t nb) {
    const uint32_t C = L->c_in;
    const size_t sx = 4u * (size_t)mct_i8_floats(L->n_in), sy = 4u * (size_t)mct_i8_floats(L->n_out);
    MCT_FOR_WINDOWS(L, nb, {
        const int8_t *xs = (const int8_t *)x + (size_t)s * sx;
        int8_t *yo = (int8_t *)y + (size_t)s * sy + ((size_t)oy * L->w_out + ox) * C;
        for (uint32_t ch = 0; ch < C; ch += 4u) {
            uint32_t m = 0x80808080u;
            for (uint32_t ky = ky0; ky < ky1; ky++)
                for (uint32_t kx = kx0; kx < kx1; kx++) {
                    uint32_t t;
                    memcpy(&t, xs + mct_tap_at(L, oy, ox, ky, kx) + ch, 4);
                    (void)__ssub8((int8x4_t)t, (int8x4_t)m);
                    m = (uint32_t)__sel((uint8x4_t)t, (uint8x4_t)m);
                }
            memcpy(yo + ch, &m, 4);
        }
    })
}
#endif

void mct_qmaxpool2d_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    const uint32_t C = L->c_in;
    const size_t sx = 4u * (size_t)mct_i8_floats(L->n_in), sy = 4u * (size_t)mct_i8_floats(L->n_out);
    (void)c;
#if QDOT_DSP
    if (!(C & 3u)) {
        qmaxpool2d_dsp(L, x, y, nb);
        return;
    }
#endif
    MCT_FOR_WINDOWS(L, nb, {
        const int8_t *xs = (const int8_t *)x + (size_t)s * sx;
        int8_t *yo = (int8_t *)y + (size_t)s * sy + ((size_t)oy * L->w_out + ox) * C;
        for (uint32_t ch = 0; ch < C; ch++) yo[ch] = -128;
        for (uint32_t ky = ky0; ky < ky1; ky++)
            for (uint32_t kx = kx0; kx < kx1; kx++) {
                const int8_t *xp = xs + mct_tap_at(L, oy, ox, ky, kx);
                for (uint32_t ch = 0; ch < C; ch++) yo[ch] = xp[ch] > yo[ch] ? xp[ch] : yo[ch];
            }
    })
}

void mct_qavgpool2d_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    const uint32_t C = L->c_in;
    const size_t sx = 4u * (size_t)mct_i8_floats(L->n_in), sy = 4u * (size_t)mct_i8_floats(L->n_out);
    (void)c;
    MCT_FOR_WINDOWS(L, nb, {
        const int8_t *xs = (const int8_t *)x + (size_t)s * sx;
        int8_t *yo = (int8_t *)y + (size_t)s * sy + ((size_t)oy * L->w_out + ox) * C;
        const int32_t n = (int32_t)((ky1 - ky0) * (kx1 - kx0)), half = n / 2;
        for (uint32_t ch = 0; ch < C; ch++) {
            int32_t acc = 0;   /* |acc| <= 128 * 65535 */
            for (uint32_t ky = ky0; ky < ky1; ky++)
                for (uint32_t kx = kx0; kx < kx1; kx++) acc += xs[mct_tap_at(L, oy, ox, ky, kx) + ch];
            /* round(acc / n), ties away from zero (division truncates toward zero); the mean of codes is a code */
            yo[ch] = (int8_t)(acc >= 0 ? (acc + half) / n : (acc - half) / n);
        }
    })
}

int32_t mct_requantize(int32_t a, int32_t mult, int32_t shift) { return requantize(a, mult, shift); }

void mct_qop_backward(const mct_layer *L, const mct_bwd *b) {
    if (!b->gx) return;
    for (size_t j = 0; j < (size_t)L->n_in * b->nb; j++) b->gx[j] = 0.0f;
}
