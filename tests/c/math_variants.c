/* math_variants.c - the host's branch-free math (suffix _host) and the devices' (suffix _dev) must give the
 * same bits: exp, tanh, log, log1p and sigmoid at every STRIDE-th float32 bit pattern plus the special values, and
 * the division at quotients around the subnormal range. Prints the mismatches (at most 10) and their count;
 * exits 1 if there is one. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DECL(s) float v_exp##s(float); float v_tanh##s(float); float v_log##s(float); float v_log1p##s(float); \
    float v_sigmoid##s(float); float v_div##s(float, float);
DECL(_host)
DECL(_dev)

static uint32_t bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static float flt(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

static unsigned long bad = 0, checked = 0;

static void same(const char *name, float x, float y, float a, float b) {
    checked++;
    if (bits(a) == bits(b)) return;
    if (++bad <= 10)
        printf("%s(%a, %a): host %a (%08x), device %a (%08x)\n", name, (double)x, (double)y, (double)a,
               (unsigned)bits(a), (double)b, (unsigned)bits(b));
}

static void one(float x) {
    same("exp", x, 0, v_exp_host(x), v_exp_dev(x));
    same("tanh", x, 0, v_tanh_host(x), v_tanh_dev(x));
    same("log", x, 0, v_log_host(x), v_log_dev(x));
    same("log1p", x, 0, v_log1p_host(x), v_log1p_dev(x));
    same("sigmoid", x, 0, v_sigmoid_host(x), v_sigmoid_dev(x));
}

int main(int argc, char **argv) {
    uint32_t stride = argc > 1 ? (uint32_t)strtoul(argv[1], NULL, 10) : 257u;
    if (stride == 0) stride = 1;
    static const float special[] = {0.0f, -0.0f, 1.0f, -1.0f, -86.0f, 88.5f, 88.4999924f, -86.0000076f, 88.5000076f,
                                    -85.9999924f, 1e-45f, -1e-45f, 1.17549435e-38f, 3.40282347e38f, -3.40282347e38f};
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++) one(special[i]);
    one(flt(0x7f800000u));   /* +inf */
    one(flt(0xff800000u));   /* -inf */
    one(flt(0x7fc00000u));   /* NaN */
    one(flt(0xffc00001u));   /* -NaN with a payload */
    for (uint64_t u = 0; u <= 0xffffffffu; u += stride) one(flt((uint32_t)u));
    /* quotients at and around the smallest normal, and of every sign; also 0/0, x/0, inf/inf */
    for (uint32_t e = 0; e < 2000; e++) {
        float a = flt(0x00400000u + e * 4099u), b = flt(0x3f000000u + e * 977u);   /* ~1e-38 / [0.5, ...) */
        same("div", a, b, v_div_host(a, b), v_div_dev(a, b));
        same("div", -a, b, v_div_host(-a, b), v_div_dev(-a, b));
        same("div", a, -b, v_div_host(a, -b), v_div_dev(a, -b));
        float c = flt(0x3f800000u + e * 3001u), d = flt(0x7e000000u + e * 7919u);  /* ~1 / ~4e37 */
        same("div", c, d, v_div_host(c, d), v_div_dev(c, d));
        same("div", -c, d, v_div_host(-c, d), v_div_dev(-c, d));
    }
    float z = 0.0f, inf = flt(0x7f800000u);
    same("div", z, z, v_div_host(z, z), v_div_dev(z, z));
    same("div", 1.0f, z, v_div_host(1.0f, z), v_div_dev(1.0f, z));
    same("div", -1.0f, z, v_div_host(-1.0f, z), v_div_dev(-1.0f, z));
    same("div", inf, inf, v_div_host(inf, inf), v_div_dev(inf, inf));
    same("div", 1.0f, inf, v_div_host(1.0f, inf), v_div_dev(1.0f, inf));
    same("div", -z, 3.0f, v_div_host(-z, 3.0f), v_div_dev(-z, 3.0f));
    printf("%lu checked, %lu differ\n", checked, bad);
    return bad != 0;
}
