/* isa_dispatch.c - the host extension's choice among its copies of the hot kernels: firmware/core/gemm.c is
 * compiled once per instruction set (trainer/host_build.py, setup.py) with MCT_ISA_SUFFIX, and the public
 * mct_gemm, mct_gemm_bt, mct_transpose, mct_matmul_backward and mct_bias_grads here call the copy chosen by mct_isa_select
 * (the fastest the CPU runs, unless told otherwise). Host only: devices compile gemm.c once, without this. */
#include "isa_dispatch.h"

#include <string.h>

#include "mct_layers.h"

#define MCT_ISA_DECLARE(S)                                                                                        \
    void mct_gemm_##S(const float *A, const float *B, float *C, uint32_t M, uint32_t K, uint32_t N);             \
    void mct_gemm_bt_##S(const float *A, const float *B, float *C, uint32_t M, uint32_t K, uint32_t N);          \
    void mct_transpose_##S(const float *A, float *AT, uint32_t rows, uint32_t cols);                              \
    void mct_matmul_backward_##S(const mct_layer *L, float *p, uint32_t j0, const float *x, const float *gy,     \
                                 float *gx, uint32_t nb, uint32_t n_in, uint32_t n_out, const mct_sink *sink,      \
                                 float *tmp, int host);                                                             \
    void mct_bias_grads_##S(const mct_layer *L, float *p, uint32_t j0, const float *gy, uint32_t nb, uint32_t n,  \
                            const mct_sink *sink);
#define MCT_ISA_ENTRY(S, CHECK) \
    {#S, CHECK, mct_gemm_##S, mct_gemm_bt_##S, mct_transpose_##S, mct_matmul_backward_##S, mct_bias_grads_##S},

typedef struct isa_kernels {
    const char *name;
    int (*runs)(void);
    void (*gemm)(const float *, const float *, float *, uint32_t, uint32_t, uint32_t);
    void (*gemm_bt)(const float *, const float *, float *, uint32_t, uint32_t, uint32_t);
    void (*transpose)(const float *, float *, uint32_t, uint32_t);
    void (*matmul_backward)(const mct_layer *, float *, uint32_t, const float *, const float *, float *, uint32_t,
                            uint32_t, uint32_t, const mct_sink *, float *, int);
    void (*bias_grads)(const mct_layer *, float *, uint32_t, const float *, uint32_t, uint32_t, const mct_sink *);
} isa_kernels;

static int runs_always(void) { return 1; }
MCT_ISA_DECLARE(baseline)
#ifdef MCT_ISA_HAVE_AVX2
static int runs_avx2(void) { __builtin_cpu_init(); return __builtin_cpu_supports("avx2"); }
MCT_ISA_DECLARE(avx2)
#endif
#ifdef MCT_ISA_HAVE_AVX512
static int runs_avx512(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bw");
}
MCT_ISA_DECLARE(avx512)
#endif

/* the variants, slowest first */
static const isa_kernels variants[] = {
    MCT_ISA_ENTRY(baseline, runs_always)
#ifdef MCT_ISA_HAVE_AVX2
    MCT_ISA_ENTRY(avx2, runs_avx2)
#endif
#ifdef MCT_ISA_HAVE_AVX512
    MCT_ISA_ENTRY(avx512, runs_avx512)
#endif
};
#define N_VARIANTS ((int)(sizeof(variants) / sizeof(variants[0])))

/* the chosen variant: written by mct_isa_select (at import, and when asked), read by every kernel call */
static const isa_kernels *active = &variants[0];

int mct_isa_count(void) { return N_VARIANTS; }

const char *mct_isa_name(int i) { return i >= 0 && i < N_VARIANTS ? variants[i].name : 0; }

int mct_isa_runs(int i) { return i >= 0 && i < N_VARIANTS && variants[i].runs(); }

int mct_isa_select(const char *name) {
    int pick = -1;
    for (int i = 0; i < N_VARIANTS; i++) {
        if (name ? strcmp(name, variants[i].name) == 0 : variants[i].runs()) pick = i;
    }
    if (pick < 0 || !variants[pick].runs()) return -1;
    active = &variants[pick];
    return pick;
}

const char *mct_isa_active(void) { return active->name; }

void mct_gemm(const float *A, const float *B, float *C, uint32_t M, uint32_t K, uint32_t N) {
    active->gemm(A, B, C, M, K, N);
}

void mct_gemm_bt(const float *A, const float *B, float *C, uint32_t M, uint32_t K, uint32_t N) {
    active->gemm_bt(A, B, C, M, K, N);
}

void mct_transpose(const float *A, float *AT, uint32_t rows, uint32_t cols) { active->transpose(A, AT, rows, cols); }

void mct_matmul_backward(const mct_layer *L, float *p, uint32_t j0, const float *x, const float *gy, float *gx,
                         uint32_t nb, uint32_t n_in, uint32_t n_out, const mct_sink *sink, float *tmp, int host) {
    active->matmul_backward(L, p, j0, x, gy, gx, nb, n_in, n_out, sink, tmp, host);
}

void mct_bias_grads(const mct_layer *L, float *p, uint32_t j0, const float *gy, uint32_t nb, uint32_t n,
                    const mct_sink *sink) {
    active->bias_grads(L, p, j0, gy, nb, n, sink);
}
