/* layer_qsoftmax.c - QSOFTMAX: the int8 softmax of TensorFlow Lite (Micro)'s reference kernel, bit for bit: int8 in,
 * int8 out at the scale 1/256 and zero point -128 TFLite fixes for it, in the fixed-point arithmetic of gemmlowp that
 * kernel uses (the constants and the byte layout at MCT_OP_QSOFTMAX in mct.h).
 *
 * Fixed-point values are int32 "raw" numbers standing for raw / 2^f: Q0.31 (f = 31), Q2.29, Q5.26, Q12.19. Every
 * helper below works on raw numbers with 64-bit intermediates, never overflows a signed type and never shifts a
 * negative number (floor division is done on magnitudes), whatever the blob holds; with the constants the exporter
 * computes (as TFLite's Prepare computes them) nothing saturates that does not saturate in TFLite. */
#include "mct_layers.h"

#define Q31_ONE INT32_MAX             /* 1 in Q0.31 (saturated) */

/* round(a b / 2^31) with ties rounded up in magnitude and the quotient truncated (gemmlowp's
 * SaturatingRoundingDoublingHighMul): the product of two Q0.31 numbers; (-1) (-1) saturates to Q31_ONE. */
static int32_t fx_mul(int32_t a, int32_t b) {
    if (a == INT32_MIN && b == INT32_MIN) return Q31_ONE;
    int64_t p = (int64_t)a * b;
    p += p >= 0 ? ((int64_t)1 << 30) : 1 - ((int64_t)1 << 30);
    return (int32_t)(p / ((int64_t)1 << 31));
}

/* x / 2^e rounded to nearest, ties away from zero, for e in [0, 31] (gemmlowp's RoundingDivideByPOT): floor(x / 2^e)
 * from the magnitude, plus 1 when the remainder (x's low e bits) passes half; shifts only, no division. */
static int32_t fx_div_pot(int32_t x, uint32_t e) {
    uint32_t mask = (uint32_t)(((uint64_t)1 << e) - 1u), mag = x < 0 ? 0u - (uint32_t)x : (uint32_t)x;
    int64_t fl = x < 0 ? -(int64_t)(((uint64_t)mag + mask) >> e) : (int64_t)(mag >> e);
    uint32_t rem = (uint32_t)x & mask, half = (mask >> 1) + (x < 0 ? 1u : 0u);
    return (int32_t)(fl + (rem > half ? 1 : 0));
}

/* x 2^e saturated to int32, for e in [0, 31] (gemmlowp's SaturatingRoundingMultiplyByPOT, positive exponent). */
static int32_t fx_mul_pot(int32_t x, uint32_t e) {
    int64_t v = (int64_t)x * ((int64_t)1 << e);
    return v > INT32_MAX ? INT32_MAX : (v < INT32_MIN ? INT32_MIN : (int32_t)v);
}

/* exp(a) for a Q0.31 a in [-1/4, 0), in Q0.31: exp(-1/8) (1 + y + y^2/2 + y^3/6 + y^4/24) with y = a + 1/8, evaluated
 * in gemmlowp's order and roundings. */
static int32_t fx_exp_quarter(int32_t a) {
    const int32_t exp_m1_8 = 1895147668;   /* exp(-1/8) in Q0.31 */
    const int32_t one_third = 715827883;   /* 1/3 in Q0.31 */
    int32_t y = a + ((int32_t)1 << 28);
    int32_t y2 = fx_mul(y, y), y3 = fx_mul(y2, y), y4 = fx_mul(y2, y2);
    int32_t tail = fx_div_pot(fx_mul(fx_div_pot(y4, 2) + y3, one_third) + y2, 1);   /* y^4/24 + y^3/6 + y^2/2 */
    return exp_m1_8 + fx_mul(exp_m1_8, y + tail);
}

/* exp(-2^(j - 2)) in Q0.31 for j = 0 .. 6 (a chain of comparisons: a table, or a switch's, would be copied into RAM
 * on AVR). */
static int32_t exp_pow2(uint32_t j) {
    return j == 0u ? 1672461947     /* exp(-1/4) */
         : j == 1u ? 1302514674     /* exp(-1/2) */
         : j == 2u ? 790015084      /* exp(-1) */
         : j == 3u ? 290630308      /* exp(-2) */
         : j == 4u ? 39332535       /* exp(-4) */
         : j == 5u ? 720401         /* exp(-8) */
         : 242;                     /* exp(-16) */
}

/* exp(a) for a Q5.26 a <= 0 (a >= 0 gives 1), in Q0.31 (gemmlowp's exp_on_negative_values): a = -(k / 4 + r) with
 * r in (0, 1/4], exp(-r) from fx_exp_quarter, then one multiply by exp(-2^j) for each bit 2^j of k / 4. */
static int32_t fx_exp_neg(int32_t a) {
    if (a >= 0) return Q31_ONE;
    const int32_t quarter = (int32_t)1 << 24;
    int32_t m = (int32_t)((uint32_t)a & (uint32_t)(quarter - 1)) - quarter;   /* a mod 1/4, minus 1/4: [-1/4, 0) */
    int32_t r = fx_exp_quarter(m * 32);                                       /* Q5.26 -> Q0.31 */
    uint32_t rest = (uint32_t)((int64_t)m - a);                               /* the multiple of 1/4 in -a, >= 0 */
    for (uint32_t j = 0; j < 7u; j++)
        if (rest & ((uint32_t)1 << (24u + j))) r = fx_mul(r, exp_pow2(j));
    return r;
}

/* 1 / (1 + x) for a Q0.31 x in [0, 1), in Q0.31 (gemmlowp's one_over_one_plus_x_for_x_in_0_1): three Newton-Raphson
 * steps for 1 / d, d = (1 + x) / 2, from 48/17 - 32/17 d, in Q2.29. */
static int32_t fx_one_over_one_plus(int32_t x) {
    int32_t d = (int32_t)(((int64_t)x + Q31_ONE + 1) / 2);   /* (x + 1) / 2 rounded half up, Q0.31 */
    int32_t y = 1515870810 + fx_mul(d, -1010580540);         /* 48/17 + d (-32/17), Q2.29 */
    for (int i = 0; i < 3; i++) {
        int32_t err = ((int32_t)1 << 29) - fx_mul(d, y);     /* 1 - d y, Q2.29 */
        y += fx_mul_pot(fx_mul(y, err), 2);                  /* y (1 - d y): Q4.27 -> Q2.29 */
    }
    return fx_mul_pot(y, 1);                                 /* y / 2 in Q1.30, as Q0.31 */
}

/* The input difference d = x - max (<= 0) as a Q5.26 number: d 2^shift times mult / 2^31 (TFLite's
 * MultiplyByQuantizedMultiplierGreaterThanOne), the left shift saturated to int32. */
static int32_t scaled_diff(int32_t d, int32_t mult, uint32_t shift) {
    return fx_mul(fx_mul_pot(d, shift), mult);
}

int mct_qsoftmax_check(const mct_layer *L) { return L->kind == 0 && L->n_in == L->n_out && L->n_in <= 511u; }

void mct_qsoftmax_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    (void)L; (void)nb; (void)host;
    s->consts = 12u;   /* i32 mult, i32 left shift, i32 diff_min */
}

void mct_qsoftmax_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb) {
    uint32_t n = L->n_in;
    size_t stride = 4u * (size_t)mct_i8_floats(n);
    int32_t mult = mct_cload_i32(c), sh = mct_cload_i32(c + 4), diff_min = mct_cload_i32(c + 8);
    uint32_t shift = sh < 0 ? 0u : (sh > 31 ? 31u : (uint32_t)sh);
    for (uint32_t s = 0; s < nb; s++) {
        const int8_t *xs = (const int8_t *)x + (size_t)s * stride;
        int8_t *ys = (int8_t *)y + (size_t)s * stride;
        int32_t top = -128;
        for (uint32_t i = 0; i < n; i++) top = xs[i] > top ? xs[i] : top;
        /* the sum of exp(x - max) in Q12.19: each term is at most 2^19 and n <= 511, so it stays below 2^28 */
        int32_t sum = 0;
        for (uint32_t i = 0; i < n; i++) {
            int32_t d = (int32_t)xs[i] - top;
            if (d >= diff_min) sum += fx_div_pot(fx_exp_neg(scaled_diff(d, mult, shift)), 12u);
        }
        if (sum <= 0) {   /* no term (only a blob with diff_min > 0): every output is the zero point */
            for (uint32_t i = 0; i < n; i++) ys[i] = -128;
            continue;
        }
        /* 1 / sum: sum = 2^(12 - z) (1 + f) with z its leading zero bits; 1 / (1 + f) in Q0.31 */
        uint32_t z = 0;
        while (!((uint32_t)sum & (0x80000000u >> z))) z++;
        int32_t recip = fx_one_over_one_plus((int32_t)(((uint32_t)sum << z) - 0x80000000u));
        uint32_t e = 12u - z + 31u - 8u;   /* in [23, 31] for sums in [2^19, 2^28) */
        for (uint32_t i = 0; i < n; i++) {
            int32_t d = (int32_t)xs[i] - top, q = -128;
            if (d >= diff_min) {
                q = fx_div_pot(fx_mul(recip, fx_exp_neg(scaled_diff(d, mult, shift))), e) - 128;
                q = q > 127 ? 127 : (q < -128 ? -128 : q);
            }
            ys[i] = (int8_t)q;
        }
    }
}
