/* test_core.c - direct tests of the mcutrain C core (firmware/core) through mct.h and mct_layers.h.
 *
 * Self-contained C99: a few macros print one "name: PASS" or "name: FAIL" line per test and a final
 * "N passed, N failed" line; the exit code is non-zero when anything failed. Layer tables are built
 * by hand (static arrays of struct mct_layer); buffers are allocated at their exact sizes so that
 * AddressSanitizer sees any access past the sizes the core promises to need.
 *
 * Build (see tests/test_c_core.py): gcc -std=c99 -ffp-contract=off -Ifirmware/core tests/c/test_core.c
 * firmware/core/(*).c -lm
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mct.h"
#include "mct_layers.h"

/* ------------------------------------------------------------------------------------------------ */
/* test harness                                                                                     */
/* ------------------------------------------------------------------------------------------------ */

static int g_passed, g_failed, g_errors;

/* Record a failed expectation of the current test without stopping it; the first few are printed
 * (indented, on stdout) just before the test's FAIL line. */
#define CHECK(cond)                                                                                 \
    do {                                                                                            \
        if (!(cond)) {                                                                              \
            g_errors++;                                                                             \
            if (g_errors <= 10) printf("    %s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);     \
        }                                                                                           \
    } while (0)

/* CHECK with a printf-style explanation of the failure. */
#define CHECKF(cond, ...)                                                                           \
    do {                                                                                            \
        if (!(cond)) {                                                                              \
            g_errors++;                                                                             \
            if (g_errors <= 10) {                                                                    \
                printf("    %s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);                 \
                printf(__VA_ARGS__);                                                                \
                putchar('\n');                                                                      \
            }                                                                                       \
        }                                                                                           \
    } while (0)

/* Begin a test: reset the failure count of the current test. */
static void test_begin(void) { g_errors = 0; }

/* End a test: print its PASS/FAIL line and count it. */
static void test_end(const char *name) {
    if (g_errors) {
        g_failed++;
        printf("%s: FAIL (%d failed checks)\n", name, g_errors);
    } else {
        g_passed++;
        printf("%s: PASS\n", name);
    }
    fflush(stdout);
}

/* Run a test function without arguments under its own name. */
#define RUN(fn)           \
    do {                  \
        test_begin();     \
        fn();             \
        test_end(#fn);    \
    } while (0)

/* ------------------------------------------------------------------------------------------------ */
/* helpers: random numbers, allocation, float bits                                                  */
/* ------------------------------------------------------------------------------------------------ */

static uint32_t g_rng = 0x2545F491u;

/* Reseed the xorshift32 generator (never with 0). */
static void rng_seed(uint32_t s) { g_rng = s ? s : 0x9E3779B9u; }

/* Next 32 random bits (xorshift32). */
static uint32_t rng_u32(void) {
    uint32_t x = g_rng;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    g_rng = x;
    return x;
}

/* Uniform float in [lo, hi). */
static float rng_uniform(float lo, float hi) {
    float u = (float)(rng_u32() >> 8) * (1.0f / 16777216.0f);
    return lo + (hi - lo) * u;
}

/* A float of either sign with a magnitude spread over several binades (hard to round exactly). */
static float rng_spread(void) {
    static const float scale[7] = {0.125f, 0.25f, 0.5f, 1.0f, 2.0f, 4.0f, 8.0f};
    return rng_uniform(-1.0f, 1.0f) * scale[rng_u32() % 7u];
}

/* malloc that aborts the test run on failure (sizes here are tiny). */
static float *falloc(size_t n) {
    float *p = (float *)malloc((n ? n : 1) * sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    return p;
}

/* A copy of n floats in a fresh allocation. */
static float *fdup(const float *src, size_t n) {
    float *p = falloc(n);
    if (n) memcpy(p, src, n * sizeof(float));
    return p;
}

/* Are a and b the same n floats, bit for bit? */
static int same_bits(const float *a, const float *b, size_t n) { return n == 0 || memcmp(a, b, n * sizeof(float)) == 0; }

/* Is x a finite float? */
static int is_finite(float x) { return x == x && x - x == 0.0f; }

/* |a - b| <= tol * max(1, |b|) in double. */
static int close_to(double a, double b, double tol) {
    double d = fabs(a - b), m = fabs(b) > 1.0 ? fabs(b) : 1.0;
    return d <= tol * m;
}

/* ------------------------------------------------------------------------------------------------ */
/* a small layer-table builder (offsets computed here, from the documented layout, not by the core) */
/* ------------------------------------------------------------------------------------------------ */

#define MAX_LAYERS 40

typedef struct netb {
    mct_layer L[MAX_LAYERS];
    mct_net net;
    uint16_t cur_n;      /* width of the current output */
    uint32_t cur_off;    /* arena offset of the current output */
    uint32_t arena;      /* arena floats per sample used so far */
    uint32_t n_params;   /* parameters used so far */
    uint16_t max_width;
    int open[8];         /* RES_BEGIN indices waiting for their RES_END */
    int open_sc[8];      /* the RES_SHORTCUT of each open block (-1: none yet) */
    int n_open;
} netb;

/* Parameter count of a layer from the documented parameter layouts. */
static uint32_t spec_params(uint8_t op, uint8_t kind, uint32_t I, uint32_t O, uint32_t k) {
    switch (op) {
    case MCT_OP_DENSE: return I * O + (kind ? O : 0u);
    case MCT_OP_BIAS: case MCT_OP_SWISH: case MCT_OP_DIAG: case MCT_OP_RMSNORM: return O;
    case MCT_OP_GLU: return 2u * I * O + 2u * O + (kind == MCT_ACT_SWISH ? O : 0u);
    case MCT_OP_SCALE: return 1;
    case MCT_OP_DYT: return 1u + 2u * O;
    case MCT_OP_CONV1D: return k;
    default: return 0;
    }
}

/* Connection weights (the leading params that get L1/L2) from the documented layouts. */
static uint32_t spec_weights(uint8_t op, uint32_t I, uint32_t O, uint32_t k) {
    switch (op) {
    case MCT_OP_DENSE: return I * O;
    case MCT_OP_GLU: return 2u * I * O;
    case MCT_OP_CONV1D: return k;
    default: return 0;
    }
}

/* Aux trace floats per sample: GLU pre-activations, the RMSNorm rms, the residual gradient. */
static uint32_t spec_aux(uint8_t op, uint32_t O) {
    switch (op) {
    case MCT_OP_GLU: return 2u * O;
    case MCT_OP_RMSNORM: return 1;
    case MCT_OP_RES_END: case MCT_OP_RES_SHORTCUT: return O;
    default: return 0;
    }
}

/* Start a network with n_in inputs (stored at arena offset 0). */
static void nb_init(netb *b, uint16_t n_in) {
    memset(b, 0, sizeof *b);
    b->cur_n = n_in;
    b->cur_off = 0;
    b->arena = n_in;
    b->max_width = n_in;
}

/* Append a layer fed by the current output; returns its index. A RES_SHORTCUT (after a block's main body) goes back
 * to the block's input; the RES_END after it adds the main body's output. */
static int nb_add(netb *b, uint8_t op, uint8_t kind, uint16_t n_out, uint16_t k, float alpha) {
    int idx = b->net.n_layers;
    if (idx >= MAX_LAYERS) {
        fprintf(stderr, "too many layers\n");
        exit(2);
    }
    mct_layer *L = &b->L[idx];
    memset(L, 0, sizeof *L);
    L->op = op;
    L->kind = kind;
    L->trainable = 1;
    L->n_in = b->cur_n;
    L->n_out = (op == MCT_OP_RES_BEGIN || op == MCT_OP_RES_END) ? b->cur_n : n_out;
    if (op == MCT_OP_RES_SHORTCUT) L->n_out = b->L[b->open[b->n_open - 1]].n_in;
    L->k = k;
    L->alpha = alpha;
    L->lr_div = 1.0f;
    L->n_p = spec_params(op, kind, L->n_in, L->n_out, k);
    L->n_w = spec_weights(op, L->n_in, L->n_out, k);
    L->p_off = b->n_params;
    b->n_params += L->n_p;
    L->in_off = b->cur_off;
    if (op == MCT_OP_RES_BEGIN) {
        L->out_off = L->in_off;
        b->open_sc[b->n_open] = -1;
        b->open[b->n_open++] = idx;
    } else if (op == MCT_OP_RES_SHORTCUT) {
        L->k = (uint16_t)b->open[b->n_open - 1];
        L->out_off = b->L[L->k].out_off;
        b->open_sc[b->n_open - 1] = idx;
    } else {
        L->out_off = b->arena;
        b->arena += L->n_out;
    }
    uint32_t aux = spec_aux(op, L->n_out);
    L->aux_off = aux ? b->arena : 0u;
    b->arena += aux;
    if (op == MCT_OP_RES_END) {
        int beg = b->open[--b->n_open], sc = b->open_sc[b->n_open];
        L->k = (uint16_t)(sc >= 0 ? sc : beg);
        b->L[beg].k = (uint16_t)idx;
    }
    if (L->n_in > b->max_width) b->max_width = L->n_in;
    if (L->n_out > b->max_width) b->max_width = L->n_out;
    b->cur_n = L->n_out;
    b->cur_off = L->out_off;
    b->net.n_layers = (uint16_t)(idx + 1);
    return idx;
}

/* Fill the mct_net header from the layers added so far and return it. */
static const mct_net *nb_finish(netb *b) {
    b->net.layers = b->L;
    b->net.n_in = b->L[0].n_in;
    b->net.n_out = b->cur_n;
    b->net.max_width = b->max_width;
    b->net.n_params = b->n_params;
    b->net.arena = b->arena;
    b->net.in_off = 0;
    b->net.out_off = b->cur_off;
    return &b->net;
}

/* Parameters of a built network: weights small and random, gains and scales near 1. */
static void init_params(const mct_net *net, float *p) {
    for (uint16_t l = 0; l < net->n_layers; l++) {
        const mct_layer *L = &net->layers[l];
        float *q = p + L->p_off;
        for (uint32_t j = 0; j < L->n_p; j++) q[j] = rng_uniform(-0.6f, 0.6f);
        switch (L->op) {
        case MCT_OP_RMSNORM: case MCT_OP_SWISH: case MCT_OP_DIAG: case MCT_OP_SCALE:
            for (uint32_t j = 0; j < L->n_p; j++) q[j] = rng_uniform(0.8f, 1.2f);
            break;
        case MCT_OP_DYT:
            q[0] = rng_uniform(0.4f, 0.7f);
            for (uint32_t j = 0; j < L->n_out; j++) q[1 + j] = rng_uniform(0.8f, 1.2f);
            break;
        case MCT_OP_GLU:
            if (L->kind == MCT_ACT_SWISH)
                for (uint32_t j = 0; j < L->n_out; j++) q[L->n_p - L->n_out + j] = rng_uniform(0.8f, 1.2f);
            break;
        default: break;
        }
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* forward of Linear and Dense on numbers computed by hand                                          */
/* ------------------------------------------------------------------------------------------------ */

/* Linear(3, 2) then Dense(2, 1) with small integers and halves, so every result is exact. */
static void test_linear_forward_by_hand(void) {
    static const mct_layer layers[2] = {
        {.op = MCT_OP_DENSE, .kind = 1, .trainable = 1, .n_in = 3, .n_out = 2, .lr_div = 1.0f, .p_off = 0, .n_p = 8,
         .n_w = 6, .in_off = 0, .out_off = 3},
        {.op = MCT_OP_DENSE, .trainable = 1, .n_in = 2, .n_out = 1, .lr_div = 1.0f, .p_off = 8, .n_p = 2, .n_w = 2,
         .in_off = 3, .out_off = 5},
    };
    mct_net net;
    memset(&net, 0, sizeof net);
    net.layers = layers;
    net.n_layers = 2;
    net.n_in = 3;
    net.n_out = 1;
    net.max_width = 3;
    net.n_params = 10;
    net.arena = 6;
    net.in_off = 0;
    net.out_off = 5;
    CHECK(mct_net_check(&net) == MCT_OK);

    /* W = [[1, 2], [3, 4], [5, 6]] ([n_in][n_out] row-major), b = [0.5, -1]; then V = [[2], [-0.5]] */
    const float params[10] = {1, 2, 3, 4, 5, 6, 0.5f, -1, 2, -0.5f};
    const float x[2 * 3] = {1, -1, 2, /* second sample */ 0.5f, 0, -2};
    /* sample 0: h0 = 1*1 + (-1)*3 + 2*5 + 0.5 = 8.5, h1 = 1*2 + (-1)*4 + 2*6 - 1 = 9
     *           y = 8.5*2 + 9*(-0.5) = 12.5
     * sample 1: h0 = 0.5*1 + 0*3 + (-2)*5 + 0.5 = -9, h1 = 0.5*2 + 0*4 + (-2)*6 - 1 = -12
     *           y = -9*2 + (-12)*(-0.5) = -12 */
    const float want_h[2 * 2] = {8.5f, 9.0f, -9.0f, -12.0f};
    const float want_y[2] = {12.5f, -12.0f};
    float *arena = falloc(2 * net.arena);
    float *y = mct_forward(&net, params, x, arena, 2);
    CHECK(y == arena + 5 * 2);
    CHECK(same_bits(arena + 3 * 2, want_h, 4));
    CHECK(same_bits(y, want_y, 2));
    CHECK(same_bits(arena, x, 6)); /* the input is copied into the arena */

    /* one sample (the device's nb = 1) gives the same numbers */
    float *arena1 = falloc(net.arena);
    float *y1 = mct_forward(&net, params, x + 3, arena1, 1);
    CHECK(y1[0] == -12.0f);
    CHECK(arena1[3] == -9.0f && arena1[4] == -12.0f);
    free(arena1);
    free(arena);
}

/* A wider Linear on random data equals a plain loop that sums each output in ascending input order
 * from the first product and adds the bias last, bit for bit (the documented summation order). */
static void test_linear_forward_matches_loop(void) {
    static const uint16_t shapes[][3] = {{7, 9, 5}, {1, 1, 1}, {16, 33, 6}, {5, 3, 9}, {20, 16, 4}};
    rng_seed(11);
    for (size_t c = 0; c < sizeof shapes / sizeof shapes[0]; c++) {
        uint16_t I = shapes[c][0], O = shapes[c][1], nb = shapes[c][2];
        mct_layer L[1];
        memset(L, 0, sizeof L);
        L[0].op = MCT_OP_DENSE;
        L[0].kind = 1;
        L[0].trainable = 1;
        L[0].n_in = I;
        L[0].n_out = O;
        L[0].lr_div = 1.0f;
        L[0].n_p = (uint32_t)I * O + O;
        L[0].n_w = (uint32_t)I * O;
        L[0].in_off = 0;
        L[0].out_off = I;
        mct_net net;
        memset(&net, 0, sizeof net);
        net.layers = L;
        net.n_layers = 1;
        net.n_in = I;
        net.n_out = O;
        net.max_width = I > O ? I : O;
        net.n_params = L[0].n_p;
        net.arena = (uint32_t)I + O;
        net.out_off = I;
        CHECK(mct_net_check(&net) == MCT_OK);
        float *p = falloc(net.n_params), *x = falloc((size_t)nb * I), *arena = falloc((size_t)nb * net.arena);
        float *want = falloc((size_t)nb * O);
        for (uint32_t j = 0; j < net.n_params; j++) p[j] = rng_spread();
        for (uint32_t j = 0; j < (uint32_t)nb * I; j++) x[j] = rng_spread();
        for (uint32_t s = 0; s < nb; s++)
            for (uint32_t o = 0; o < O; o++) {
                float acc = x[s * I] * p[o];
                for (uint32_t i = 1; i < I; i++) acc = acc + x[s * I + i] * p[i * O + o];
                want[s * O + o] = acc + p[(size_t)I * O + o];
            }
        float *y = mct_forward(&net, p, x, arena, nb);
        CHECKF(same_bits(y, want, (size_t)nb * O), "shape I=%u O=%u nb=%u", (unsigned)I, (unsigned)O, (unsigned)nb);
        free(p);
        free(x);
        free(arena);
        free(want);
    }
}

/* ------------------------------------------------------------------------------------------------ */
/* mct_net_check                                                                                    */
/* ------------------------------------------------------------------------------------------------ */

/* A valid reference table with every kind of check target: Linear, GLU (aux), residual, RMSNorm,
 * Conv1d, Softmax. */
static netb g_ref;

/* Build g_ref and return its net. */
static const mct_net *ref_net(void) {
    nb_init(&g_ref, 4);
    nb_add(&g_ref, MCT_OP_DENSE, 1, 6, 0, 0.0f);                 /* 0 Linear(4, 6) */
    nb_add(&g_ref, MCT_OP_ACT, MCT_ACT_TANH, 6, 0, 0.0f);        /* 1 Tanh */
    nb_add(&g_ref, MCT_OP_GLU, MCT_ACT_SIGMOID, 5, 0, 0.0f);     /* 2 GLU(6, 5) */
    nb_add(&g_ref, MCT_OP_RES_BEGIN, 0, 0, 0, 0.0f);             /* 3 */
    nb_add(&g_ref, MCT_OP_DENSE, 0, 5, 0, 0.0f);                 /* 4 Dense(5, 5) */
    nb_add(&g_ref, MCT_OP_RES_END, 0, 0, 0, 0.0f);               /* 5 */
    nb_add(&g_ref, MCT_OP_RMSNORM, 0, 5, 0, 1e-5f);              /* 6 RMSNorm(5) */
    nb_add(&g_ref, MCT_OP_CONV1D, 0, 3, 3, 0.0f);                /* 7 Conv1d(5, 3, 3) */
    nb_add(&g_ref, MCT_OP_SOFTMAX, 0, 3, 0, 1.0f);               /* 8 Softmax(3) */
    return nb_finish(&g_ref);
}

/* Layers and header of a mutated copy of the reference table. */
static mct_layer g_mut[MAX_LAYERS];
static mct_net g_mut_net;

/* Reset the mutable copy to the reference table and return its net. */
static mct_net *mut_reset(void) {
    const mct_net *r = ref_net();
    memcpy(g_mut, r->layers, sizeof(mct_layer) * r->n_layers);
    g_mut_net = *r;
    g_mut_net.layers = g_mut;
    return &g_mut_net;
}

/* Expect the mutated table to be rejected; `what` names the mutation in the failure message. */
static void expect_rejected(const char *what) {
    int rc = mct_net_check(&g_mut_net);
    CHECKF(rc == MCT_E_NET, "%s: mct_net_check returned %d", what, rc);
}

static void test_net_check_accepts_valid(void) {
    const mct_net *net = ref_net();
    CHECK(mct_net_check(net) == MCT_OK);
    /* a one-layer net and a parameterless net are valid too */
    netb b;
    nb_init(&b, 3);
    nb_add(&b, MCT_OP_ACT, MCT_ACT_RELU, 3, 0, 0.0f);
    CHECK(mct_net_check(nb_finish(&b)) == MCT_OK);
    /* nested residual blocks */
    nb_init(&b, 3);
    nb_add(&b, MCT_OP_RES_BEGIN, 0, 0, 0, 0.0f);
    nb_add(&b, MCT_OP_RES_BEGIN, 0, 0, 0, 0.0f);
    nb_add(&b, MCT_OP_DIAG, 0, 3, 0, 0.0f);
    nb_add(&b, MCT_OP_RES_END, 0, 0, 0, 0.0f);
    nb_add(&b, MCT_OP_DENSE, 1, 3, 0, 0.0f);
    nb_add(&b, MCT_OP_RES_END, 0, 0, 0, 0.0f);
    CHECK(mct_net_check(nb_finish(&b)) == MCT_OK);
}

static void test_net_check_rejects_param_errors(void) {
    mct_net *n;
    n = mut_reset(); g_mut[0].n_p += 1; n->n_params += 1; expect_rejected("Linear n_p one too many");
    n = mut_reset(); g_mut[0].n_p -= 1; expect_rejected("Linear n_p one too few");
    n = mut_reset(); g_mut[2].n_p -= 5; expect_rejected("GLU n_p five short");
    n = mut_reset(); g_mut[6].n_p = 0; expect_rejected("RMSNorm without gains");
    n = mut_reset(); g_mut[7].n_p = 2; expect_rejected("Conv1d n_p != filter size");
    n = mut_reset(); g_mut[1].n_p = 1; n->n_params += 1; expect_rejected("activation with a parameter");
    n = mut_reset(); g_mut[0].n_w = g_mut[0].n_p + 1; expect_rejected("n_w > n_p");
    n = mut_reset(); n->n_params -= 1; expect_rejected("last layer's params past n_params");
    n = mut_reset(); g_mut[4].p_off = n->n_params - 3; expect_rejected("p_off + n_p past n_params");
    n = mut_reset(); g_mut[0].p_off = 0xFFFFFFF0u; expect_rejected("p_off overflowing 32 bits");
    (void)n;
}

static void test_net_check_rejects_offset_errors(void) {
    mct_net *n;
    n = mut_reset(); g_mut[1].in_off += 1; expect_rejected("input not at the previous output");
    n = mut_reset(); g_mut[0].in_off = 1; expect_rejected("first layer not at the net input");
    n = mut_reset(); n->in_off = 1; expect_rejected("net in_off not the first layer's input");
    n = mut_reset(); n->out_off += 1; expect_rejected("net out_off not the last output");
    n = mut_reset(); g_mut[8].out_off = n->arena - 2; g_mut[8].aux_off = 0; n->out_off = n->arena - 2;
    expect_rejected("output past the arena");
    n = mut_reset(); g_mut[2].aux_off = n->arena - 1; expect_rejected("GLU aux past the arena");
    n = mut_reset(); g_mut[6].aux_off = n->arena; expect_rejected("RMSNorm aux past the arena");
    n = mut_reset(); g_mut[5].aux_off = n->arena - 4; expect_rejected("RES_END aux past the arena");
    n = mut_reset(); n->arena -= 1; expect_rejected("arena one float short");
    n = mut_reset(); g_mut[1].out_off = g_mut[1].in_off; g_mut[2].in_off = g_mut[1].in_off;
    expect_rejected("non-residual layer writing over its input");
    n = mut_reset(); g_mut[0].in_off = 0xFFFFFFFEu; n->in_off = 0xFFFFFFFEu;
    expect_rejected("in_off overflowing 32 bits");
    (void)n;
}

static void test_net_check_rejects_size_errors(void) {
    mct_net *n;
    n = mut_reset(); g_mut[1].n_in = 5; g_mut[1].n_out = 5; expect_rejected("n_in != previous n_out");
    n = mut_reset(); n->n_in = 5; expect_rejected("net n_in != first layer n_in");
    n = mut_reset(); n->n_out = 4; expect_rejected("net n_out != last layer n_out");
    n = mut_reset(); n->max_width = 5; expect_rejected("a layer wider than max_width");
    n = mut_reset(); g_mut[1].n_out = 5; expect_rejected("activation n_out != n_in");
    n = mut_reset(); g_mut[6].n_out = 4; expect_rejected("RMSNorm n_out != n_in");
    n = mut_reset(); g_mut[8].n_in = 2; g_mut[8].n_out = 2; expect_rejected("Softmax fed the wrong width");
    n = mut_reset(); g_mut[7].n_out = 4; expect_rejected("Conv1d n_out != n_in - k + 1");
    n = mut_reset(); g_mut[7].k = 0; g_mut[7].n_p = 0; expect_rejected("Conv1d with k = 0");
    n = mut_reset(); g_mut[7].k = 6; g_mut[7].n_p = 6; expect_rejected("Conv1d filter longer than its input");
    n = mut_reset(); g_mut[8].alpha = 0.0f; expect_rejected("Softmax temperature 0");
    n = mut_reset(); g_mut[8].alpha = -1.0f; expect_rejected("Softmax temperature < 0");
    n = mut_reset(); g_mut[6].alpha = -1e-3f; expect_rejected("RMSNorm eps < 0");
    n = mut_reset(); g_mut[3].lr_div = 0.0f; expect_rejected("lr_div 0");
    n = mut_reset(); g_mut[0].lr_div = -2.0f; expect_rejected("lr_div < 0");
    n = mut_reset(); g_mut[0].op = 0; expect_rejected("op 0");
    n = mut_reset(); g_mut[0].op = 14; expect_rejected("unknown op 14");
    n = mut_reset(); g_mut[0].kind = 2; expect_rejected("Dense kind 2");
    n = mut_reset(); g_mut[1].kind = MCT_ACT_SWISH; expect_rejected("activation kind Swish (GLU gate only)");
    n = mut_reset(); g_mut[1].kind = MCT_ACT_END_; expect_rejected("activation kind past the list");
    n = mut_reset(); g_mut[2].kind = MCT_ACT_SINE; expect_rejected("GLU with a sine gate");
    n = mut_reset(); g_mut[2].kind = 9; expect_rejected("GLU gate 9");
    n = mut_reset(); g_mut[1].n_in = 0; g_mut[1].n_out = 0; expect_rejected("zero-width layer");
    n = mut_reset(); n->n_layers = 0; expect_rejected("no layers");
    n = mut_reset(); n->layers = NULL; expect_rejected("NULL layers");
    CHECK(mct_net_check(NULL) == MCT_E_NET);
    (void)n;
}

static void test_net_check_rejects_residual_errors(void) {
    mct_net *n;
    /* reference: 3 = RES_BEGIN (k = 5), 4 = Dense(5, 5), 5 = RES_END (k = 3) */
    n = mut_reset(); g_mut[3].k = 4; expect_rejected("RES_BEGIN partner is not a RES_END");
    n = mut_reset(); g_mut[3].k = 3; expect_rejected("RES_BEGIN partner is itself");
    n = mut_reset(); g_mut[3].k = 2; expect_rejected("RES_BEGIN partner before it");
    n = mut_reset(); g_mut[3].k = 200; expect_rejected("RES_BEGIN partner past the table");
    n = mut_reset(); g_mut[3].k = 9; expect_rejected("RES_BEGIN partner = n_layers");
    n = mut_reset(); g_mut[5].k = 4; expect_rejected("RES_END partner is not a RES_BEGIN");
    n = mut_reset(); g_mut[5].k = 5; expect_rejected("RES_END partner is itself");
    n = mut_reset(); g_mut[5].k = 7; expect_rejected("RES_END partner after it");
    n = mut_reset(); g_mut[5].k = 300; expect_rejected("RES_END partner past the table");
    n = mut_reset(); g_mut[3].out_off = n->arena - 5; g_mut[4].in_off = g_mut[3].out_off;
    expect_rejected("RES_BEGIN output not aliasing its input");
    /* a RES_END whose partner's k points elsewhere: two begins, one end */
    n = mut_reset(); g_mut[1].op = MCT_OP_RES_BEGIN; g_mut[1].k = 5; g_mut[1].out_off = g_mut[1].in_off;
    g_mut[2].in_off = g_mut[1].in_off; g_mut[1].n_p = 0;
    expect_rejected("two RES_BEGINs sharing one RES_END");
    /* a RES_END with no RES_BEGIN at all */
    n = mut_reset(); g_mut[3].op = MCT_OP_ACT; g_mut[3].kind = MCT_ACT_RELU; g_mut[3].out_off = n->arena;
    g_mut[4].in_off = n->arena; n->arena += 5; expect_rejected("RES_END without RES_BEGIN");
    (void)n;
    /* the body changes the width: Linear(5, 4) inside a block over 5 values */
    netb b;
    nb_init(&b, 5);
    nb_add(&b, MCT_OP_RES_BEGIN, 0, 0, 0, 0.0f);
    nb_add(&b, MCT_OP_DENSE, 1, 4, 0, 0.0f);
    nb_add(&b, MCT_OP_RES_END, 0, 0, 0, 0.0f);
    CHECK(mct_net_check(nb_finish(&b)) == MCT_E_NET);
    /* a RES_BEGIN that is never closed */
    nb_init(&b, 5);
    nb_add(&b, MCT_OP_DENSE, 1, 5, 0, 0.0f);
    nb_add(&b, MCT_OP_RES_BEGIN, 0, 0, 0, 0.0f);
    b.L[1].k = 0;
    nb_add(&b, MCT_OP_DIAG, 0, 5, 0, 0.0f);
    CHECK(mct_net_check(nb_finish(&b)) == MCT_E_NET);
    /* two RES_ENDs claiming one RES_BEGIN (the begin points at the first) */
    nb_init(&b, 5);
    nb_add(&b, MCT_OP_DENSE, 1, 5, 0, 0.0f);
    nb_add(&b, MCT_OP_RES_BEGIN, 0, 0, 0, 0.0f);
    nb_add(&b, MCT_OP_DIAG, 0, 5, 0, 0.0f);
    nb_add(&b, MCT_OP_RES_END, 0, 0, 0, 0.0f);
    CHECK(mct_net_check(nb_finish(&b)) == MCT_OK);
    b.open[b.n_open++] = 1;
    nb_add(&b, MCT_OP_RES_END, 0, 0, 0, 0.0f);
    b.L[1].k = 3;
    CHECK(mct_net_check(nb_finish(&b)) == MCT_E_NET);
}

/* ------------------------------------------------------------------------------------------------ */
/* mct_gemm and mct_gemm_bt                                                                         */
/* ------------------------------------------------------------------------------------------------ */

static void test_gemm_equals_gemm_bt(void) {
    static const uint32_t Ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 13};
    static const uint32_t Ks[] = {1, 2, 3, 5, 8, 17};
    static const uint32_t Ns[] = {1, 2, 3, 4, 5, 7, 8, 15, 16, 17, 31, 32, 33, 37};
    rng_seed(7);
    for (size_t a = 0; a < sizeof Ms / sizeof Ms[0]; a++)
        for (size_t b = 0; b < sizeof Ks / sizeof Ks[0]; b++)
            for (size_t c = 0; c < sizeof Ns / sizeof Ns[0]; c++) {
                uint32_t M = Ms[a], K = Ks[b], N = Ns[c];
                float *A = falloc((size_t)M * K), *B = falloc((size_t)K * N), *BT = falloc((size_t)N * K);
                float *C1 = falloc((size_t)M * N), *C2 = falloc((size_t)M * N), *C3 = falloc((size_t)M * N);
                for (size_t j = 0; j < (size_t)M * K; j++) A[j] = rng_spread();
                for (size_t j = 0; j < (size_t)K * N; j++) B[j] = rng_spread();
                for (uint32_t k = 0; k < K; k++)
                    for (uint32_t n = 0; n < N; n++) BT[(size_t)n * K + k] = B[(size_t)k * N + n];
                /* the documented order: ascending k, starting from the k = 0 product */
                for (uint32_t m = 0; m < M; m++)
                    for (uint32_t n = 0; n < N; n++) {
                        float s = A[(size_t)m * K] * B[n];
                        for (uint32_t k = 1; k < K; k++) s = s + A[(size_t)m * K + k] * B[(size_t)k * N + n];
                        C3[(size_t)m * N + n] = s;
                    }
                mct_gemm(A, B, C1, M, K, N);
                mct_gemm_bt(A, BT, C2, M, K, N);
                CHECKF(same_bits(C1, C2, (size_t)M * N), "gemm != gemm_bt at M=%u K=%u N=%u", M, K, N);
                CHECKF(same_bits(C1, C3, (size_t)M * N), "gemm != ascending-k loop at M=%u K=%u N=%u", M, K, N);
                /* mct_transpose gives back the B^T built above */
                float *T = falloc((size_t)N * K);
                mct_transpose(B, T, K, N);
                CHECKF(same_bits(T, BT, (size_t)N * K), "transpose at K=%u N=%u", K, N);
                free(A); free(B); free(BT); free(C1); free(C2); free(C3); free(T);
            }
}

/* ------------------------------------------------------------------------------------------------ */
/* training: fused (device) path against the buffered path                                         */
/* ------------------------------------------------------------------------------------------------ */

/* An optimizer of the given kind with clipping, L1/L2, a cosine schedule and a warm-up switched on. */
static mct_opt make_opt(uint8_t kind) {
    mct_opt o;
    memset(&o, 0, sizeof o);
    o.kind = kind;
    o.schedule = MCT_LR_COSINE;
    o.decay_steps = 10;
    o.warmup_steps = 2;
    o.lr = kind == MCT_OPT_SGD || kind == MCT_OPT_MOMENTUM ? 0.05f : 0.01f;
    o.lr_final = o.lr * 0.1f;
    o.l1 = 1e-3f;
    o.l2 = 2e-3f;
    o.clip = 0.8f;
    o.momentum = 0.9f;
    o.beta = kind == MCT_OPT_ADAM ? 0.999f : 0.9f;
    o.beta1 = 0.9f;
    o.eps = kind == MCT_OPT_ADAM ? 1e-8f : 1e-20f;
    o.scale_by_loss = kind == MCT_OPT_RMSPROP; /* one kind also scales by the loss */
    return o;
}

static const char *const k_opt_names[5] = {"sgd", "momentum", "rmsprop", "rmsprop_momentum", "adam"};

/* Everything one training run owns. */
typedef struct run {
    float *params, *state, *arena, *scratch, *grads;
    uint32_t scratch_n, slots;
    mct_train_state ts;
} run;

/* Allocate a run's buffers at exactly the documented sizes; params copied from p0, state and grads zero. */
static void run_init(run *r, const mct_net *net, const float *p0, uint8_t kind, uint32_t nb, int buffered) {
    r->params = fdup(p0, net->n_params);
    r->slots = mct_opt_slots(kind);
    r->state = r->slots ? falloc((size_t)r->slots * net->n_params) : NULL;
    if (r->state) memset(r->state, 0, sizeof(float) * r->slots * net->n_params);
    r->arena = falloc((size_t)net->arena * nb);
    r->scratch_n = mct_scratch_size(net, nb, 0, 0) + (uint32_t)net->n_out * nb;
    r->scratch = falloc(r->scratch_n);
    r->grads = buffered ? falloc(net->n_params) : NULL;
    if (r->grads) memset(r->grads, 0, sizeof(float) * net->n_params);
    r->ts = mct_train_state_init();
}

/* Free a run's buffers. */
static void run_free(run *r) {
    free(r->params);
    free(r->state);
    free(r->arena);
    free(r->scratch);
    free(r->grads);
    memset(r, 0, sizeof *r);
}

/* One update of a run; returns the status, the mean loss in *loss. A fused run takes mct_train_step (the device's
 * update); a buffered run sums the gradients with mct_batch_grads and applies them with mct_update, as the host
 * trainer does (_core.pyx, _step), with mct_train_step's checks of the arguments and of the inputs first. */
static int run_step(run *r, const mct_net *net, const mct_opt *o, uint8_t loss_kind, float loss_param,
                    const float *x, const float *t, uint32_t nb, float *loss) {
    if (!r->grads)
        return mct_train_step(net, r->params, o, r->state, &r->ts, loss_kind, loss_param, x, t, nb, r->arena,
                              r->scratch, r->scratch_n, loss);
    *loss = 0.0f;
    if (nb == 0 || r->scratch_n < mct_scratch_size(net, nb, 0, 0) + (uint32_t)net->n_out * nb) return MCT_E_ARG;
    if (!mct_all_finite(x, net->n_in * nb) || !mct_all_finite(t, net->n_out * nb)) return MCT_E_NONFINITE_INPUT;
    float sum = mct_batch_grads(net, r->params, loss_kind, loss_param, x, t, nb, r->arena, r->scratch, r->scratch_n,
                                0, r->grads);
    *loss = mct_div(sum, (float)nb);
    return mct_update(net, r->params, o, r->state, &r->ts, r->grads, nb, *loss);
}

/* Train the same net from the same start on the same batches by both paths for `steps` steps and
 * check that params, optimizer state and train state agree bit for bit, that training moved every
 * trainable layer and left frozen layers alone. */
static void fused_vs_buffered(const mct_net *net, const mct_opt *o, uint8_t loss_kind, float loss_param,
                              uint32_t nb, int steps, uint32_t seed, const char *what) {
    CHECKF(mct_net_check(net) == MCT_OK, "%s: table rejected", what);
    rng_seed(seed);
    float *p0 = falloc(net->n_params);
    init_params(net, p0);
    run f, b;
    run_init(&f, net, p0, o->kind, nb, 0);
    run_init(&b, net, p0, o->kind, nb, 1);
    float *x = falloc((size_t)nb * net->n_in), *t = falloc((size_t)nb * net->n_out);
    for (int s = 0; s < steps; s++) {
        for (size_t j = 0; j < (size_t)nb * net->n_in; j++) x[j] = rng_uniform(-1.5f, 1.5f);
        for (size_t j = 0; j < (size_t)nb * net->n_out; j++) t[j] = rng_uniform(0.0f, 1.0f);
        float lf = -1.0f, lb = -2.0f;
        int rf = run_step(&f, net, o, loss_kind, loss_param, x, t, nb, &lf);
        int rb = run_step(&b, net, o, loss_kind, loss_param, x, t, nb, &lb);
        CHECKF(rf == MCT_OK && rb == MCT_OK, "%s: step %d status fused %d buffered %d", what, s, rf, rb);
        CHECKF(same_bits(&lf, &lb, 1) && is_finite(lf), "%s: step %d loss fused %.9g buffered %.9g", what, s,
               (double)lf, (double)lb);
    }
    CHECKF(same_bits(f.params, b.params, net->n_params), "%s: params differ", what);
    if (f.slots)
        CHECKF(same_bits(f.state, b.state, (size_t)f.slots * net->n_params), "%s: optimizer state differs", what);
    CHECKF(f.ts.step == (uint32_t)steps && b.ts.step == (uint32_t)steps, "%s: step counters %u %u", what,
           (unsigned)f.ts.step, (unsigned)b.ts.step);
    CHECKF(same_bits(&f.ts.b1t, &b.ts.b1t, 1) && same_bits(&f.ts.b2t, &b.ts.b2t, 1), "%s: Adam powers %s", what,
           "differ");
    /* the runs really trained: each trainable layer with params moved, frozen ones did not */
    for (uint16_t l = 0; l < net->n_layers; l++) {
        const mct_layer *L = &net->layers[l];
        if (!L->n_p) continue;
        int moved = !same_bits(p0 + L->p_off, b.params + L->p_off, L->n_p);
        CHECKF(moved == (L->trainable != 0), "%s: layer %u (op %u) moved=%d trainable=%d", what, (unsigned)l,
               (unsigned)L->op, moved, (int)L->trainable);
    }
    free(x);
    free(t);
    free(p0);
    run_free(&f);
    run_free(&b);
}

/* The mixed network: Linear (own lr divisor), Tanh, Swish-GLU, a residual block with Linear, SiLU and
 * Dense, RMSNorm, Swish, Diag, a frozen Linear, ScalarScale, Bias1d, LeakyReLU, Conv1d, sigmoid GLU,
 * Linear and Softmax. */
static const mct_net *mixed_net(netb *b) {
    nb_init(b, 5);
    int l0 = nb_add(b, MCT_OP_DENSE, 1, 6, 0, 0.0f);
    b->L[l0].lr_div = 2.0f;
    nb_add(b, MCT_OP_ACT, MCT_ACT_TANH, 6, 0, 0.0f);
    nb_add(b, MCT_OP_GLU, MCT_ACT_SWISH, 5, 0, 0.0f);
    nb_add(b, MCT_OP_RES_BEGIN, 0, 0, 0, 0.0f);
    nb_add(b, MCT_OP_DENSE, 1, 4, 0, 0.0f);
    nb_add(b, MCT_OP_ACT, MCT_ACT_SILU, 4, 0, 0.0f);
    int l6 = nb_add(b, MCT_OP_DENSE, 0, 5, 0, 0.0f);
    b->L[l6].lr_div = 4.0f;
    nb_add(b, MCT_OP_RES_END, 0, 0, 0, 0.0f);
    nb_add(b, MCT_OP_RMSNORM, 0, 5, 0, 1e-5f);
    nb_add(b, MCT_OP_SWISH, 0, 5, 0, 0.0f);
    nb_add(b, MCT_OP_DIAG, 0, 5, 0, 0.0f);
    int fz = nb_add(b, MCT_OP_DENSE, 1, 6, 0, 0.0f);
    b->L[fz].trainable = 0;
    nb_add(b, MCT_OP_SCALE, 0, 6, 0, 0.0f);
    nb_add(b, MCT_OP_BIAS, 0, 6, 0, 0.0f);
    nb_add(b, MCT_OP_ACT, MCT_ACT_LEAKY_RELU, 6, 0, 0.5f);
    nb_add(b, MCT_OP_CONV1D, 0, 4, 3, 0.0f);
    nb_add(b, MCT_OP_GLU, MCT_ACT_SIGMOID, 4, 0, 0.0f);
    nb_add(b, MCT_OP_DENSE, 1, 4, 0, 0.0f);
    nb_add(b, MCT_OP_SOFTMAX, 0, 4, 0, 0.8f);
    return nb_finish(b);
}

/* Fused and buffered agree on the mixed network, one test per optimizer kind. */
static void test_fused_equals_buffered_mixed(uint8_t kind) {
    netb b;
    const mct_net *net = mixed_net(&b);
    mct_opt o = make_opt(kind);
    fused_vs_buffered(net, &o, MCT_LOSS_MSE, 0.0f, 3, 6, 100u + kind, k_opt_names[kind]);
    /* cross-entropy on the softmax output and a single sample (the device's batch) */
    fused_vs_buffered(net, &o, MCT_LOSS_XENT, 0.0f, 1, 4, 200u + kind, k_opt_names[kind]);
}

/* Fused and buffered agree with one layer type between two Linear layers, for every optimizer kind.
 * op/kind/alpha/k describe the layer (k: Conv1d filter size); op RES_BEGIN stands for a residual block
 * around a Linear, op RES_SHORTCUT for a block 6 -> 4 with a Linear and Tanh and a Linear projection. */
static void fused_vs_buffered_layer(uint8_t op, uint8_t kind, float alpha, uint16_t k, const char *name) {
    for (uint8_t ok = 0; ok <= MCT_OPT_ADAM; ok++) {
        netb b;
        nb_init(&b, 3);
        nb_add(&b, MCT_OP_DENSE, 1, 6, 0, 0.0f);
        uint16_t w = op == MCT_OP_CONV1D ? (uint16_t)(6 - k + 1) : (op == MCT_OP_GLU ? 4 : 6);
        if (op == MCT_OP_RES_BEGIN) {
            nb_add(&b, MCT_OP_RES_BEGIN, 0, 0, 0, 0.0f);
            nb_add(&b, MCT_OP_DENSE, 1, 6, 0, 0.0f);
            nb_add(&b, MCT_OP_RES_END, 0, 0, 0, 0.0f);
        } else if (op == MCT_OP_RES_SHORTCUT) {
            nb_add(&b, MCT_OP_RES_BEGIN, 0, 0, 0, 0.0f);
            nb_add(&b, MCT_OP_DENSE, 1, 4, 0, 0.0f);
            nb_add(&b, MCT_OP_ACT, MCT_ACT_TANH, 4, 0, 0.0f);
            nb_add(&b, MCT_OP_RES_SHORTCUT, 0, 0, 0, 0.0f);
            nb_add(&b, MCT_OP_DENSE, 1, 4, 0, 0.0f);
            nb_add(&b, MCT_OP_RES_END, 0, 0, 0, 0.0f);
        } else {
            nb_add(&b, op, kind, w, k, alpha);
        }
        nb_add(&b, MCT_OP_DENSE, 1, 2, 0, 0.0f);
        const mct_net *net = nb_finish(&b);
        mct_opt o = make_opt(ok);
        char what[96];
        snprintf(what, sizeof what, "%s/%s", name, k_opt_names[ok]);
        fused_vs_buffered(net, &o, MCT_LOSS_MSE, 0.0f, 3, 5, 300u + ok + 16u * op + kind, what);
    }
}

static void test_fused_equals_buffered_sgd(void) { test_fused_equals_buffered_mixed(MCT_OPT_SGD); }
static void test_fused_equals_buffered_momentum(void) { test_fused_equals_buffered_mixed(MCT_OPT_MOMENTUM); }
static void test_fused_equals_buffered_rmsprop(void) { test_fused_equals_buffered_mixed(MCT_OPT_RMSPROP); }
static void test_fused_equals_buffered_rmsprop_momentum(void) {
    test_fused_equals_buffered_mixed(MCT_OPT_RMSPROP_MOMENTUM);
}
static void test_fused_equals_buffered_adam(void) { test_fused_equals_buffered_mixed(MCT_OPT_ADAM); }

static void test_fused_equals_buffered_linear(void) { fused_vs_buffered_layer(MCT_OP_DENSE, 1, 0.0f, 0, "linear"); }
static void test_fused_equals_buffered_dense(void) { fused_vs_buffered_layer(MCT_OP_DENSE, 0, 0.0f, 0, "dense"); }
static void test_fused_equals_buffered_bias(void) { fused_vs_buffered_layer(MCT_OP_BIAS, 0, 0.0f, 0, "bias"); }
static void test_fused_equals_buffered_activations(void) {
    static const char *names[8] = {"relu", "leaky_relu", "sigmoid", "tanh", "silu", "softplus", "sine", "cosine"};
    for (uint8_t a = 0; a < 8; a++) fused_vs_buffered_layer(MCT_OP_ACT, a, 0.3f, 0, names[a]);
}
static void test_fused_equals_buffered_softmax(void) {
    fused_vs_buffered_layer(MCT_OP_SOFTMAX, 0, 1.0f, 0, "softmax");
    fused_vs_buffered_layer(MCT_OP_SOFTMAX, 0, 0.7f, 0, "softmax_t0.7");
}
static void test_fused_equals_buffered_swish(void) { fused_vs_buffered_layer(MCT_OP_SWISH, 0, 0.0f, 0, "swish"); }
static void test_fused_equals_buffered_glu(void) {
    static const uint8_t gates[5] = {MCT_ACT_SIGMOID, MCT_ACT_RELU, MCT_ACT_LEAKY_RELU, MCT_ACT_TANH, MCT_ACT_SWISH};
    static const char *names[5] = {"glu_sigmoid", "glu_relu", "glu_leaky_relu", "glu_tanh", "glu_swish"};
    for (int g = 0; g < 5; g++) fused_vs_buffered_layer(MCT_OP_GLU, gates[g], 0.5f, 0, names[g]);
}
static void test_fused_equals_buffered_diag(void) { fused_vs_buffered_layer(MCT_OP_DIAG, 0, 0.0f, 0, "diag"); }
static void test_fused_equals_buffered_scale(void) { fused_vs_buffered_layer(MCT_OP_SCALE, 0, 0.0f, 0, "scale"); }
static void test_fused_equals_buffered_rmsnorm(void) {
    fused_vs_buffered_layer(MCT_OP_RMSNORM, 0, 1e-5f, 0, "rmsnorm");
}
static void test_fused_equals_buffered_dyt(void) { fused_vs_buffered_layer(MCT_OP_DYT, 0, 0.0f, 0, "dyt"); }
static void test_fused_equals_buffered_conv1d(void) {
    fused_vs_buffered_layer(MCT_OP_CONV1D, 0, 0.0f, 3, "conv1d_f3");
    fused_vs_buffered_layer(MCT_OP_CONV1D, 0, 0.0f, 1, "conv1d_f1");
}
static void test_fused_equals_buffered_residual(void) {
    fused_vs_buffered_layer(MCT_OP_RES_BEGIN, 0, 0.0f, 0, "residual");
    fused_vs_buffered_layer(MCT_OP_RES_SHORTCUT, 0, 0.0f, 0, "residual_projection");
}

/* The host layout (transposes in scratch) and the device layout store the same gradient sums. */
static void test_batch_grads_host_equals_device(void) {
    netb b;
    const mct_net *net = mixed_net(&b);
    const uint32_t nb = 5;
    rng_seed(41);
    float *p = falloc(net->n_params), *x = falloc((size_t)nb * net->n_in), *t = falloc((size_t)nb * net->n_out);
    init_params(net, p);
    for (size_t j = 0; j < (size_t)nb * net->n_in; j++) x[j] = rng_uniform(-1.0f, 1.0f);
    for (size_t j = 0; j < (size_t)nb * net->n_out; j++) t[j] = rng_uniform(0.0f, 1.0f);
    float *g[2], *arena[2], *scratch[2];
    float loss[2];
    for (int host = 0; host < 2; host++) {
        uint32_t sn = mct_scratch_size(net, nb, host, 0) + (uint32_t)net->n_out * nb;
        g[host] = falloc(net->n_params);
        memset(g[host], 0, sizeof(float) * net->n_params);
        arena[host] = falloc((size_t)net->arena * nb);
        scratch[host] = falloc(sn);
        loss[host] = mct_batch_grads(net, p, MCT_LOSS_MSE, 0.0f, x, t, nb, arena[host], scratch[host], sn, host,
                                     g[host]);
    }
    CHECK(same_bits(&loss[0], &loss[1], 1));
    CHECK(same_bits(g[0], g[1], net->n_params));
    /* the params were only read */
    float *p2 = falloc(net->n_params);
    rng_seed(41);
    init_params(net, p2);
    CHECK(same_bits(p, p2, net->n_params));
    for (int host = 0; host < 2; host++) {
        free(g[host]);
        free(arena[host]);
        free(scratch[host]);
    }
    free(p); free(p2); free(x); free(t);
}

/* mct_apply_part over [0, j) and [j, n_params), at every split point j, gives mct_apply's parameters and
 * optimizer state bit for bit (the threads of the host's train_batch each apply a range), for every optimizer
 * kind with clipping and L1/L2 (which only the first n_w parameters of a layer get) on the mixed network. */
static void test_apply_in_parts_equals_apply(void) {
    netb b;
    const mct_net *net = mixed_net(&b);
    uint32_t n = net->n_params;
    rng_seed(77);
    float *p0 = falloc(n), *g = falloc(n), *pw = falloc(n), *pp = falloc(n);
    float *s0 = falloc(2u * n), *sw = falloc(2u * n), *sp = falloc(2u * n);
    init_params(net, p0);
    for (uint32_t j = 0; j < n; j++) g[j] = rng_uniform(-2.0f, 2.0f);
    for (uint32_t j = 0; j < 2u * n; j++) s0[j] = rng_uniform(0.0f, 0.5f);
    for (uint8_t kind = 0; kind <= MCT_OPT_ADAM; kind++) {
        mct_opt o = make_opt(kind);
        mct_train_state ts = mct_train_state_init();
        mct_step st;
        CHECKF(mct_update_begin(net, &o, s0, &ts, g, 0.7f, &st) == MCT_OK, "%s: update_begin", k_opt_names[kind]);
        memcpy(pw, p0, sizeof(float) * n);
        memcpy(sw, s0, sizeof(float) * 2u * n);
        mct_apply(net, &o, &st, pw, g, mct_opt_slots(kind) ? sw : NULL, 3.0f);
        CHECKF(!same_bits(pw, p0, n), "%s: the apply changed nothing", k_opt_names[kind]);
        for (uint32_t split = 0; split <= n; split++) {
            memcpy(pp, p0, sizeof(float) * n);
            memcpy(sp, s0, sizeof(float) * 2u * n);
            float *state = mct_opt_slots(kind) ? sp : NULL;
            mct_apply_part(net, &o, &st, pp, g, state, 3.0f, split, n);   /* the later part first */
            mct_apply_part(net, &o, &st, pp, g, state, 3.0f, 0, split);
            CHECKF(same_bits(pp, pw, n), "%s: params differ when split at %u", k_opt_names[kind], (unsigned)split);
            CHECKF(same_bits(sp, sw, 2u * n), "%s: state differs when split at %u", k_opt_names[kind],
                   (unsigned)split);
        }
    }
    free(p0); free(g); free(pw); free(pp); free(s0); free(sw); free(sp);
}

/* The buffered update must not depend on what the grads buffer held before the step (the host
 * trainer hands in uninitialised memory): frozen layers have no gradient, and neither the similarity
 * penalty of momentum nor any finiteness check may read stale values there. */
static void test_buffered_step_ignores_stale_grads(void) {
    netb b;
    const mct_net *net = mixed_net(&b); /* has a frozen Linear */
    const uint32_t nb = 2;
    const float stale[3] = {0.0f, 3.0f, (float)NAN};
    for (int sim = 0; sim < 2; sim++) {
        mct_opt o = make_opt(MCT_OPT_MOMENTUM);
        o.sim_penalty = sim ? 0.5f : 0.0f;
        rng_seed(55);
        float *p0 = falloc(net->n_params), *x = falloc((size_t)nb * net->n_in);
        float *t = falloc((size_t)nb * net->n_out);
        init_params(net, p0);
        for (size_t j = 0; j < (size_t)nb * net->n_in; j++) x[j] = rng_uniform(-1.0f, 1.0f);
        for (size_t j = 0; j < (size_t)nb * net->n_out; j++) t[j] = rng_uniform(0.0f, 1.0f);
        run r[3];
        for (int c = 0; c < 3; c++) {
            run_init(&r[c], net, p0, o.kind, nb, 1);
            for (uint32_t j = 0; j < net->n_params; j++) r[c].grads[j] = stale[c];
            for (int s = 0; s < 3; s++) {
                float loss;
                int rc = run_step(&r[c], net, &o, MCT_LOSS_MSE, 0.0f, x, t, nb, &loss);
                CHECKF(rc == MCT_OK, "sim %d, stale %g, step %d: status %d", sim, (double)stale[c], s, rc);
            }
        }
        for (int c = 1; c < 3; c++) {
            CHECKF(same_bits(r[0].params, r[c].params, net->n_params), "sim %d: params depend on stale %g", sim,
                   (double)stale[c]);
            CHECKF(same_bits(r[0].state, r[c].state, net->n_params), "sim %d: state depends on stale %g", sim,
                   (double)stale[c]);
        }
        for (int c = 0; c < 3; c++) run_free(&r[c]);
        free(p0); free(x); free(t);
    }
}

/* The fused path refuses the similarity penalty (it needs all gradients first) and changes nothing. */
static void test_fused_rejects_similarity_penalty(void) {
    netb b;
    nb_init(&b, 3);
    nb_add(&b, MCT_OP_DENSE, 1, 2, 0, 0.0f);
    const mct_net *net = nb_finish(&b);
    float p0[8] = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, 0.01f, 0.02f};
    const float x[3] = {1, 2, 3}, t[2] = {0, 1};
    static const uint8_t kinds[2] = {MCT_OPT_MOMENTUM, MCT_OPT_RMSPROP_MOMENTUM};
    for (int c = 0; c < 2; c++) {
        mct_opt o = make_opt(kinds[c]);
        o.sim_penalty = 0.25f;
        run r;
        run_init(&r, net, p0, o.kind, 1, 0);
        float loss;
        CHECK(run_step(&r, net, &o, MCT_LOSS_MSE, 0.0f, x, t, 1, &loss) == MCT_E_UNSUPPORTED);
        CHECK(same_bits(r.params, p0, 8));
        CHECK(r.ts.step == 0);
        run_free(&r);
        /* the buffered path supports it */
        run_init(&r, net, p0, o.kind, 1, 1);
        CHECK(run_step(&r, net, &o, MCT_LOSS_MSE, 0.0f, x, t, 1, &loss) == MCT_OK);
        CHECK(!same_bits(r.params, p0, 8));
        CHECK(r.ts.step == 1);
        run_free(&r);
    }
}

/* Bad arguments: no samples, or scratch smaller than mct_scratch_size(net, nb, 0, 0) + n_out * nb. */
static void test_train_step_rejects_bad_args(void) {
    netb b;
    const mct_net *net = mixed_net(&b);
    rng_seed(3);
    float *p0 = falloc(net->n_params);
    init_params(net, p0);
    float x[2 * 5] = {0}, t[2 * 4] = {0};
    {
        mct_opt o = make_opt(MCT_OPT_ADAM);
        run r;
        run_init(&r, net, p0, o.kind, 2, 0);
        float loss;
        CHECK(mct_train_step(net, r.params, &o, r.state, &r.ts, MCT_LOSS_MSE, 0.0f, x, t, 0, r.arena, r.scratch,
                             r.scratch_n, &loss) == MCT_E_ARG);
        CHECK(mct_train_step(net, r.params, &o, r.state, &r.ts, MCT_LOSS_MSE, 0.0f, x, t, 2, r.arena, r.scratch,
                             r.scratch_n - 1, &loss) == MCT_E_ARG);
        CHECK(same_bits(r.params, p0, net->n_params));
        CHECK(r.ts.step == 0);
        run_free(&r);
    }
    free(p0);
}

/* ------------------------------------------------------------------------------------------------ */
/* non-finite inputs                                                                                */
/* ------------------------------------------------------------------------------------------------ */

/* A NaN (or inf) in the input: MCT_E_NONFINITE_INPUT, params, optimizer state and train state untouched,
 * on both paths and for every optimizer kind (after one good step, so the state is not all zeros). */
static void nonfinite_case(const mct_net *net, float bad, uint32_t where, const char *what) {
    const uint32_t nb = 3;
    for (uint8_t kind = 0; kind <= MCT_OPT_ADAM; kind++)
        for (int buffered = 0; buffered < 2; buffered++) {
            rng_seed(77u + kind);
            float *p0 = falloc(net->n_params), *x = falloc((size_t)nb * net->n_in);
            float *t = falloc((size_t)nb * net->n_out);
            init_params(net, p0);
            for (size_t j = 0; j < (size_t)nb * net->n_in; j++) x[j] = rng_uniform(-1.0f, 1.0f);
            for (size_t j = 0; j < (size_t)nb * net->n_out; j++) t[j] = rng_uniform(0.0f, 1.0f);
            mct_opt o = make_opt(kind);
            run r;
            run_init(&r, net, p0, kind, nb, buffered);
            float loss;
            /* one good step first, so the optimizer state is not all zeros */
            CHECK(run_step(&r, net, &o, MCT_LOSS_MSE, 0.0f, x, t, nb, &loss) == MCT_OK);
            float *pk = fdup(r.params, net->n_params);
            float *sk = r.slots ? fdup(r.state, (size_t)r.slots * net->n_params) : NULL;
            mct_train_state tk = r.ts;
            x[where % (nb * net->n_in)] = bad;
            int rc = run_step(&r, net, &o, MCT_LOSS_MSE, 0.0f, x, t, nb, &loss);
            CHECKF(rc == MCT_E_NONFINITE_INPUT, "%s/%s/%s: status %d", what, k_opt_names[kind],
                   buffered ? "buffered" : "fused", rc);
            CHECKF(same_bits(r.params, pk, net->n_params), "%s/%s/%s: params changed", what, k_opt_names[kind],
                   buffered ? "buffered" : "fused");
            if (sk) CHECKF(same_bits(r.state, sk, (size_t)r.slots * net->n_params), "%s: state %s", what, "changed");
            CHECKF(r.ts.step == tk.step && same_bits(&r.ts.b1t, &tk.b1t, 1) && same_bits(&r.ts.b2t, &tk.b2t, 1),
                   "%s: train state %s", what, "changed");
            free(pk); free(sk); free(p0); free(x); free(t);
            run_free(&r);
        }
}

static void test_nan_input_mixed_net(void) {
    netb b;
    const mct_net *net = mixed_net(&b);
    nonfinite_case(net, (float)NAN, 0, "nan@0");
    nonfinite_case(net, (float)NAN, 7, "nan@7");
    nonfinite_case(net, (float)NAN, 14, "nan@14");
}

/* An infinite input behind Tanh: tanh(inf) = 1 makes the loss finite, yet the first layer's weight
 * gradients (inf * gy) are not: the step must still be refused. */
static void test_inf_input_mixed_net(void) {
    netb b;
    const mct_net *net = mixed_net(&b);
    nonfinite_case(net, (float)INFINITY, 3, "inf@3");
    nonfinite_case(net, -(float)INFINITY, 11, "-inf@11");
}

/* The same behind a ReLU: ReLU must not turn a NaN input into a finite loss while the first
 * layer's weight gradients (NaN * 0) are NaN. */
static void test_nan_input_relu_net(void) {
    netb b;
    nb_init(&b, 4);
    nb_add(&b, MCT_OP_DENSE, 1, 5, 0, 0.0f);
    nb_add(&b, MCT_OP_ACT, MCT_ACT_RELU, 5, 0, 0.0f);
    nb_add(&b, MCT_OP_DENSE, 1, 2, 0, 0.0f);
    const mct_net *net = nb_finish(&b);
    nonfinite_case(net, (float)NAN, 1, "relu-net nan@1");
}

/* A NaN in the target is rejected the same way. */
static void test_nan_target(void) {
    netb b;
    const mct_net *net = mixed_net(&b);
    const uint32_t nb = 2;
    rng_seed(91);
    float *p0 = falloc(net->n_params);
    init_params(net, p0);
    float x[2 * 5], t[2 * 4];
    for (int j = 0; j < 10; j++) x[j] = rng_uniform(-1.0f, 1.0f);
    for (int j = 0; j < 8; j++) t[j] = 0.25f;
    t[5] = (float)NAN;
    for (int buffered = 0; buffered < 2; buffered++) {
        mct_opt o = make_opt(MCT_OPT_ADAM);
        run r;
        run_init(&r, net, p0, o.kind, nb, buffered);
        float loss;
        CHECK(run_step(&r, net, &o, MCT_LOSS_MSE, 0.0f, x, t, nb, &loss) == MCT_E_NONFINITE_INPUT);
        CHECK(same_bits(r.params, p0, net->n_params));
        CHECK(r.ts.step == 0);
        run_free(&r);
    }
    free(p0);
}

/* ------------------------------------------------------------------------------------------------ */
/* losses                                                                                           */
/* ------------------------------------------------------------------------------------------------ */

/* The loss value and gradient of one sample against values computed in double from the formulas
 * (relative tolerance tol, absolute below 1: a few float roundings, far below any formula error). */
static void check_loss(uint8_t kind, float param, const float *y, const float *t, uint16_t n, double want,
                       const double *want_g, double tol, const char *what) {
    float g[8];
    float v = mct_loss(kind, param, y, t, n, g);
    CHECKF(close_to(v, want, tol), "%s: loss %.9g want %.9g", what, (double)v, want);
    for (uint16_t j = 0; j < n; j++)
        CHECKF(close_to(g[j], want_g[j], tol), "%s: grad[%u] %.9g want %.9g", what, (unsigned)j, (double)g[j],
               want_g[j]);
    /* the same value again: nothing depends on what the gradient buffer held before */
    float g2[8];
    for (uint16_t j = 0; j < 8; j++) g2[j] = 1e30f;
    float v2 = mct_loss(kind, param, y, t, n, g2);
    CHECKF(same_bits(&v, &v2, 1), "%s: value on a second call %.9g", what, (double)v2);
}

static void test_loss_mse(void) {
    const float y[3] = {1.0f, 2.0f, 3.0f}, t[3] = {0.5f, 2.0f, 5.0f};
    /* d = [0.5, 0, -2]: mean d^2 = 4.25 / 3; grad 2 d / 3 */
    const double g[3] = {1.0 / 3.0, 0.0, -4.0 / 3.0};
    check_loss(MCT_LOSS_MSE, 0.0f, y, t, 3, 4.25 / 3.0, g, 4e-7, "mse");
}

static void test_loss_huber(void) {
    const float y[4] = {1.5f, -1.0f, 2.0f, 0.0f}, t[4] = {1.0f, 2.0f, 1.0f, 0.0f};
    /* b = 1, d = [0.5, -3, 1, 0]: 0.125, 1*(3 - 0.5) = 2.5, |d| = b takes the linear branch: 0.5, 0 */
    const double g[4] = {0.5 / 4.0, -1.0 / 4.0, 1.0 / 4.0, 0.0};
    check_loss(MCT_LOSS_HUBER, 1.0f, y, t, 4, (0.125 + 2.5 + 0.5 + 0.0) / 4.0, g, 4e-7, "huber_b1");
    /* b = 2: d = [0.5, -3, 1, 0] -> 0.125, 2*(3 - 1) = 4, 0.5, 0 */
    const double g2[4] = {0.5 / 4.0, -2.0 / 4.0, 1.0 / 4.0, 0.0};
    check_loss(MCT_LOSS_HUBER, 2.0f, y, t, 4, (0.125 + 4.0 + 0.5) / 4.0, g2, 4e-7, "huber_b2");
}

static void test_loss_bce(void) {
    const float y[4] = {0.9f, 0.2f, 0.0f, 0.6f}, t[4] = {1.0f, 0.0f, 0.0f, 0.5f};
    double want = 0.0, g[4];
    for (int j = 0; j < 4; j++) {
        /* clamped probability: 0 becomes 1e-7 */
        double p = y[j] < 1e-7f ? (double)1e-7f : (double)y[j], tj = t[j];
        want += -(tj * log(p) + (1.0 - tj) * log(1.0 - p));
        g[j] = (p - tj) / (p * (1.0 - p)) / 4.0;
    }
    check_loss(MCT_LOSS_BCE, 0.0f, y, t, 4, want / 4.0, g, 2e-6, "bce");
    /* a probability of exactly 1 is clamped too: finite loss and gradient */
    const float y1[1] = {1.0f}, t1[1] = {0.0f};
    float g1;
    float v = mct_loss(MCT_LOSS_BCE, 0.0f, y1, t1, 1, &g1);
    CHECK(is_finite(v) && v > 15.0f && is_finite(g1) && g1 > 0.0f);
}

static void test_loss_cross_entropy(void) {
    const float y[3] = {0.7f, 0.2f, 0.1f}, t[3] = {0.0f, 1.0f, 0.0f};
    const double g[3] = {0.0, -1.0 / (double)0.2f, 0.0};
    check_loss(MCT_LOSS_XENT, 0.0f, y, t, 3, -log((double)0.2f), g, 2e-6, "xent_onehot");
    const float t2[3] = {0.25f, 0.5f, 0.25f};
    double w2 = -(0.25 * log((double)0.7f) + 0.5 * log((double)0.2f) + 0.25 * log((double)0.1f));
    const double g2[3] = {-0.25 / (double)0.7f, -0.5 / (double)0.2f, -0.25 / (double)0.1f};
    check_loss(MCT_LOSS_XENT, 0.0f, y, t2, 3, w2, g2, 2e-6, "xent_soft");
    /* a zero probability is clamped at 1e-30: finite */
    const float y0[2] = {0.0f, 1.0f}, t0[2] = {1.0f, 0.0f};
    float g0[2];
    float v = mct_loss(MCT_LOSS_XENT, 0.0f, y0, t0, 2, g0);
    CHECK(close_to(v, -log((double)1e-30f), 2e-6) && is_finite(g0[0]) && g0[1] == 0.0f);
}

/* Cross-entropy after a final Softmax(T) is fused: (p - t) / T w.r.t. the logits, even when the true class's
 * probability underflows (gap 10 at T = 0.1, far beyond 69 T), and the loss is the log-softmax one. */
static void test_softmax_xent_fused(void) {
    netb b;
    nb_init(&b, 4);
    nb_add(&b, MCT_OP_SOFTMAX, 0, 4, 0, 0.1f);
    const mct_net *net = nb_finish(&b);
    CHECK(mct_net_check(net) == MCT_OK);
    CHECK(mct_loss_fused(net, MCT_LOSS_XENT) && !mct_loss_fused(net, MCT_LOSS_MSE));
    const float x[4] = {10.0f, 0.0f, 0.5f, -0.5f}, t[4] = {0.0f, 1.0f, 0.0f, 0.0f};
    float arena[8], gin[4], scratch[64];
    uint32_t sn = mct_scratch_size(net, 1, 0, 1) + 4u;
    CHECK(sn <= 64u);
    mct_forward(net, NULL, x, arena, 1);
    mct_sink sink = {NULL, 0, 0, 0, 0, 1.0f};
    float loss = mct_loss_backward(net, NULL, arena, 1, MCT_LOSS_XENT, 0.0f, t, gin, &sink, scratch, sn, 0);
    double z[4], m = 0.0, lse;
    for (int j = 0; j < 4; j++) z[j] = (double)x[j] / (double)0.1f;
    lse = 0.0;
    for (int j = 0; j < 4; j++) lse += exp(z[j] - z[0]);
    lse = z[0] + log(lse);
    CHECKF(close_to(loss, lse - z[1], 1e-6), "loss %g", (double)loss);
    for (int j = 0; j < 4; j++) {
        double p = exp(z[j] - lse), want = (p - (double)t[j]) / (double)0.1f;
        m = fabs((double)gin[j] - want);
        CHECKF(m <= 1e-5 * (fabs(want) + 1e-3), "dL/dx[%d] = %g, want %g", j, (double)gin[j], want);
    }
}

static void test_loss_cosine(void) {
    const float y[3] = {1.0f, 0.0f, 0.0f}, t[3] = {1.0f, 1.0f, 0.0f};
    /* c = 1 / sqrt 2; grad = -(t / (|y||t|) - c y / |y|^2) = [0, -1/sqrt2, 0] */
    double c = 1.0 / sqrt(2.0);
    const double g[3] = {-(1.0 / sqrt(2.0) - c), -1.0 / sqrt(2.0), 0.0};
    check_loss(MCT_LOSS_COSINE, 0.0f, y, t, 3, 1.0 - c, g, 2e-6, "cosine");
    const float y2[3] = {3.0f, -4.0f, 0.0f}, t2[3] = {0.0f, 2.0f, 1.0f};
    double ny = 5.0, nt = sqrt(5.0), yt = -8.0, c2 = yt / (ny * nt);
    double g2[3];
    for (int j = 0; j < 3; j++) g2[j] = -((double)t2[j] / (ny * nt) - c2 * (double)y2[j] / (ny * ny));
    check_loss(MCT_LOSS_COSINE, 0.0f, y2, t2, 3, 1.0 - c2, g2, 2e-6, "cosine_2");
    /* a zero vector: loss 1, gradient 0 */
    const float z[3] = {0.0f, 0.0f, 0.0f};
    const double g0[3] = {0.0, 0.0, 0.0};
    check_loss(MCT_LOSS_COSINE, 0.0f, z, t, 3, 1.0, g0, 2e-6, "cosine_zero_y");
    check_loss(MCT_LOSS_COSINE, 0.0f, y, z, 3, 1.0, g0, 2e-6, "cosine_zero_t");
}

/* The loss a training step reports is the mean of the per-sample losses of its forward pass. */
static void test_train_step_loss_is_batch_mean(void) {
    netb b;
    const mct_net *net = mixed_net(&b);
    const uint32_t nb = 4;
    rng_seed(23);
    float *p0 = falloc(net->n_params), *x = falloc((size_t)nb * net->n_in), *t = falloc((size_t)nb * net->n_out);
    init_params(net, p0);
    for (size_t j = 0; j < (size_t)nb * net->n_in; j++) x[j] = rng_uniform(-1.0f, 1.0f);
    for (size_t j = 0; j < (size_t)nb * net->n_out; j++) t[j] = rng_uniform(0.0f, 1.0f);
    float *arena = falloc((size_t)net->arena * nb);
    float *y = mct_forward(net, p0, x, arena, nb);
    double sum = 0.0;
    float *g = falloc(net->n_out);
    for (uint32_t s = 0; s < nb; s++)
        sum += mct_loss(MCT_LOSS_HUBER, 0.3f, y + s * net->n_out, t + s * net->n_out, net->n_out, g);
    for (int buffered = 0; buffered < 2; buffered++) {
        mct_opt o = make_opt(MCT_OPT_SGD);
        run r;
        run_init(&r, net, p0, o.kind, nb, buffered);
        float loss = -1.0f;
        CHECK(run_step(&r, net, &o, MCT_LOSS_HUBER, 0.3f, x, t, nb, &loss) == MCT_OK);
        CHECKF(close_to(loss, sum / nb, 1e-6), "loss %.9g want %.9g", (double)loss, sum / nb);
        run_free(&r);
    }
    free(arena); free(p0); free(x); free(t); free(g);
}

/* ------------------------------------------------------------------------------------------------ */
/* full-integer int8 ops: QUANT, QDENSE, QLUT, DEQUANT                                              */
/* ------------------------------------------------------------------------------------------------ */

/* Append a full-integer op (frozen, constants at byte p_off of the blob) to a network. Its int8 output
 * takes ceil(n_out / 4) floats per sample, as documented in mct.h (DEQUANT writes f32). */
static int nb_add_q(netb *b, uint8_t op, uint16_t n_out, uint32_t p_off) {
    int idx = nb_add(b, op, 0, n_out, 0, 0.0f);
    mct_layer *L = &b->L[idx];
    L->trainable = 0;
    L->storage = MCT_STORE_Q;
    L->p_off = p_off;
    if (op != MCT_OP_DEQUANT) b->arena -= L->n_out - (L->n_out + 3u) / 4u;   /* int8 output */
    return idx;
}

/* Little-endian writers into a test blob. */
static void put_f32(uint8_t *p, float v) { memcpy(p, &v, 4); }
static void put_i32(uint8_t *p, int32_t v) { memcpy(p, &v, 4); }

/* The blob of the hand-worked network below (offsets: QUANT 0, QDENSE 8, QLUT 80, DEQUANT 336). */
static uint32_t g_qblob_words[86];

/* QUANT(3) -> QDENSE(3, 3) -> QLUT(3) -> DEQUANT(3), constants chosen so every value is worked out by
 * hand in test_quant_ops_by_hand; returns the net (cdata set). */
static const mct_net *hand_q_net(netb *b) {
    uint8_t *c = (uint8_t *)g_qblob_words;
    memset(g_qblob_words, 0, sizeof g_qblob_words);
    /* QUANT: inv_scale 2, zero point -1 */
    put_f32(c + 0, 2.0f); put_i32(c + 4, -1);
    /* QDENSE: zx -1, zy 3; bias {10, -7, 0} - zx * (row sums {2, -1, 1}) = {12, -8, 1} (the exporter folds the
     * input zero point into the bias); mult/2^shift = 0.5, 3/16, 0.5; W[o][i] rows */
    put_i32(c + 8, -1); put_i32(c + 12, 3);
    put_i32(c + 16, 12); put_i32(c + 20, -8); put_i32(c + 24, 1);
    put_i32(c + 28, 1 << 30); put_i32(c + 32, 3 << 29); put_i32(c + 36, 1 << 30);
    put_i32(c + 40, 31); put_i32(c + 44, 33); put_i32(c + 48, 31);
    static const int8_t w[9] = {1, -2, 3, -128, 127, 0, 0, 0, 1};
    memcpy(c + 52, w, 9);
    /* QLUT at 64 + 16 = 80 (QDENSE takes 8 + 36 + 12 padded = 56 bytes, 8 + 56 = 64; keep 16 spare):
     * T[i] = 127 - i, i.e. y = -1 - x */
    for (int i = 0; i < 256; i++) c[80 + i] = (uint8_t)(int8_t)(127 - i);
    /* DEQUANT: scale 0.5, zero point -4 */
    put_f32(c + 336, 0.5f); put_i32(c + 340, -4);
    nb_init(b, 3);
    nb_add_q(b, MCT_OP_QUANT, 3, 0);
    nb_add_q(b, MCT_OP_QDENSE, 3, 8);
    nb_add_q(b, MCT_OP_QLUT, 3, 80);
    nb_add_q(b, MCT_OP_DEQUANT, 3, 336);
    const mct_net *net = nb_finish(b);
    b->net.cdata = c;
    b->net.cdata_size = 344;
    return net;
}

/* The limit constants of the QDENSE limit tests: biases +-(2^31 - 1), -2^31, 0, 12345 (output o takes
 * qlim_bias[o % 5]) and multipliers -2^31, 2^31 - 1, -1, 0, 2^30. */
static const int32_t qlim_bias[5] = {INT32_MAX, INT32_MIN, -INT32_MAX, 0, 12345};
static const int32_t qlim_mult[5] = {INT32_MIN, INT32_MAX, -1, 0, 1 << 30};

/* One run of a QDENSE limit test: QUANT (scale 1) -> QDENSE of 9 inputs and o_n <= 45 outputs -> DEQUANT. */
typedef struct {
    int o_n, n_shift;
    const int32_t *shift;   /* output o's shift: shift[o % n_shift] */
    int8_t w[45][9];        /* random, -128 on the diagonal */
    float x[3 * 9];         /* the extreme codes, 127 everywhere, random codes */
    uint32_t blob[(8 + 8 + 12 * 45 + 408 + 8) / 4];
    float *arena;           /* the forward pass's arena (free it) */
    const int8_t *got;      /* the QDENSE's int8 outputs, sample s at s * 4 * ((o_n + 3) / 4) */
} qlim_run;

/* Output o's multiplier: the five multipliers in turn, each for n_shift outputs in a row (every shift). */
static int32_t qlim_mult_of(const qlim_run *r, int o) { return qlim_mult[(o / r->n_shift) % 5]; }

/* Build and run r's net (output zero point zy, every shift word or-ed with flag, weights and codes from seed). */
static void qlim_forward(qlim_run *r, int32_t zy, uint32_t flag, uint32_t seed) {
    enum { N = 9 };
    const int O = r->o_n;
    uint8_t *c = (uint8_t *)r->blob;
    memset(r->blob, 0, sizeof r->blob);
    put_f32(c, 1.0f); put_i32(c + 4, 0);                       /* QUANT: the code is the input, rounded */
    uint8_t *q = c + 8;
    put_i32(q, 77); put_i32(q + 4, zy);                        /* zx (not read), zy */
    rng_seed(seed);
    for (int o = 0; o < O; o++) {
        put_i32(q + 8 + 4 * o, qlim_bias[o % 5]);
        put_i32(q + 8 + 4 * (O + o), qlim_mult_of(r, o));
        put_i32(q + 8 + 4 * (2 * O + o), (int32_t)((uint32_t)r->shift[o % r->n_shift] | flag));
        for (int i = 0; i < N; i++) r->w[o][i] = (int8_t)(i == o % N ? -128 : (int)rng_uniform(-128.0f, 128.0f));
    }
    for (int o = 0; o < O; o++) memcpy(q + 8 + 12 * O + N * o, r->w[o], N);
    uint32_t dq = 8u + 8u + 12u * (uint32_t)O + ((N * (uint32_t)O + 3u) & ~3u);
    put_f32(c + dq, 1.0f); put_i32(c + dq + 4, 0);
    netb b;
    nb_init(&b, N);
    nb_add_q(&b, MCT_OP_QUANT, N, 0);
    nb_add_q(&b, MCT_OP_QDENSE, (uint32_t)O, 8);
    nb_add_q(&b, MCT_OP_DEQUANT, (uint32_t)O, dq);
    const mct_net *net = nb_finish(&b);
    b.net.cdata = c;
    b.net.cdata_size = (uint32_t)sizeof r->blob;
    CHECK(mct_net_check(net) == MCT_OK);
    for (int i = 0; i < N; i++) r->x[i] = i % 2 ? 127.0f : -128.0f;
    for (int i = N; i < 2 * N; i++) r->x[i] = 127.0f;
    for (int i = 2 * N; i < 3 * N; i++) r->x[i] = (float)(int)rng_uniform(-128.0f, 128.0f);
    r->arena = falloc((size_t)net->arena * 3);
    mct_forward(net, NULL, r->x, r->arena, 3);
    r->got = (const int8_t *)(r->arena + (size_t)b.L[1].out_off * 3);
}

/* Sample s's accumulator for output o as the kernel saturates it: bias + x.w within +-(2^31 - 1). */
static int64_t qlim_acc(const qlim_run *r, int s, int o) {
    int64_t acc = qlim_bias[o % 5];
    for (int i = 0; i < 9; i++) acc += (int64_t)r->x[s * 9 + i] * r->w[o][i];
    return acc > INT32_MAX ? INT32_MAX : (acc < -INT32_MAX ? -INT32_MAX : acc);
}

/* Check every output of r against want(s, o) (from int64 arithmetic, clamped to int8), then free the arena. */
static void qlim_check(qlim_run *r, int (*want)(const qlim_run *, int, int), const char *what) {
    for (int s = 0; s < 3; s++)
        for (int o = 0; o < r->o_n; o++) {
            int got = r->got[(size_t)s * 4 * ((r->o_n + 3) / 4) + o], w = want(r, s, o);
            CHECKF(got == w, "%s sample %d output %d: %d want %d", what, s, o, got, w);
        }
    free(r->arena);
}

static int qlim_clamp8(int64_t r) { return r < -128 ? -128 : (r > 127 ? 127 : (int)r); }

/* mct.h's requantization: (acc m) / 2^n rounded half away from zero, n in [1, 62], magnitude at most 2^30,
 * plus the output zero point -3. */
static int qlim_want_mct(const qlim_run *r, int s, int o) {
    int64_t p = qlim_acc(r, s, o) * qlim_mult_of(r, o);
    int n = r->shift[o % r->n_shift] < 1 ? 1 : (r->shift[o % r->n_shift] > 62 ? 62 : r->shift[o % r->n_shift]);
    uint64_t mag = ((uint64_t)(p < 0 ? -p : p) + ((uint64_t)1 << (n - 1))) >> n;
    int64_t v = (int64_t)(mag > (1u << 30) ? (1u << 30) : mag);
    return qlim_clamp8((p < 0 ? -v : v) - 3);
}

/* QDENSE with every limit multiplier beside every shift of -1000, 0, 1, 31, 32, 33, 62, 63, 1000 (and the limit
 * biases) over int8 codes that include -128 and 127 and weights that include -128: no undefined behaviour (this
 * test runs under UBSan) and every output equal to the documented formula worked out here in int64. */
static void test_qdense_at_the_limits(void) {
    static const int32_t shift[9] = {-1000, 0, 1, 31, 32, 33, 62, 63, 1000};
    static qlim_run r;
    r.o_n = 45; r.n_shift = 9; r.shift = shift;
    qlim_forward(&r, -3, 0, 99);
    qlim_check(&r, qlim_want_mct, "mct");
}

/* gemmlowp's RoundingDivideByPOT of v by 2^k, worked out here with a floor division and the remainder. */
static int64_t tfl_rdbpot(int64_t v, int k) {
    if (k == 0) return v;
    int64_t d = (int64_t)1 << k, fl = v / d;
    if (v % d != 0 && v < 0) fl -= 1;
    int64_t rem = v - fl * d, thr = (d - 1) / 2 + (v < 0 ? 1 : 0);
    return fl + (rem > thr ? 1 : 0);
}

/* TFLite Micro's MultiplyByQuantizedMultiplier as mct.h documents it (left shift saturated,
 * SaturatingRoundingDoublingHighMul, RoundingDivideByPOT), in int64, plus the output zero point 5. */
static int qlim_want_tflite(const qlim_run *r, int s, int o) {
    int n = r->shift[o % r->n_shift];
    int64_t m = qlim_mult_of(r, o), acc = qlim_acc(r, s, o);
    int64_t v = n < 31 ? acc * ((int64_t)1 << (31 - n)) : acc;
    v = v > INT32_MAX ? INT32_MAX : (v < INT32_MIN ? INT32_MIN : v);
    int64_t h;
    if (v == INT32_MIN && m == INT32_MIN) {
        h = INT32_MAX;
    } else {
        int64_t p = v * m, nudge = p >= 0 ? ((int64_t)1 << 30) : 1 - ((int64_t)1 << 30);
        h = (p + nudge) / ((int64_t)1 << 31);           /* C99 division truncates, as gemmlowp's */
    }
    int64_t q = tfl_rdbpot(h, n > 31 ? n - 31 : 0);
    return qlim_clamp8((q > (1 << 30) ? (1 << 30) : (q < -(1 << 30) ? -(1 << 30) : q)) + 5);
}

/* QDENSE whose shift words carry MCT_QSHIFT_TFLITE (an imported .tflite), with the limit constants and shifts
 * 1, 30, 31, 32, 33, 62 (TFLite's 30 .. -31), over extreme codes: no undefined behaviour (UBSan) and every
 * output as qlim_want_tflite works it out. */
static void test_qdense_tflite_rounding_at_the_limits(void) {
    static const int32_t shift[6] = {1, 30, 31, 32, 33, 62};
    static qlim_run r;
    r.o_n = 30; r.n_shift = 6; r.shift = shift;
    qlim_forward(&r, 5, MCT_QSHIFT_TFLITE, 7);
    qlim_check(&r, qlim_want_tflite, "tflite");
}

/* ------------------------------------------------------------------------------------------------ */
/* the op list (MCT_OP_LIST): every op dispatches, and its own sizes agree with the documented ones  */
/* ------------------------------------------------------------------------------------------------ */

/* Run net's forward pass twice, from an arena filled with 0xFF bytes and then with 0x00 bytes; every
 * layer's output region must come out the same both times (so the dispatch reached a kernel that wrote
 * it) and, for f32 outputs, finite. Marks each op seen. */
static mct_net *qres_net(netb *bp, int projection, int32_t lo, int32_t hi);

static void check_dispatch(const mct_net *net, const float *params, int *seen) {
    const uint32_t nb = 2;
    size_t n = (size_t)net->arena * nb;
    float *a0 = falloc(n), *a1 = falloc(n), *x = falloc((size_t)net->n_in * nb);
    for (size_t j = 0; j < (size_t)net->n_in * nb; j++) x[j] = rng_uniform(-1.0f, 1.0f);
    memset(a0, 0xFF, n * sizeof(float));
    memset(a1, 0x00, n * sizeof(float));
    mct_forward(net, params, x, a0, nb);
    mct_forward(net, params, x, a1, nb);
    for (uint16_t l = 0; l < net->n_layers; l++) {
        const mct_layer *L = &net->layers[l];
        mct_layer_size sz;
        CHECKF(mct_layer_size_of(L, nb, 0, &sz), "layer %u (op %u): its op rejects it", l, L->op);
        size_t off = (size_t)L->out_off * nb, w = (size_t)sz.out * nb;
        if (mct_layer_writes_i8(L)) {   /* n_out bytes per sample, at a stride of sz.out floats */
            for (uint32_t smp = 0; smp < nb; smp++)
                CHECKF(memcmp(a0 + off + (size_t)smp * sz.out, a1 + off + (size_t)smp * sz.out, L->n_out) == 0,
                       "op %u: forward did not write its output", L->op);
        } else {
            CHECKF(memcmp(a0 + off, a1 + off, w * sizeof(float)) == 0, "op %u: forward did not write its output",
                   L->op);
        }
        if (!mct_layer_writes_i8(L))
            for (size_t j = 0; j < w; j++) CHECKF(is_finite(a1[off + j]), "op %u: output %u not finite", L->op, (unsigned)j);
        if (L->op < 32) seen[L->op] = 1;
    }
    free(a0); free(a1); free(x);
}

/* Every op of MCT_OP_LIST is in one of two example networks, each layer of which its forward dispatch
 * writes; the backward pass of the f32 one reaches every layer with parameters; mct_layer_size_of gives the
 * parameter and aux counts documented for each op (spec_params, spec_aux); the list's values fit the masks. */
static void test_op_list_dispatch(void) {
    int seen[32] = {0};
    netb b;
    rng_seed(4242);
    nb_init(&b, 5);
    nb_add(&b, MCT_OP_DENSE, 1, 4, 0, 0.0f);
    nb_add(&b, MCT_OP_BIAS, 0, 4, 0, 0.0f);
    nb_add(&b, MCT_OP_ACT, MCT_ACT_TANH, 4, 0, 0.0f);
    nb_add(&b, MCT_OP_SOFTMAX, 0, 4, 0, 1.5f);
    nb_add(&b, MCT_OP_SWISH, 0, 4, 0, 0.0f);
    nb_add(&b, MCT_OP_GLU, MCT_ACT_SWISH, 4, 0, 0.0f);
    nb_add(&b, MCT_OP_DIAG, 0, 4, 0, 0.0f);
    nb_add(&b, MCT_OP_SCALE, 0, 4, 0, 0.0f);
    nb_add(&b, MCT_OP_RMSNORM, 0, 4, 0, 1e-5f);
    nb_add(&b, MCT_OP_DYT, 0, 4, 0, 0.0f);
    nb_add(&b, MCT_OP_CONV1D, 0, 3, 2, 0.0f);
    nb_add(&b, MCT_OP_RES_BEGIN, 0, 3, 0, 0.0f);
    nb_add(&b, MCT_OP_ACT, MCT_ACT_SIGMOID, 3, 0, 0.0f);
    nb_add(&b, MCT_OP_RES_END, 0, 3, 0, 0.0f);
    nb_add(&b, MCT_OP_RES_BEGIN, 0, 3, 0, 0.0f);   /* a block with a projection: 3 -> 2 both ways */
    nb_add(&b, MCT_OP_DENSE, 1, 2, 0, 0.0f);
    nb_add(&b, MCT_OP_RES_SHORTCUT, 0, 0, 0, 0.0f);
    nb_add(&b, MCT_OP_DENSE, 0, 2, 0, 0.0f);
    nb_add(&b, MCT_OP_RES_END, 0, 2, 0, 0.0f);
    const mct_net *net = nb_finish(&b);
    CHECK(mct_net_check(net) == MCT_OK);
    float *p = falloc(net->n_params);
    init_params(net, p);
    check_dispatch(net, p, seen);
    for (uint16_t l = 0; l < net->n_layers; l++) {
        const mct_layer *L = &net->layers[l];
        mct_layer_size sz;
        mct_layer_size_of(L, 1, 0, &sz);
        CHECKF(sz.params == spec_params(L->op, L->kind, L->n_in, L->n_out, L->k), "op %u: %u params", L->op, sz.params);
        CHECKF(sz.aux == spec_aux(L->op, L->n_out), "op %u: %u aux floats", L->op, sz.aux);
    }
    /* backward: dL/dx finite, and a gradient for every layer with parameters */
    const uint32_t nb = 2;
    float *x = falloc((size_t)net->n_in * nb), *gout = falloc((size_t)net->n_out * nb);
    float *gin = falloc((size_t)net->n_in * nb), *grads = falloc(net->n_params);
    float *arena = falloc((size_t)net->arena * nb);
    uint32_t sn = mct_scratch_size(net, nb, 0, 1);
    float *scratch = falloc(sn);
    for (size_t j = 0; j < (size_t)net->n_in * nb; j++) x[j] = rng_uniform(-1.0f, 1.0f);
    for (size_t j = 0; j < (size_t)net->n_out * nb; j++) gout[j] = rng_uniform(-1.0f, 1.0f);
    memset(grads, 0, net->n_params * sizeof(float));
    mct_forward(net, p, x, arena, nb);
    mct_sink sink = {grads, 0, 0, 0, 0, 1.0f};
    mct_backward(net, p, arena, nb, gout, gin, &sink, scratch, sn, 0);
    for (size_t j = 0; j < (size_t)net->n_in * nb; j++) CHECK(is_finite(gin[j]));
    for (uint16_t l = 0; l < net->n_layers; l++) {
        const mct_layer *L = &net->layers[l];
        int any = 0;
        for (uint32_t j = 0; j < L->n_p; j++) any |= grads[L->p_off + j] != 0.0f;
        CHECKF(!L->n_p || any, "op %u: backward gave no parameter gradient", L->op);
    }
    free(x); free(gout); free(gin); free(grads); free(arena); free(scratch); free(p);
    /* the full-integer ops */
    const mct_net *qnet = hand_q_net(&b);
    CHECK(mct_net_check(qnet) == MCT_OK);
    check_dispatch(qnet, NULL, seen);
    /* the int8 residual block (QRES_END) of test_qres_end_by_hand, with a projection */
    qnet = qres_net(&b, 1, -128, 127);
    CHECK(mct_net_check(qnet) == MCT_OK);
    check_dispatch(qnet, NULL, seen);
    /* the spatial ops, on a 4x3x2 input */
    static const mct_layer S[6] = {
        {.op = MCT_OP_CONV2D, .kind = 1, .trainable = 1, .n_in = 24, .n_out = 18, .lr_div = 1.0f, .n_p = 57, .n_w = 54,
         .out_off = 24, .h_in = 4, .w_in = 3, .c_in = 2, .h_out = 2, .w_out = 3, .c_out = 3, .kh = 3, .kw = 3, .sh = 2,
         .sw = 1, .pt = 1, .pl = 1},
        {.op = MCT_OP_DWCONV2D, .kind = 1, .trainable = 1, .n_in = 18, .n_out = 36, .lr_div = 1.0f, .p_off = 57,
         .n_p = 42, .n_w = 36, .in_off = 24, .out_off = 42, .h_in = 2, .w_in = 3, .c_in = 3, .h_out = 2, .w_out = 3,
         .c_out = 6, .kh = 2, .kw = 3, .sh = 1, .sw = 1, .pt = 1, .pl = 1},
        {.op = MCT_OP_BATCHNORM, .trainable = 1, .n_in = 36, .n_out = 36, .alpha = 1e-3f, .lr_div = 1.0f, .p_off = 99,
         .n_p = 24, .in_off = 42, .out_off = 78, .c_in = 6, .beta = 0.1f},
        {.op = MCT_OP_MAXPOOL2D, .n_in = 36, .n_out = 12, .lr_div = 1.0f, .in_off = 78, .out_off = 114, .h_in = 2,
         .w_in = 3, .c_in = 6, .h_out = 1, .w_out = 2, .c_out = 6, .kh = 2, .kw = 2, .sh = 2, .sw = 2},
        {.op = MCT_OP_AVGPOOL2D, .n_in = 12, .n_out = 6, .lr_div = 1.0f, .in_off = 114, .out_off = 126, .h_in = 1,
         .w_in = 2, .c_in = 6, .h_out = 1, .w_out = 1, .c_out = 6, .kh = 1, .kw = 2, .sh = 1, .sw = 1},
        {.op = MCT_OP_DROPOUT, .kind = 1, .trainable = 1, .n_in = 6, .n_out = 6, .k = 7, .alpha = 0.25f,
         .lr_div = 1.0f, .p_off = 123, .n_p = 1, .in_off = 126, .out_off = 132},
    };
    mct_net snet;
    memset(&snet, 0, sizeof snet);
    snet.layers = S;
    snet.n_layers = 6;
    snet.n_in = 24;
    snet.n_out = 6;
    snet.max_width = 36;
    snet.n_params = 124;
    snet.arena = 138;
    snet.out_off = 132;
    CHECK(mct_net_check(&snet) == MCT_OK);
    float *sp = falloc(124);
    for (uint32_t j = 0; j < 124; j++) sp[j] = rng_uniform(0.5f, 1.0f); /* BatchNorm's variances stay positive */
    sp[123] = 3.0f;                                                         /* Dropout's step counter */
    check_dispatch(&snet, sp, seen);
    free(sp);
    /* the spatial full-integer ops on the same shapes: QUANT -> QCONV2D -> QDWCONV2D -> QMAXPOOL2D -> QAVGPOOL2D ->
     * DEQUANT; blob: QUANT at 0, QCONV2D at 8 (8 + 36 + 56 bytes), QDWCONV2D at 108 (8 + 72 + 36), DEQUANT at 224 */
    static uint32_t qs_words[58];
    uint8_t *qc = (uint8_t *)qs_words;
    put_f32(qc, 20.0f); put_i32(qc + 4, -3);
    put_i32(qc + 8, -3); put_i32(qc + 12, 1);
    for (int o = 0; o < 3; o++) {
        put_i32(qc + 16 + 4 * o, 7 * o - 5); put_i32(qc + 28 + 4 * o, 1 << 30); put_i32(qc + 40 + 4 * o, 36);
    }
    for (int j = 0; j < 54; j++) qc[52 + j] = (uint8_t)(j * 37 - 90);
    put_i32(qc + 108, 1); put_i32(qc + 112, 0);
    for (int o = 0; o < 6; o++) {
        put_i32(qc + 116 + 4 * o, 3 - o); put_i32(qc + 140 + 4 * o, 3 << 29); put_i32(qc + 164 + 4 * o, 34);
    }
    for (int j = 0; j < 36; j++) qc[188 + j] = (uint8_t)(j * 53 + 11);
    put_f32(qc + 224, 0.1f); put_i32(qc + 228, 2);
    nb_init(&b, 24);
    nb_add_q(&b, MCT_OP_QUANT, 24, 0);
    static const uint8_t qops[4] = {MCT_OP_QCONV2D, MCT_OP_QDWCONV2D, MCT_OP_QMAXPOOL2D, MCT_OP_QAVGPOOL2D};
    static const uint32_t qoffs[4] = {8, 108, 224, 224};
    for (int l = 0; l < 4; l++) {   /* the geometry of S[0], S[1], S[3], S[4] */
        const mct_layer *G = &S[l < 2 ? l : l + 1];
        mct_layer *L = &b.L[nb_add_q(&b, qops[l], G->n_out, qoffs[l])];
        L->h_in = G->h_in; L->w_in = G->w_in; L->c_in = G->c_in;
        L->h_out = G->h_out; L->w_out = G->w_out; L->c_out = G->c_out;
        L->kh = G->kh; L->kw = G->kw; L->sh = G->sh; L->sw = G->sw; L->pt = G->pt; L->pl = G->pl;
    }
    nb_add_q(&b, MCT_OP_DEQUANT, 6, 224);
    qnet = nb_finish(&b);
    b.net.cdata = qc;
    b.net.cdata_size = sizeof qs_words;
    CHECK(mct_net_check(qnet) == MCT_OK);
    check_dispatch(qnet, NULL, seen);
    /* the int8 residual block (QRES_END) of test_qres_end_by_hand, with a projection */
    qnet = qres_net(&b, 1, -128, 127);
    CHECK(mct_net_check(qnet) == MCT_OK);
    check_dispatch(qnet, NULL, seen);
    /* QSOFTMAX: QUANT -> QSOFTMAX -> DEQUANT; blob: QUANT at 0, QSOFTMAX at 8 (12 bytes), DEQUANT at 20 */
    static uint32_t sm_words[7];
    uint8_t *sc = (uint8_t *)sm_words;
    put_f32(sc, 50.0f); put_i32(sc + 4, 3);
    put_i32(sc + 8, 1 << 30); put_i32(sc + 12, 26); put_i32(sc + 16, -31);
    put_f32(sc + 20, 1.0f / 256); put_i32(sc + 24, -128);
    nb_init(&b, 5);
    nb_add_q(&b, MCT_OP_QUANT, 5, 0);
    nb_add_q(&b, MCT_OP_QSOFTMAX, 5, 8);
    nb_add_q(&b, MCT_OP_DEQUANT, 5, 20);
    qnet = nb_finish(&b);
    b.net.cdata = sc;
    b.net.cdata_size = sizeof sm_words;
    CHECK(mct_net_check(qnet) == MCT_OK);
    check_dispatch(qnet, NULL, seen);
    /* every op of the list was covered, and every value fits the 32-bit op masks */
#define COVERED(NAME, VALUE, STEM, CALL, IN_I8, OUT_I8)                                             \
    CHECKF(VALUE > 0 && VALUE < 32 && seen[VALUE], "op %s (%d) has no dispatch example", #NAME, VALUE);
    MCT_OP_LIST(COVERED)
#undef COVERED
}

/* Every op on numbers worked out by hand: ties round away from zero, NaN and overflow saturate,
 * the zero points are subtracted and added where documented, int8 tensors sit in the arena at the
 * documented stride. */
static void test_quant_ops_by_hand(void) {
    netb b;
    const mct_net *net = hand_q_net(&b);
    CHECK(mct_net_check(net) == MCT_OK);
    CHECK(net->arena == 3u + 1u + 1u + 1u + 3u);   /* f32 input, three int8 tensors of 3, f32 output */
    const uint32_t nb = 2;
    float x[6] = {1.25f, -0.75f, 0.2f, 0.0f, 100.0f, -0.25f};
    x[3] = (float)NAN;
    float *arena = falloc((size_t)net->arena * nb);
    const float *y = mct_forward(net, NULL, x, arena, nb);
    /* QUANT: round(x * 2) - 1 -> {3-1, -2-1, 0-1}, {NaN -> -128, 200-1 -> 127, -1-1} */
    const int8_t q0[8] = {2, -3, -1, 0, -128, 127, -2, 0};
    const int8_t *qa = (const int8_t *)(arena + (size_t)b.L[0].out_off * nb);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 3; i++)
            CHECKF(qa[4 * s + i] == q0[4 * s + i], "QUANT sample %d value %d: %d want %d", s, i, qa[4 * s + i],
                   q0[4 * s + i]);
    /* QDENSE, bias + x . W equals the unfolded 10, -7, 0 + (x - zx) . W with x - zx = {3, -2, 0} and
     * {-127, 128, -1}:
     *   s0: o0 10+3+4+0 = 17 -> 8.5 -> 9 (+3 = 12); o1 -7-384-254 = -645 -> -120.9375 -> -121 (-118);
     *       o2 0 -> 3
     *   s1: o0 10-127-256-3 = -376 -> -188 (+3 -> -128); o1 -7+16256+16256 = 32505 -> 6095 (-> 127);
     *       o2 -1 -> -0.5 -> -1 (+3 = 2) */
    const int8_t q1[8] = {12, -118, 3, 0, -128, 127, 2, 0};
    const int8_t *qd = (const int8_t *)(arena + (size_t)b.L[1].out_off * nb);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < 3; i++)
            CHECKF(qd[4 * s + i] == q1[4 * s + i], "QDENSE sample %d output %d: %d want %d", s, i,
                   qd[4 * s + i], q1[4 * s + i]);
    /* QLUT: -1 - x; DEQUANT: (q + 4) * 0.5 */
    const float want[6] = {-4.5f, 60.5f, 0.0f, 65.5f, -62.0f, 0.5f};
    for (int j = 0; j < 6; j++) CHECKF(y[j] == want[j], "output %d: %g want %g", j, (double)y[j], (double)want[j]);
    /* sample order does not matter: the second sample alone gives its own row */
    float *arena1 = falloc(net->arena);
    const float *y1 = mct_forward(net, NULL, x + 3, arena1, 1);
    CHECK(same_bits(y1, want + 3, 3));
    free(arena1);
    free(arena);
}

/* The firmware's int8 boundary on the hand-worked network: mct_quantize_value gives QUANT's codes one value at a
 * time, mct_forward_layers runs the int8 body alone (QDENSE, QLUT) on them, and mct_dequantize_value gives
 * DEQUANT's outputs; a table whose regions reach past the arena it is given, or an empty or too long layer range,
 * gives NULL, while a region of 0 floats (QDENSE's aux) is never out of bounds. */
static void test_forward_layers_at_the_int8_boundary(void) {
    netb b;
    const mct_net *net = hand_q_net(&b);
    CHECK(mct_net_check(net) == MCT_OK);
    const uint8_t *c = (const uint8_t *)g_qblob_words;
    const float x[3] = {1.25f, -0.75f, 0.2f};
    const int8_t q0[3] = {2, -3, -1};                     /* test_quant_ops_by_hand's QUANT codes */
    float *arena = falloc(net->arena);
    int8_t *in = (int8_t *)(arena + b.L[0].out_off);
    for (int i = 0; i < 3; i++) {
        in[i] = mct_quantize_value(c, x[i]);
        CHECKF(in[i] == q0[i], "quantized value %d: %d want %d", i, in[i], q0[i]);
    }
    uint32_t end = 0;                                     /* where the body's last region ends */
    for (int l = 1; l < 3; l++) {
        uint32_t e = (b.L[l].in_off > b.L[l].out_off ? b.L[l].in_off : b.L[l].out_off) + 1u;
        end = e > end ? e : end;
    }
    b.L[1].aux_off = 1000;                                /* an aux of 0 floats, far outside: not a reason to refuse */
    const int8_t *q = (const int8_t *)mct_forward_layers(net, NULL, arena, end, 1, 3);
    CHECK(q == (const int8_t *)(arena + b.L[2].out_off));
    const float want[3] = {-4.5f, 60.5f, 0.0f};           /* test_quant_ops_by_hand's outputs of sample 0 */
    for (int i = 0; q && i < 3; i++) {
        float y = mct_dequantize_value(c + 336, q[i]);
        CHECKF(y == want[i], "dequantized output %d: %g want %g", i, (double)y, (double)want[i]);
    }
    CHECK(mct_forward_layers(net, NULL, arena, end - 1u, 1, 3) == NULL);
    CHECK(mct_forward_layers(net, NULL, arena, net->arena, 2, 2) == NULL);
    CHECK(mct_forward_layers(net, NULL, arena, net->arena, 1, 5) == NULL);
    free(arena);
}

/* QUANT rounds the f32 product to nearest with ties away from zero, also just below a tie and at the
 * saturation limits (checked against a double-precision re-derivation). */
static void test_quant_rounding(void) {
    netb b;
    static uint32_t words[4];
    uint8_t *c = (uint8_t *)words;
    put_f32(c, 1.0f); put_i32(c + 4, 0);        /* QUANT: identity scale */
    put_f32(c + 8, 1.0f); put_i32(c + 12, 0);   /* DEQUANT */
    const float xs[] = {0.5f, -0.5f, 1.5f, -1.5f, 2.5f, -2.5f, 0.49999997f, -0.49999997f, 0.50000006f,
                        126.5f, 127.49f, 127.5f, -127.5f, -128.5f, 1e30f, -1e30f, (float)INFINITY,
                        -(float)INFINITY, 0.0f, -0.0f, 3.4999998f, -3.4999998f};
    const uint16_t n = (uint16_t)(sizeof xs / sizeof xs[0]);
    nb_init(&b, n);
    nb_add_q(&b, MCT_OP_QUANT, n, 0);
    nb_add_q(&b, MCT_OP_DEQUANT, n, 8);
    const mct_net *net = nb_finish(&b);
    b.net.cdata = c;
    b.net.cdata_size = 16;
    CHECK(mct_net_check(net) == MCT_OK);
    float *arena = falloc(net->arena);
    const float *y = mct_forward(net, NULL, xs, arena, 1);
    for (uint16_t i = 0; i < n; i++) {
        double v = (double)xs[i];
        double r = v >= 0 ? floor(v + 0.5) : -floor(-v + 0.5);
        r = r < -128 ? -128 : (r > 127 ? 127 : r);
        CHECKF(y[i] == (float)r, "x = %.9g: %g want %g", v, (double)y[i], r);
    }
    free(arena);
}

/* The checker accepts full-integer ops only frozen, in the blob, before every trainable layer, and
 * between a QUANT and a DEQUANT. */
static void test_net_check_quant_rules(void) {
    netb b;
    const mct_net *net;
    /* a valid prefix in front of trainable layers */
    net = hand_q_net(&b);
    nb_add(&b, MCT_OP_DENSE, 1, 2, 0, 0.0f);
    net = nb_finish(&b);
    CHECK(mct_net_check(net) == MCT_OK);
#define QMUT(stmt, what)                                                                             \
    do {                                                                                            \
        net = hand_q_net(&b);                                                                       \
        stmt;                                                                                       \
        CHECKF(mct_net_check(net) == MCT_E_NET, "%s accepted", what);                              \
    } while (0)
    QMUT(b.L[1].trainable = 1, "a trainable QDENSE");
    QMUT(b.L[2].storage = MCT_STORE_I8, "a QLUT not in MCT_STORE_Q");
    QMUT(b.L[1].p_off = 10, "a misaligned QDENSE");
    QMUT(b.L[3].p_off = 340, "DEQUANT constants past the blob");
    QMUT(b.net.cdata_size = 300, "a short blob");
    QMUT(b.net.cdata = NULL, "no blob");
    QMUT(b.L[1].kind = 1, "QDENSE kind 1");
    QMUT(b.L[1].n_p = 1; b.net.n_params = 1, "a QDENSE with a parameter");
    QMUT(b.net.arena -= 1, "the output past the arena");
    QMUT((b.net.n_layers = 3, b.net.out_off = b.L[2].out_off), "an int8 network output");
    QMUT((b.L[1].op = MCT_OP_DENSE, b.L[1].storage = MCT_STORE_RAM), "a float layer reading int8");
    QMUT(b.L[0].op = MCT_OP_QLUT, "a QLUT reading the f32 input");
    QMUT(b.L[3].op = MCT_OP_QLUT; b.L[3].p_off = 80; b.net.out_off = b.L[3].out_off, "no DEQUANT");
#undef QMUT
    /* a full-integer op after a trainable layer */
    static uint32_t words[4];
    uint8_t *c = (uint8_t *)words;
    put_f32(c, 1.0f); put_i32(c + 4, 0);
    put_f32(c + 8, 1.0f); put_i32(c + 12, 0);
    nb_init(&b, 3);
    nb_add(&b, MCT_OP_DENSE, 1, 4, 0, 0.0f);
    nb_add_q(&b, MCT_OP_QUANT, 4, 0);
    nb_add_q(&b, MCT_OP_DEQUANT, 4, 8);
    net = nb_finish(&b);
    b.net.cdata = c;
    b.net.cdata_size = 16;
    CHECKF(mct_net_check(net) == MCT_E_NET, "QUANT after a trainable Linear accepted");
    b.L[0].trainable = 0;
    CHECKF(mct_net_check(net) == MCT_OK, "QUANT after a frozen Linear rejected");
}

/* A full-integer prefix in front of trainable layers: training by the fused (device) and the buffered
 * paths agrees for every optimizer, and dL/dx through the int8 block is 0. */
static void test_quant_prefix_trains(void) {
    for (uint8_t ok = 0; ok <= MCT_OPT_ADAM; ok++) {
        netb b;
        hand_q_net(&b);
        nb_add(&b, MCT_OP_DENSE, 1, 4, 0, 0.0f);
        nb_add(&b, MCT_OP_ACT, MCT_ACT_TANH, 4, 0, 0.0f);
        nb_add(&b, MCT_OP_DENSE, 1, 2, 0, 0.0f);
        const mct_net *net = nb_finish(&b);
        mct_opt o = make_opt(ok);
        fused_vs_buffered(net, &o, MCT_LOSS_MSE, 0.0f, 2, 5, 900u + ok, k_opt_names[ok]);
    }
    netb b;
    hand_q_net(&b);
    nb_add(&b, MCT_OP_DENSE, 1, 2, 0, 0.0f);
    const mct_net *net = nb_finish(&b);
    const uint32_t nb = 2;
    rng_seed(77);
    float *p = falloc(net->n_params), *arena = falloc((size_t)net->arena * nb);
    init_params(net, p);
    float x[6] = {0.3f, -0.2f, 0.1f, 0.5f, 0.25f, -0.4f}, gout[4] = {1.0f, -1.0f, 0.5f, 2.0f}, gin[6];
    for (int j = 0; j < 6; j++) gin[j] = 123.0f;
    float *grads = falloc(net->n_params);
    uint32_t sn = mct_scratch_size(net, nb, 1, 1);
    float *scratch = falloc(sn);
    mct_forward(net, p, x, arena, nb);
    mct_sink sink = {grads, 0, 0, 0, 0, 1.0f};
    mct_backward(net, p, arena, nb, gout, gin, &sink, scratch, sn, 1);
    for (int j = 0; j < 6; j++) CHECKF(gin[j] == 0.0f, "dL/dx[%d] = %g", j, (double)gin[j]);
    CHECK(mct_all_finite(grads, net->n_params));
    free(p); free(arena); free(grads); free(scratch);
}

/* ------------------------------------------------------------------------------------------------ */

/* ------------------------------------------------------------------------------------------------ */
/* Conv2d, depthwise Conv2d and pooling on numbers a person can check                               */
/* ------------------------------------------------------------------------------------------------ */

/* A one-layer network around layer L (input at arena 0, output after it). */
static mct_net one_layer_net(const mct_layer *L) {
    mct_net net;
    memset(&net, 0, sizeof net);
    net.layers = L;
    net.n_layers = 1;
    net.n_in = L->n_in;
    net.n_out = L->n_out;
    net.max_width = L->n_in > L->n_out ? L->n_in : L->n_out;
    net.n_params = L->n_p;
    net.arena = L->n_in + L->n_out;
    net.out_off = L->n_in;
    return net;
}

/* Conv2d 1 -> 2 channels, 2x2 kernel, stride 1, padding 1 above and left (the window at output (0, 0) has only its
 * bottom-right tap inside) on a 2x2 input, channels last. */
static void test_conv2d_by_hand(void) {
    static const mct_layer L[1] = {{.op = MCT_OP_CONV2D, .kind = 1, .trainable = 1, .n_in = 4, .n_out = 8,
                                    .lr_div = 1.0f, .n_p = 10, .n_w = 8, .in_off = 0, .out_off = 4, .h_in = 2,
                                    .w_in = 2, .c_in = 1, .h_out = 2, .w_out = 2, .c_out = 2, .kh = 2, .kw = 2,
                                    .sh = 1, .sw = 1, .pt = 1, .pl = 1}};
    mct_net net = one_layer_net(L);
    CHECK(mct_net_check(&net) == MCT_OK);
    /* W[ky][kx][c][o]: tap (0,0) -> (1, 10), (0,1) -> (2, 20), (1,0) -> (3, 30), (1,1) -> (4, 40); b = (0.5, -1) */
    const float p[10] = {1, 10, 2, 20, 3, 30, 4, 40, 0.5f, -1};
    const float x[4] = {1, 2, /* row 1 */ 3, 4};
    /* out (0,0): only tap (1,1) on x(0,0) = 1: (4 + 0.5, 40 - 1)
     * out (0,1): taps (1,0) on x(0,0), (1,1) on x(0,1): 3*1 + 4*2 = 11 -> (11.5, 109)
     * out (1,0): taps (0,1) on x(0,0), (1,1) on x(1,0): 2*1 + 4*3 = 14 -> (14.5, 139)
     * out (1,1): all four: 1*1 + 2*2 + 3*3 + 4*4 = 30 -> (30.5, 299) */
    const float want[8] = {4.5f, 39, 11.5f, 109, 14.5f, 139, 30.5f, 299};
    float arena[12];
    float *y = mct_forward(&net, p, x, arena, 1);
    CHECK(same_bits(y, want, 8));
    /* dL/dx for dL/dy = 1 on channel 0 only: x(0,0) is read by every window through taps (1,1), (1,0), (0,1),
     * (0,0): 4 + 3 + 2 + 1 = 10; x(0,1) by out (0,1) tap (1,1) and out (1,1) tap (0,1): 4 + 2 = 6; x(1,0): 4 + 3 = 7;
     * x(1,1): 4 */
    const float gy[8] = {1, 0, 1, 0, 1, 0, 1, 0};
    const float want_gx[4] = {10, 6, 7, 4};
    float gx[4], grads[10], scratch[64];
    mct_sink sink;
    memset(&sink, 0, sizeof sink);
    sink.grads = grads;
    CHECK(mct_scratch_size(&net, 1, 0, 1) <= 64);
    float params[10];
    memcpy(params, p, sizeof params);
    mct_backward(&net, params, arena, 1, gy, gx, &sink, scratch, 64, 0);
    CHECK(same_bits(gx, want_gx, 4));
    /* dW[tap][0] = sum of the inputs each tap saw: (0,0) sees x(0,0) at out (1,1): 1; (0,1) sees x(0,0), x(0,1): 3;
     * (1,0) sees x(0,0), x(1,0): 4; (1,1) sees all: 10. Channel 1 gets 0; db = (4, 0). */
    const float want_g[10] = {1, 0, 3, 0, 4, 0, 10, 0, 4, 0};
    CHECK(same_bits(grads, want_g, 10));
}

/* Depthwise 3x1 kernel with multiplier 2 over a 3x1x1 input, 'same' padding; then max and average pooling. */
static void test_dwconv_and_pool_by_hand(void) {
    static const mct_layer D[1] = {{.op = MCT_OP_DWCONV2D, .trainable = 1, .n_in = 3, .n_out = 6, .lr_div = 1.0f,
                                    .n_p = 6, .n_w = 6, .in_off = 0, .out_off = 3, .h_in = 3, .w_in = 1, .c_in = 1,
                                    .h_out = 3, .w_out = 1, .c_out = 2, .kh = 3, .kw = 1, .sh = 1, .sw = 1, .pt = 1}};
    mct_net net = one_layer_net(D);
    CHECK(mct_net_check(&net) == MCT_OK);
    const float p[6] = {1, -1, 2, 0, 3, 1}; /* W[ky][o]: tap 0 (1, -1), tap 1 (2, 0), tap 2 (3, 1) */
    const float x[3] = {1, 2, 4};
    /* row 0: taps 1, 2 on x0, x1: (2*1 + 3*2, 0*1 + 1*2) = (8, 2); row 1: (1 + 4 + 12, -1 + 0 + 4) = (17, 3);
     * row 2: taps 0, 1 on x1, x2: (2 + 8, -2 + 0) = (10, -2) */
    const float want[6] = {8, 2, 17, 3, 10, -2};
    float arena[9];
    CHECK(same_bits(mct_forward(&net, p, x, arena, 1), want, 6));

    /* max pool 2x2 stride 2 over 2x4x1 -> 1x2x1, and average pool 3x3 stride 1 padding 1 -> the corner mean */
    static const mct_layer M[1] = {{.op = MCT_OP_MAXPOOL2D, .n_in = 8, .n_out = 2, .lr_div = 1.0f, .out_off = 8,
                                    .h_in = 2, .w_in = 4, .c_in = 1, .h_out = 1, .w_out = 2, .c_out = 1, .kh = 2,
                                    .kw = 2, .sh = 2, .sw = 2}};
    net = one_layer_net(M);
    CHECK(mct_net_check(&net) == MCT_OK);
    const float xm[8] = {1, 5, -2, 0, 3, 2, -1, -3};
    const float want_m[2] = {5, 0};
    float am[10];
    CHECK(same_bits(mct_forward(&net, NULL, xm, am, 1), want_m, 2));
    static const mct_layer A[1] = {{.op = MCT_OP_AVGPOOL2D, .n_in = 4, .n_out = 4, .lr_div = 1.0f, .out_off = 4,
                                    .h_in = 2, .w_in = 2, .c_in = 1, .h_out = 2, .w_out = 2, .c_out = 1, .kh = 3,
                                    .kw = 3, .sh = 1, .sw = 1, .pt = 1, .pl = 1}};
    net = one_layer_net(A);
    CHECK(mct_net_check(&net) == MCT_OK);
    const float xa[4] = {1, 2, 3, 6};
    const float want_a[4] = {3, 3, 3, 3}; /* every window holds all four taps (padding not counted): 12 / 4 */
    float aa[8];
    CHECK(same_bits(mct_forward(&net, NULL, xa, aa, 1), want_a, 4));
}

/* ------------------------------------------------------------------------------------------------ */
/* the spatial full-integer ops (QCONV2D, QDWCONV2D, QMAXPOOL2D, QAVGPOOL2D) on numbers a person can check       */
/* ------------------------------------------------------------------------------------------------ */

static uint32_t g_qs_words[32];

/* QUANT (inv_scale inv, zero point zq; its 8 bytes at 0) -> the spatial op G (geometry and n_in/n_out from G, its
 * op_bytes of constants already written at byte 8) -> DEQUANT (scale 1, zero point 0), so the network's outputs are
 * the op's int8 codes; the blob is g_qs_words. Runs the real dispatch (mct_forward) over nb samples of x. */
static void q_spatial_run(const mct_layer *G, float inv, int32_t zq, uint32_t op_bytes, const float *x, uint32_t nb,
                          float *out) {
    netb b;
    uint8_t *c = (uint8_t *)g_qs_words;
    put_f32(c, inv); put_i32(c + 4, zq);
    put_f32(c + 8 + op_bytes, 1.0f); put_i32(c + 12 + op_bytes, 0);
    nb_init(&b, G->n_in);
    nb_add_q(&b, MCT_OP_QUANT, G->n_in, 0);
    mct_layer *L = &b.L[nb_add_q(&b, G->op, G->n_out, 8)];
    L->h_in = G->h_in; L->w_in = G->w_in; L->c_in = G->c_in;
    L->h_out = G->h_out; L->w_out = G->w_out; L->c_out = G->c_out;
    L->kh = G->kh; L->kw = G->kw; L->sh = G->sh; L->sw = G->sw; L->pt = G->pt; L->pl = G->pl;
    nb_add_q(&b, MCT_OP_DEQUANT, G->n_out, 8 + op_bytes);
    const mct_net *net = nb_finish(&b);
    b.net.cdata = c;
    b.net.cdata_size = 16 + op_bytes;
    CHECK(mct_net_check(net) == MCT_OK);
    mct_layer_size sz;
    CHECK(mct_layer_size_of(L, 1, 0, &sz) && sz.consts <= op_bytes);
    float *arena = falloc((size_t)net->arena * nb);
    const float *y = mct_forward(net, NULL, x, arena, nb);
    memcpy(out, y, sizeof(float) * G->n_out * nb);
    free(arena);
}

/* QCONV2D with the geometry of test_conv2d_by_hand (2x2x1 -> 2x2x2, 2x2 kernel, one padding row above and column
 * left): the input zero point is subtracted tap by tap, so the padded windows sum fewer terms. */
static void test_qconv2d_by_hand(void) {
    static const mct_layer G = {.op = MCT_OP_QCONV2D, .n_in = 4, .n_out = 8, .h_in = 2, .w_in = 2, .c_in = 1,
                                .h_out = 2, .w_out = 2, .c_out = 2, .kh = 2, .kw = 2, .sh = 1, .sw = 1, .pt = 1,
                                .pl = 1};
    uint8_t *c = (uint8_t *)g_qs_words + 8;
    memset(g_qs_words, 0, sizeof g_qs_words);
    /* zx -1, zy 3; bias (6, -2); mult / 2^shift = 0.5 and 0.75; W[o][ky][kx][c]: o0 (1, 2, 3, 4), o1 (-1, 0, 2, -3) */
    put_i32(c, -1); put_i32(c + 4, 3);
    put_i32(c + 8, 6); put_i32(c + 12, -2);
    put_i32(c + 16, 1 << 30); put_i32(c + 20, 3 << 29);
    put_i32(c + 24, 31); put_i32(c + 28, 31);
    static const int8_t w[8] = {1, 2, 3, 4, -1, 0, 2, -3};
    memcpy(c + 32, w, 8);
    /* x = (1, 2, 3, 4) -> QUANT (inv 1, zero point -1) codes (0, 1, 2, 3); x - zx = (1, 2, 3, 4) again.
     * o0 sums (as the f32 test): (0,0) tap (1,1) only: 4; (0,1): 3 + 8 = 11; (1,0): 2 + 12 = 14; (1,1): 30;
     *   + 6 = 10, 17, 20, 36; x 0.5 = 5, 8.5 -> 9, 10, 18; + 3 = 8, 12, 13, 21.
     * o1: (0,0): -3 * 1 = -3; (0,1): 2 * 1 - 3 * 2 = -4; (1,0): 0 * 1 - 3 * 3 = -9; (1,1): -1 + 0 + 6 - 12 = -7;
     *   - 2 = -5, -6, -11, -9; x 0.75 = -3.75 -> -4, -4.5 -> -5 (ties away from zero), -8.25 -> -8, -6.75 -> -7;
     *   + 3 = -1, -2, -5, -4. (Folding -zx sum W into the bias would give o0 (0,0) 10 + 5 = 15 -> 7.5 -> 8 -> 11.) */
    const float x[4] = {1, 2, 3, 4};
    const float want[8] = {8, -1, 12, -2, 13, -5, 21, -4};
    float y[8];
    q_spatial_run(&G, 1.0f, -1, 40, x, 1, y);
    for (int j = 0; j < 8; j++) CHECKF(y[j] == want[j], "QCONV2D output %d: %g want %g", j, (double)y[j], (double)want[j]);
}

/* ------------------------------------------------------------------------------------------------ */
/* the int8 residual add (QRES_END) on numbers a person can check                                     */
/* ------------------------------------------------------------------------------------------------ */

static uint32_t g_qres_words[143];

/* QUANT (inv_scale 1, zero point 0) -> RES_BEGIN (kind 1) -> QLUT y = -x [-> RES_SHORTCUT (kind 1) -> QLUT y = x + 1]
 * -> QRES_END -> DEQUANT (scale 1, zero point 0), 3 values a sample; blob: QUANT 0, QLUTs 8 and 264, QRES_END 520,
 * DEQUANT 564. QRES_END: zx 2, zs -3, zy 1; x (x - 2) 2^20 by 1/2, the skip (s + 3) 2^20 by 1/4, the sum by
 * 0.75 / 2^18, so y = round(0.75 (2 (x - 2) + (s + 3))) + 1, clamped to [lo, hi]. */
static mct_net *qres_net(netb *bp, int projection, int32_t lo, int32_t hi) {
    uint8_t *c = (uint8_t *)g_qres_words;
    memset(g_qres_words, 0, sizeof g_qres_words);
    put_f32(c, 1.0f); put_i32(c + 4, 0);
    for (int i = 0; i < 256; i++) {
        int v = i - 128;
        c[8 + i] = (uint8_t)(int8_t)(v == -128 ? 127 : -v);
        c[264 + i] = (uint8_t)(int8_t)(v == 127 ? 127 : v + 1);
    }
    static const int32_t words[11] = {2, -3, 1, 1 << 30, 31, 1 << 30, 32, 3 << 29, 49, 0, 0};
    for (int i = 0; i < 11; i++) put_i32(c + 520 + 4 * i, words[i]);
    put_i32(c + 520 + 36, lo); put_i32(c + 520 + 40, hi);
    put_f32(c + 564, 1.0f); put_i32(c + 568, 0);
    nb_init(bp, 3);
    nb_add_q(bp, MCT_OP_QUANT, 3, 0);
    int beg = nb_add(bp, MCT_OP_RES_BEGIN, 1, 3, 0, 0.0f);
    bp->L[beg].trainable = 0;
    nb_add_q(bp, MCT_OP_QLUT, 3, 8);
    if (projection) {
        int sc = nb_add(bp, MCT_OP_RES_SHORTCUT, 1, 3, 0, 0.0f);
        bp->L[sc].trainable = 0;
        nb_add_q(bp, MCT_OP_QLUT, 3, 264);
    }
    mct_layer *E = &bp->L[nb_add(bp, MCT_OP_RES_END, 0, 3, 0, 0.0f)];
    E->op = MCT_OP_QRES_END;
    E->trainable = 0;
    E->storage = MCT_STORE_Q;
    E->p_off = 520;
    nb_add_q(bp, MCT_OP_DEQUANT, 3, 564);
    nb_finish(bp);
    bp->net.cdata = c;
    bp->net.cdata_size = 572;
    return &bp->net;
}

static void qres_run(int projection, int32_t lo, int32_t hi, const float *x, uint32_t nb, float *out) {
    netb b;
    mct_net *net = qres_net(&b, projection, lo, hi);
    uint16_t beg = 1, end = (uint16_t)(projection ? 5 : 3);
    CHECK(mct_net_check(net) == MCT_OK);
    mct_layer_size sz;
    CHECK(mct_layer_size_of(&b.L[end], 1, 0, &sz) && sz.consts == 44 && sz.aux == 0 && sz.out == 1);
    float *arena = falloc((size_t)net->arena * nb);
    memcpy(out, mct_forward(net, NULL, x, arena, nb), sizeof(float) * 3 * nb);
    free(arena);
    /* an int8 block's RES_BEGIN (and RES_SHORTCUT) must say so (kind 1), and an f32 one's must not */
    b.L[beg].kind = 0;
    CHECK(mct_net_check(net) == MCT_E_NET);
    b.L[beg].kind = 1;
    b.L[end].op = MCT_OP_RES_END;
    CHECK(mct_net_check(net) == MCT_E_NET);
}

/* QRES_END through mct_forward on two samples (their int8 strides of 4 bytes for 3 values): an identity block adds the
 * block's input s to the body's -s; a projection block adds the main body's -s to the shortcut's s + 1. */
static void test_qres_end_by_hand(void) {
    const float x[6] = {10, -20, 100, 3, -5, 1};
    float y[6];
    /* identity, x = -s: 2 (-s - 2) + s + 3 = -s - 1: 10 -> -11 * 0.75 = -8.25 -> -8 -> -7; -20 -> 19 -> 14.25 -> 15;
     * 100 -> -101 -> -75.75 -> -76 -> -75; 3 -> -4 -> -3 -> -2; -5 -> 4 -> 3 -> 4; 1 -> -2 -> -1.5 -> -2 (ties away
     * from zero) -> -1 */
    const float want_id[6] = {-7, 15, -75, -2, 4, -1};
    qres_run(0, -128, 127, x, 2, y);
    for (int j = 0; j < 6; j++) CHECKF(y[j] == want_id[j], "identity QRES_END %d: %g want %g", j, (double)y[j],
                                       (double)want_id[j]);
    /* projection, x = s + 1 and the skip -s: 2 (s - 1) - s + 3 = s + 1: 10 -> 8.25 -> 8 -> 9; -20 -> -14.25 -> -13;
     * 100 -> 75.75 -> 77, clamped to hi 10; 3 -> 3 -> 4; -5 -> -3 -> -2, clamped to lo 1 (a fused ReLU: lo = zy);
     * 1 -> 1.5 -> 2 -> 3 */
    const float want_pr[6] = {9, 1, 10, 4, 1, 3};
    qres_run(1, 1, 10, x, 2, y);
    for (int j = 0; j < 6; j++) CHECKF(y[j] == want_pr[j], "projection QRES_END %d: %g want %g", j, (double)y[j],
                                       (double)want_pr[j]);
}

/* QDWCONV2D with the geometry of test_dwconv_and_pool_by_hand (3x1x1 -> 3x1x2, multiplier 2, 3x1 kernel, 'same'). */
static void test_qdwconv2d_by_hand(void) {
    static const mct_layer G = {.op = MCT_OP_QDWCONV2D, .n_in = 3, .n_out = 6, .h_in = 3, .w_in = 1, .c_in = 1,
                                .h_out = 3, .w_out = 1, .c_out = 2, .kh = 3, .kw = 1, .sh = 1, .sw = 1, .pt = 1};
    uint8_t *c = (uint8_t *)g_qs_words + 8;
    memset(g_qs_words, 0, sizeof g_qs_words);
    /* zx 2, zy -10; bias (0, 1); mult / 2^shift = 0.25 for both; W[ky][o]: (1, -1), (2, 0), (3, 1) */
    put_i32(c, 2); put_i32(c + 4, -10);
    put_i32(c + 8, 0); put_i32(c + 12, 1);
    put_i32(c + 16, 1 << 30); put_i32(c + 20, 1 << 30);
    put_i32(c + 24, 32); put_i32(c + 28, 32);
    static const int8_t w[6] = {1, -1, 2, 0, 3, 1};
    memcpy(c + 32, w, 6);
    /* x = (1, 2, 4) -> codes (3, 4, 6) with zero point 2; x - zx = (1, 2, 4). Sums as the f32 test: (8, 2), (17, 3),
     * (10, -2); + bias: (8, 3), (17, 4), (10, -1); x 0.25: (2, 0.75 -> 1), (4.25 -> 4, 1), (2.5 -> 3, -0.25 -> 0);
     * - 10: (-8, -9), (-6, -9), (-7, -10). */
    const float x[3] = {1, 2, 4};
    const float want[6] = {-8, -9, -6, -9, -7, -10};
    float y[6];
    q_spatial_run(&G, 1.0f, 2, 40, x, 1, y);
    for (int j = 0; j < 6; j++)
        CHECKF(y[j] == want[j], "QDWCONV2D output %d: %g want %g", j, (double)y[j], (double)want[j]);
}

/* QMAXPOOL2D (2x2 stride 2 over 2x4x1) and QAVGPOOL2D (2x2 stride 1, one padding row above and column left, over
 * 2x2x1: windows of 1, 2, 2 and 4 taps), two samples each: the codes themselves, padding never counted. */
static void test_qpool_by_hand(void) {
    static const mct_layer M = {.op = MCT_OP_QMAXPOOL2D, .n_in = 8, .n_out = 2, .h_in = 2, .w_in = 4, .c_in = 1,
                                .h_out = 1, .w_out = 2, .c_out = 1, .kh = 2, .kw = 2, .sh = 2, .sw = 2};
    memset(g_qs_words, 0, sizeof g_qs_words);
    /* QUANT inv 1, zero point 0: the codes are the inputs. Sample 1 is all negative: the max is never a padding 0. */
    const float xm[16] = {1, 5, -2, 0, 3, 2, -1, -3, /* sample 1 */ -9, -5, -2, -7, -6, -8, -4, -3};
    const float want_m[4] = {5, 0, -5, -2};
    float ym[4];
    q_spatial_run(&M, 1.0f, 0, 0, xm, 2, ym);
    for (int j = 0; j < 4; j++)
        CHECKF(ym[j] == want_m[j], "QMAXPOOL2D output %d: %g want %g", j, (double)ym[j], (double)want_m[j]);
    static const mct_layer A = {.op = MCT_OP_QAVGPOOL2D, .n_in = 4, .n_out = 4, .h_in = 2, .w_in = 2, .c_in = 1,
                                .h_out = 2, .w_out = 2, .c_out = 1, .kh = 2, .kw = 2, .sh = 1, .sw = 1, .pt = 1,
                                .pl = 1};
    /* sample 0 (1, 2, 3, 5): 1; (1 + 2) / 2 = 1.5 -> 2; (1 + 3) / 2 = 2; 11 / 4 = 2.75 -> 3.
     * sample 1 (-1, -2, -3, -4): -1; -1.5 -> -2 (ties away from zero); -2; -10 / 4 = -2.5 -> -3. */
    const float xa[8] = {1, 2, 3, 5, -1, -2, -3, -4};
    const float want_a[8] = {1, 2, 2, 3, -1, -2, -2, -3};
    float ya[8];
    q_spatial_run(&A, 1.0f, 0, 0, xa, 2, ya);
    for (int j = 0; j < 8; j++)
        CHECKF(ya[j] == want_a[j], "QAVGPOOL2D output %d: %g want %g", j, (double)ya[j], (double)want_a[j]);
}

/* QSOFTMAX (TensorFlow Lite Micro's int8 softmax) on logits whose softmax a person can work out: with mult 2^30 and
 * left shift 26 (beta sx = 1/2: a code difference d stands for d / 2, diff_min = -31) the outputs are
 * round(256 p) - 128 for the softmax p of the real values, and codes more than 31 below the largest give -128. */
static void test_qsoftmax_by_hand(void) {
    uint8_t *c = (uint8_t *)g_qs_words + 8;
    memset(g_qs_words, 0, sizeof g_qs_words);
    put_i32(c, 1 << 30); put_i32(c + 4, 26); put_i32(c + 8, -31);
    /* sample 0, codes (0, -2, -40): p = (1, e^-1) / (1 + e^-1) = (0.7311, 0.2689), x 256 = 187.16 and 68.84 ->
     * 187 - 128 = 59 and 69 - 128 = -59; -40 is below diff_min: -128 (and it adds nothing to the sum).
     * sample 1, all equal (5, 5, 5): 1/3 x 256 = 85.33 -> 85 - 128 = -43 each. */
    static const mct_layer G3 = {.op = MCT_OP_QSOFTMAX, .n_in = 3, .n_out = 3};
    const float x3[6] = {0, -2, -40, 5, 5, 5};
    const float want3[6] = {59, -59, -128, -43, -43, -43};
    float y3[6];
    q_spatial_run(&G3, 1.0f, 0, 12, x3, 2, y3);
    for (int j = 0; j < 6; j++)
        CHECKF(y3[j] == want3[j], "QSOFTMAX output %d: %g want %g", j, (double)y3[j], (double)want3[j]);
    /* all equal gives 1/n exactly where 256 / n is an integer: n = 4 gives 64 - 128 = -64, n = 2 gives 0; n = 1
     * gives 256 - 128, saturated to 127 */
    static const mct_layer G4 = {.op = MCT_OP_QSOFTMAX, .n_in = 4, .n_out = 4};
    const float x4[4] = {-7, -7, -7, -7};
    float y4[4];
    q_spatial_run(&G4, 1.0f, 0, 12, x4, 1, y4);
    for (int j = 0; j < 4; j++) CHECKF(y4[j] == -64.0f, "QSOFTMAX 1/4 output %d: %g want -64", j, (double)y4[j]);
    static const mct_layer G2 = {.op = MCT_OP_QSOFTMAX, .n_in = 2, .n_out = 2};
    const float x2[2] = {100, 100};
    float y2[2];
    q_spatial_run(&G2, 1.0f, 0, 12, x2, 1, y2);
    CHECKF(y2[0] == 0.0f && y2[1] == 0.0f, "QSOFTMAX 1/2: %g %g want 0 0", (double)y2[0], (double)y2[1]);
    static const mct_layer G1 = {.op = MCT_OP_QSOFTMAX, .n_in = 1, .n_out = 1};
    const float x1[1] = {-128};
    float y1[1];
    q_spatial_run(&G1, 1.0f, 0, 12, x1, 1, y1);
    CHECKF(y1[0] == 127.0f, "QSOFTMAX of one value: %g want 127", (double)y1[0]);
    /* the op's check: a softmax over more than 511 values is refused (there the sum of exponentials can reach 2^28
     * and TFLite's final shift would pass 31, beyond gemmlowp's rounding division) */
    mct_layer big = {.op = MCT_OP_QSOFTMAX, .n_in = 512, .n_out = 512};
    mct_layer_size sz;
    CHECK(!mct_layer_size_of(&big, 1, 0, &sz));
    big.n_in = big.n_out = 511;
    CHECK(mct_layer_size_of(&big, 1, 0, &sz) && sz.consts == 12u);
}

/* A residual block with a projection, y = relu(x W + c) + x V, on x = (1, -2) (every number exact):
 * layers 0 RES_BEGIN, 1 Linear(2, 3) W c, 2 ReLU, 3 RES_SHORTCUT, 4 Dense(2, 3) V, 5 RES_END. */
static void test_residual_projection_by_hand(void) {
    netb b;
    nb_init(&b, 2);
    nb_add(&b, MCT_OP_RES_BEGIN, 0, 0, 0, 0.0f);
    nb_add(&b, MCT_OP_DENSE, 1, 3, 0, 0.0f);
    nb_add(&b, MCT_OP_ACT, MCT_ACT_RELU, 3, 0, 0.0f);
    nb_add(&b, MCT_OP_RES_SHORTCUT, 0, 0, 0, 0.0f);
    nb_add(&b, MCT_OP_DENSE, 0, 3, 0, 0.0f);
    nb_add(&b, MCT_OP_RES_END, 0, 0, 0, 0.0f);
    const mct_net *net = nb_finish(&b);
    CHECK(mct_net_check(net) == MCT_OK);
    CHECK(b.L[0].k == 5 && b.L[3].k == 0 && b.L[5].k == 3);
    CHECK(b.L[3].out_off == 0 && b.L[4].in_off == 0);   /* the shortcut body reads the block's input */
    CHECK(net->n_params == 15);
    /* W = [[1, 2, -1], [0.5, -1, 1]] ([n_in][n_out]), c = (0.5, 1, 0); V = [[2, 0, 1], [1, -1, 0.5]] */
    float p[15] = {1, 2, -1, 0.5f, -1, 1, 0.5f, 1, 0, 2, 0, 1, 1, -1, 0.5f};
    const float x[2] = {1, -2};
    /* h = x W + c = (1 - 1 + 0.5, 2 + 2 + 1, -1 - 2 + 0) = (0.5, 5, -3); relu: (0.5, 5, 0)
     * x V = (2 - 2, 0 + 2, 1 - 1) = (0, 2, 0); y = (0.5, 7, 0) */
    const float want_y[3] = {0.5f, 7, 0};
    float arena[64];
    CHECK(net->arena <= 64);
    const float *y = mct_forward(net, p, x, arena, 1);
    CHECK(same_bits(y, want_y, 3));
    CHECK(same_bits(arena, x, 2));   /* the block's input is still there */
    /* dL/dy = (1, 2, -1): the shortcut gets it all, dV = x^T g = [[1, 2, -1], [-2, -4, 2]], its dL/dx = V g =
     * (2 - 1, 1 - 2 - 0.5) = (1, -1.5); the main body: dh = g * relu'(h) = (1, 2, 0), dW = x^T dh =
     * [[1, 2, 0], [-2, -4, 0]], dc = (1, 2, 0), its dL/dx = W dh = (1 + 4, 0.5 - 2) = (5, -1.5); dL/dx = (6, -3) */
    const float gy[3] = {1, 2, -1};
    const float want_gx[2] = {6, -3};
    /* relu'(h) = 0 makes dh[2] = -1 * 0 = -0, so dW[0][2] = 1 * -0 and dc[2] are -0 (bit for bit) */
    const float want_g[15] = {1, 2, -0.0f, -2, -4, 0, 1, 2, -0.0f, 1, 2, -1, -2, -4, 2};
    float gx[2], grads[15], scratch[64];
    memset(grads, 0, sizeof grads);
    CHECK(mct_scratch_size(net, 1, 0, 1) <= 64);
    mct_sink sink;
    memset(&sink, 0, sizeof sink);
    sink.grads = grads;
    mct_backward(net, p, arena, 1, gy, gx, &sink, scratch, 64, 0);
    CHECK(same_bits(gx, want_gx, 2));
    CHECK(same_bits(grads, want_g, 15));
    /* without dL/dx (the device's training step), the same parameter gradients */
    memset(grads, 0, sizeof grads);
    mct_backward(net, p, arena, 1, gy, NULL, &sink, scratch, 64, 0);
    CHECK(same_bits(grads, want_g, 15));
    /* two samples at once: the second one is the first negated, dL/dy the same; relu(-h) = (0, 0, 3) */
    const float x2[4] = {1, -2, -1, 2};
    float arena2[128];
    const float *y2 = mct_forward(net, p, x2, arena2, 2);
    /* sample 1: h = (-1 + 1 + 0.5, -2 - 2 + 1, 1 + 2 + 0) = (0.5, -3, 3) -> (0.5, 0, 3); x V = (0, -2, 0) */
    const float want_y2[6] = {0.5f, 7, 0, 0.5f, -2, 3};
    CHECK(same_bits(y2, want_y2, 6));
}

/* Residual blocks with a projection: nested, with an identity block inside either body; and the table's checks. */
static void test_residual_projection_checks(void) {
    netb b;
    nb_init(&b, 4);
    nb_add(&b, MCT_OP_DENSE, 1, 4, 0, 0.0f);                   /* 0 */
    nb_add(&b, MCT_OP_RES_BEGIN, 0, 0, 0, 0.0f);               /* 1 (k = 9) */
    nb_add(&b, MCT_OP_DENSE, 1, 3, 0, 0.0f);                   /* 2 */
    nb_add(&b, MCT_OP_RES_BEGIN, 0, 0, 0, 0.0f);               /* 3 identity block inside the main body */
    nb_add(&b, MCT_OP_DIAG, 0, 3, 0, 0.0f);                    /* 4 */
    nb_add(&b, MCT_OP_RES_END, 0, 0, 0, 0.0f);                 /* 5 */
    nb_add(&b, MCT_OP_RES_SHORTCUT, 0, 0, 0, 0.0f);            /* 6 (k = 1) */
    nb_add(&b, MCT_OP_DENSE, 0, 3, 0, 0.0f);                   /* 7 */
    nb_add(&b, MCT_OP_ACT, MCT_ACT_TANH, 3, 0, 0.0f);          /* 8 */
    nb_add(&b, MCT_OP_RES_END, 0, 0, 0, 0.0f);                 /* 9 (k = 6) */
    nb_add(&b, MCT_OP_DENSE, 1, 2, 0, 0.0f);                   /* 10 */
    const mct_net *net = nb_finish(&b);
    CHECK(mct_net_check(net) == MCT_OK);
    CHECK(b.L[1].k == 9 && b.L[6].k == 1 && b.L[9].k == 6 && b.L[3].k == 5 && b.L[5].k == 3);
    CHECK(b.L[6].n_in == 3 && b.L[6].n_out == 4 && b.L[6].out_off == b.L[1].out_off);
    mct_layer keep[MAX_LAYERS];
    memcpy(keep, b.L, sizeof keep);
#define MUTATE(what, stmt)                                                                          \
    do {                                                                                            \
        memcpy(b.L, keep, sizeof keep);                                                             \
        stmt;                                                                                       \
        CHECKF(mct_net_check(&b.net) == MCT_E_NET, "%s: accepted", what);                           \
    } while (0)
    MUTATE("RES_SHORTCUT partner not a RES_BEGIN", b.L[6].k = 2);
    MUTATE("RES_SHORTCUT partner the inner block's RES_BEGIN", b.L[6].k = 3);
    MUTATE("RES_SHORTCUT partner past the table", b.L[6].k = 300);
    MUTATE("RES_SHORTCUT output not the block's input", (b.L[6].out_off = b.L[2].out_off, b.L[7].in_off = b.L[2].out_off));
    MUTATE("RES_END adding the block's input though it has a shortcut", b.L[9].k = 1);
    MUTATE("RES_END partner a layer of the shortcut body", b.L[9].k = 7);
    MUTATE("RES_BEGIN partner the RES_SHORTCUT", b.L[1].k = 6);
    MUTATE("a RES_SHORTCUT with an identity RES_END", (b.L[6].k = 3));
    MUTATE("RES_SHORTCUT narrower than the block's input", (b.L[6].n_out = 3, b.L[7].n_in = 3));
    MUTATE("main body as wide as the input, not the output", (b.L[6].n_in = 4));
    MUTATE("the inner RES_END pointing at the outer shortcut", b.L[5].k = 6);
#undef MUTATE
    memcpy(b.L, keep, sizeof keep);
    CHECK(mct_net_check(&b.net) == MCT_OK);
    /* a RES_SHORTCUT outside any block */
    nb_init(&b, 3);
    nb_add(&b, MCT_OP_DENSE, 1, 3, 0, 0.0f);
    b.open[b.n_open] = 0;
    b.open_sc[b.n_open++] = -1;
    nb_add(&b, MCT_OP_RES_SHORTCUT, 0, 0, 0, 0.0f);
    nb_add(&b, MCT_OP_DENSE, 1, 2, 0, 0.0f);
    CHECK(mct_net_check(nb_finish(&b)) == MCT_E_NET);
}

int main(void) {
    RUN(test_residual_projection_by_hand);
    RUN(test_residual_projection_checks);
    RUN(test_conv2d_by_hand);
    RUN(test_qconv2d_by_hand);
    RUN(test_qsoftmax_by_hand);
    RUN(test_qdwconv2d_by_hand);
    RUN(test_qres_end_by_hand);
    RUN(test_qpool_by_hand);
    RUN(test_dwconv_and_pool_by_hand);
    RUN(test_linear_forward_by_hand);
    RUN(test_linear_forward_matches_loop);
    RUN(test_net_check_accepts_valid);
    RUN(test_net_check_rejects_param_errors);
    RUN(test_net_check_rejects_offset_errors);
    RUN(test_net_check_rejects_size_errors);
    RUN(test_net_check_rejects_residual_errors);
    RUN(test_gemm_equals_gemm_bt);
    RUN(test_apply_in_parts_equals_apply);
    RUN(test_fused_equals_buffered_sgd);
    RUN(test_fused_equals_buffered_momentum);
    RUN(test_fused_equals_buffered_rmsprop);
    RUN(test_fused_equals_buffered_rmsprop_momentum);
    RUN(test_fused_equals_buffered_adam);
    RUN(test_fused_equals_buffered_linear);
    RUN(test_fused_equals_buffered_dense);
    RUN(test_fused_equals_buffered_bias);
    RUN(test_fused_equals_buffered_activations);
    RUN(test_fused_equals_buffered_softmax);
    RUN(test_fused_equals_buffered_swish);
    RUN(test_fused_equals_buffered_glu);
    RUN(test_fused_equals_buffered_diag);
    RUN(test_fused_equals_buffered_scale);
    RUN(test_fused_equals_buffered_rmsnorm);
    RUN(test_fused_equals_buffered_dyt);
    RUN(test_fused_equals_buffered_conv1d);
    RUN(test_fused_equals_buffered_residual);
    RUN(test_batch_grads_host_equals_device);
    RUN(test_buffered_step_ignores_stale_grads);
    RUN(test_fused_rejects_similarity_penalty);
    RUN(test_train_step_rejects_bad_args);
    RUN(test_nan_input_mixed_net);
    RUN(test_nan_input_relu_net);
    RUN(test_inf_input_mixed_net);
    RUN(test_nan_target);
    RUN(test_loss_mse);
    RUN(test_loss_huber);
    RUN(test_loss_bce);
    RUN(test_loss_cross_entropy);
    RUN(test_softmax_xent_fused);
    RUN(test_loss_cosine);
    RUN(test_train_step_loss_is_batch_mean);
    RUN(test_quant_ops_by_hand);
    RUN(test_qdense_at_the_limits);
    RUN(test_forward_layers_at_the_int8_boundary);
    RUN(test_qdense_tflite_rounding_at_the_limits);
    RUN(test_op_list_dispatch);
    RUN(test_quant_rounding);
    RUN(test_net_check_quant_rules);
    RUN(test_quant_prefix_trains);
    printf("%d passed, %d failed\n", g_passed, g_failed);
    return g_failed ? 1 : 0;
}
