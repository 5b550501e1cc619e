/* gemm.c - the matrix kernels behind Dense, Linear and GLU.
 *
 * Every output element is one dot product summed in ascending k, starting from the k = 0
 * product, whatever the tiling: the host's wide register tiles and a device's narrow ones give
 * the same bits. MCT_TILE_M x MCT_TILE_N is the register tile (the host build sets 4 x 16 so
 * the compiler vectorises across outputs; devices use 1 x 8 with an FPU's 32 registers, else 1 x 4).
 */
#include "mct_layers.h"

#ifndef MCT_TILE_M
#define MCT_TILE_M 1
#endif
#ifndef MCT_TILE_N
#if defined(__ARM_FP)
#define MCT_TILE_N 8          /* 32 single-precision registers: eight accumulators fit */
#else
#define MCT_TILE_N 4
#endif
#endif

/* Keep the tile kernel out of its caller so its accumulators stay in registers (GCC, Clang). */
#if defined(__GNUC__)
#define MCT_NOINLINE __attribute__((noinline))
#else
#define MCT_NOINLINE
#endif

#if MCT_TILE_M == 1 && (MCT_TILE_N == 4 || MCT_TILE_N == 8)
/* The device tile: one row, four (or eight) outputs in named accumulators, which a compiler keeps in
 * registers also at -Os (an array would live on the stack). */
#if MCT_TILE_N == 8
#define MCT_EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#else
#define MCT_EACH(X) X(0) X(1) X(2) X(3)
#endif
#if MCT_VFP_ASM && MCT_TILE_N == 8
/* Tiles on a Cortex-M FPU, 8, 4, 2 and 1 outputs wide: per k one VLDMIA of A's element into s16 and one VLDM of
 * the row's weights, then one VMUL (k = 0) or VMLA per output into s0.. (the sums of the C tile below). */
#define VFP_OP(op, acc, w) op " s" #acc ", s16, s" #w "\n\t"
#define VFP_TILE(NAME, WREGS, ACCS, MUL, MLA, ...)                                                           \
    MCT_NOINLINE static void NAME(const float *A, const float *B, float *C, uint32_t K, uint32_t N) {       \
        uint32_t ldb = 4u * N;                                                                              \
        __asm__ volatile("vldmia %[a]!, {s16}\n\tvldm %[b], " WREGS "\n\t" MUL                            \
                         "subs %[k], %[k], #1\n\tbeq 2f\n"                                                  \
                         "1:\n\tadd %[b], %[b], %[ldb]\n\tvldmia %[a]!, {s16}\n\tvldm %[b], " WREGS "\n\t" MLA \
                         "subs %[k], %[k], #1\n\tbne 1b\n"                                                  \
                         "2:\n\tvstm %[c], " ACCS "\n\t"                                                   \
                         : [a] "+r"(A), [b] "+r"(B), [k] "+r"(K)                                           \
                         : [c] "r"(C), [ldb] "r"(ldb)                                                       \
                         : __VA_ARGS__, "s16", "cc", "memory");                                             \
    }
#define VFP_OPS8(op) VFP_OP(op, 0, 8) VFP_OP(op, 1, 9) VFP_OP(op, 2, 10) VFP_OP(op, 3, 11) \
    VFP_OP(op, 4, 12) VFP_OP(op, 5, 13) VFP_OP(op, 6, 14) VFP_OP(op, 7, 15)
#define VFP_OPS4(op) VFP_OP(op, 0, 8) VFP_OP(op, 1, 9) VFP_OP(op, 2, 10) VFP_OP(op, 3, 11)
#define VFP_OPS2(op) VFP_OP(op, 0, 8) VFP_OP(op, 1, 9)
#define VFP_OPS1(op) VFP_OP(op, 0, 8)
VFP_TILE(gemm_tile, "{s8-s15}", "{s0-s7}", VFP_OPS8("vmul.f32"), VFP_OPS8("vmla.f32"), "s0", "s1", "s2", "s3",
         "s4", "s5", "s6", "s7", "s8", "s9", "s10", "s11", "s12", "s13", "s14", "s15")
VFP_TILE(gemm_tile4, "{s8-s11}", "{s0-s3}", VFP_OPS4("vmul.f32"), VFP_OPS4("vmla.f32"), "s0", "s1", "s2", "s3",
         "s8", "s9", "s10", "s11")
VFP_TILE(gemm_tile2, "{s8-s9}", "{s0-s1}", VFP_OPS2("vmul.f32"), VFP_OPS2("vmla.f32"), "s0", "s1", "s8", "s9")
VFP_TILE(gemm_tile1, "{s8}", "{s0}", VFP_OPS1("vmul.f32"), VFP_OPS1("vmla.f32"), "s0", "s8")
#else
#define MCT_ACC_DECL(i) float s##i = a * B[i];
#define MCT_ACC_ADD(i) s##i = s##i + a * b[i];
#define MCT_ACC_STORE(i) C[i] = s##i;
MCT_NOINLINE static void gemm_tile(const float *A, const float *B, float *C, uint32_t K, uint32_t N) {
    float a = A[0];
    const float *b = B;
    MCT_EACH(MCT_ACC_DECL)
    for (uint32_t k = 1; k < K; k++) {
        b += N;
        a = A[k];
        MCT_EACH(MCT_ACC_ADD)
    }
    MCT_EACH(MCT_ACC_STORE)
}
#endif
#else
/* One full TM x TN tile of C = A B. The n loop is outside the m loop so that a compiler keeps the
 * tile in vector registers, one B load serving every row. */
#define MCT_GEMM_TILE(NAME, TM, TN)                                                                 \
    MCT_NOINLINE static void NAME(const float *A, const float *B, float *C, uint32_t K, uint32_t N) { \
        float acc[TM][TN], a[TM];                                                                   \
        for (uint32_t m = 0; m < TM; m++) a[m] = A[(size_t)m * K];                                  \
        for (uint32_t n = 0; n < TN; n++) {                                                         \
            float b = B[n];                                                                         \
            for (uint32_t m = 0; m < TM; m++) acc[m][n] = a[m] * b;                                 \
        }                                                                                           \
        for (uint32_t k = 1; k < K; k++) {                                                          \
            const float *b = B + (size_t)k * N;                                                     \
            for (uint32_t m = 0; m < TM; m++) a[m] = A[(size_t)m * K + k];                          \
            for (uint32_t n = 0; n < TN; n++) {                                                     \
                float bn = b[n];                                                                    \
                for (uint32_t m = 0; m < TM; m++) acc[m][n] = acc[m][n] + a[m] * bn;                \
            }                                                                                       \
        }                                                                                           \
        for (uint32_t m = 0; m < TM; m++)                                                           \
            for (uint32_t n = 0; n < TN; n++) C[(size_t)m * N + n] = acc[m][n];                     \
    }
MCT_GEMM_TILE(gemm_tile, MCT_TILE_M, MCT_TILE_N)
#if MCT_HOST && MCT_TILE_M > 1
/* The host's tile for any layout: A's element (m, k) at A[m * sm + k * sk] (A given transposed: sm = 1,
 * sk = its row length, e.g. x of a batch for dW = x^T gy, so no transpose is needed), C's element (m, n) at
 * C[m * cm + n * cn] (C stored transposed: cm = 1). The same sums as gemm_tile. */
MCT_NOINLINE static void gemm_tile_gen(const float *A, size_t sm, size_t sk, const float *B, float *C, size_t cm,
                                       size_t cn, uint32_t K, uint32_t N) {
    float acc[MCT_TILE_M][MCT_TILE_N], a[MCT_TILE_M];
    for (uint32_t m = 0; m < MCT_TILE_M; m++) a[m] = A[m * sm];
    for (uint32_t n = 0; n < MCT_TILE_N; n++) {
        float b = B[n];
        for (uint32_t m = 0; m < MCT_TILE_M; m++) acc[m][n] = a[m] * b;
    }
    for (uint32_t k = 1; k < K; k++) {
        const float *b = B + (size_t)k * N;
        for (uint32_t m = 0; m < MCT_TILE_M; m++) a[m] = A[m * sm + k * sk];
        for (uint32_t n = 0; n < MCT_TILE_N; n++) {
            float bn = b[n];
            for (uint32_t m = 0; m < MCT_TILE_M; m++) acc[m][n] = acc[m][n] + a[m] * bn;
        }
    }
    for (uint32_t m = 0; m < MCT_TILE_M; m++)
        for (uint32_t n = 0; n < MCT_TILE_N; n++) C[m * cm + n * cn] = acc[m][n];
}

#define MCT_EDGE_KB 64   /* rows of B's strip copied to the stack at a time (4 KB with 16 columns) */
/* A strip of C on the host, columns [0, nr) (nr <= TILE_N) of rows [0, M), at the speed of full tiles: the rows
 * past the last full tile repeat its first row (computed, never stored) and, when nr < TILE_N, the columns past
 * nr read zeros from a copy of B's strip, made one block of MCT_EDGE_KB rows of B at a time on the stack (and
 * shared by every row tile); between blocks the partial sums wait in C. So every loop has the full tile's
 * constant trip counts and vectorises, and each output is still its sum over k ascending from the k = 0
 * product. A's and C's layouts are gemm_tile_gen's. */
MCT_NOINLINE static void gemm_strip_host(const float *A, size_t sm, size_t sk, const float *B, float *C, size_t cm,
                                         size_t cn, uint32_t M, uint32_t K, uint32_t N, uint32_t nr) {
    float bp[MCT_EDGE_KB][MCT_TILE_N];
    for (uint32_t k0 = 0; k0 < K; k0 += MCT_EDGE_KB) {
        uint32_t kn = K - k0 < MCT_EDGE_KB ? K - k0 : MCT_EDGE_KB;
        const float *b = B + (size_t)k0 * N;
        size_t ldb = N;
        if (nr < MCT_TILE_N) {
            /* zeros by whole rows, then the nr columns one by one (row by row, a compiler would turn the
             * short copies into calls of memcpy, each costing more than the copy) */
            for (uint32_t r = 0; r < kn; r++)
                for (uint32_t n = 0; n < MCT_TILE_N; n++) bp[r][n] = 0.0f;
            for (uint32_t n = 0; n < nr; n++)
                for (uint32_t r = 0; r < kn; r++) bp[r][n] = b[(size_t)r * N + n];
            b = &bp[0][0];
            ldb = MCT_TILE_N;
        }
        for (uint32_t m0 = 0; m0 < M; m0 += MCT_TILE_M) {
            uint32_t mr = M - m0 < MCT_TILE_M ? M - m0 : MCT_TILE_M, k = 0;
            float acc[MCT_TILE_M][MCT_TILE_N], a[MCT_TILE_M];
            const float *rows[MCT_TILE_M];
            float *c = C + (size_t)m0 * cm;
            for (uint32_t m = 0; m < MCT_TILE_M; m++) rows[m] = A + (m0 + (m < mr ? m : 0)) * sm + (size_t)k0 * sk;
            if (k0 == 0) {
                for (uint32_t m = 0; m < MCT_TILE_M; m++) a[m] = rows[m][0];
                for (uint32_t n = 0; n < MCT_TILE_N; n++) {
                    float bn = b[n];
                    for (uint32_t m = 0; m < MCT_TILE_M; m++) acc[m][n] = a[m] * bn;
                }
                k = 1;
            } else {
                for (uint32_t m = 0; m < MCT_TILE_M; m++)
                    for (uint32_t n = 0; n < MCT_TILE_N; n++)
                        acc[m][n] = m < mr && n < nr ? c[m * cm + n * cn] : 0.0f;
            }
            for (; k < kn; k++) {
                const float *bk = b + (size_t)k * ldb;
                for (uint32_t m = 0; m < MCT_TILE_M; m++) a[m] = rows[m][(size_t)k * sk];
                for (uint32_t n = 0; n < MCT_TILE_N; n++) {
                    float bn = bk[n];
                    for (uint32_t m = 0; m < MCT_TILE_M; m++) acc[m][n] = acc[m][n] + a[m] * bn;
                }
            }
            if (mr == MCT_TILE_M && nr == MCT_TILE_N) {
                for (uint32_t m = 0; m < MCT_TILE_M; m++)
                    for (uint32_t n = 0; n < MCT_TILE_N; n++) c[m * cm + n * cn] = acc[m][n];
            } else {   /* column by column, for the reason of the copy above */
                for (uint32_t n = 0; n < nr; n++)
                    for (uint32_t m = 0; m < mr; m++) c[m * cm + n * cn] = acc[m][n];
            }
        }
    }
}

/* C = A B on the host in the layouts of gemm_tile_gen: full tiles, then each column strip's rest. */
static void gemm_host(const float *A, size_t sm, size_t sk, const float *B, float *C, size_t cm, size_t cn,
                      uint32_t M, uint32_t K, uint32_t N) {
    for (uint32_t n = 0; n < N; n += MCT_TILE_N) {
        uint32_t nr = N - n < MCT_TILE_N ? N - n : MCT_TILE_N;
        uint32_t mfull = nr == MCT_TILE_N ? M - M % MCT_TILE_M : 0;
        for (uint32_t m = 0; m < mfull; m += MCT_TILE_M) {
            if (sk == 1 && cn == 1) gemm_tile(A + m * sm, B + n, C + m * cm + n, K, N);
            else gemm_tile_gen(A + m * sm, sm, sk, B + n, C + m * cm + n * cn, cm, cn, K, N);
        }
        if (mfull < M)
            gemm_strip_host(A + mfull * sm, sm, sk, B + n, C + mfull * cm + n * cn, cm, cn, M - mfull, K, N, nr);
    }
}
#endif
#endif

#if !(MCT_HOST && MCT_TILE_M > 1)
/* A partial tile (rows mr <= TILE_M, columns nr <= TILE_N), same summation order. */
static void gemm_edge(const float *A, const float *B, float *C, uint32_t K, uint32_t N, uint32_t mr, uint32_t nr) {
#if MCT_TILE_M == 1
    (void)mr;
    for (uint32_t n = 0; n < nr; n++) {      /* the device: one scalar accumulator per leftover column */
        float s = A[0] * B[n];
        for (uint32_t k = 1; k < K; k++) s = s + A[k] * B[(size_t)k * N + n];
        C[n] = s;
    }
#else
    float acc[MCT_TILE_M][MCT_TILE_N];
    for (uint32_t m = 0; m < mr; m++) {
        float a = A[(size_t)m * K];
        for (uint32_t n = 0; n < nr; n++) acc[m][n] = a * B[n];
    }
    for (uint32_t k = 1; k < K; k++) {
        const float *b = B + (size_t)k * N;
        for (uint32_t m = 0; m < mr; m++) {
            float a = A[(size_t)m * K + k];
            for (uint32_t n = 0; n < nr; n++) acc[m][n] = acc[m][n] + a * b[n];
        }
    }
    for (uint32_t m = 0; m < mr; m++)
        for (uint32_t n = 0; n < nr; n++) C[(size_t)m * N + n] = acc[m][n];
#endif
}
#endif

void mct_gemm(const float *A, const float *B, float *C, uint32_t M, uint32_t K, uint32_t N) {
#if MCT_HOST && MCT_TILE_M > 1
    gemm_host(A, K, 1, B, C, N, 1, M, K, N);
#else
    for (uint32_t m = 0; m < M; m += MCT_TILE_M) {
        uint32_t mr = M - m < MCT_TILE_M ? M - m : MCT_TILE_M;
        const float *a = A + (size_t)m * K;
        float *c = C + (size_t)m * N;
        for (uint32_t n = 0; n < N; n += MCT_TILE_N) {
            uint32_t nr = N - n < MCT_TILE_N ? N - n : MCT_TILE_N;
            if (mr == MCT_TILE_M && nr == MCT_TILE_N) {
                gemm_tile(a, B + n, c + n, K, N);
                continue;
            }
#if MCT_VFP_ASM && MCT_TILE_N == 8
            (void)gemm_edge;
            if (nr & 4u) gemm_tile4(a, B + n, c + n, K, N);
            if (nr & 2u) gemm_tile2(a, B + n + (nr & 4u), c + n + (nr & 4u), K, N);
            if (nr & 1u) gemm_tile1(a, B + n + nr - 1u, c + n + nr - 1u, K, N);
#else
            gemm_edge(a, B + n, c + n, K, N, mr, nr);
#endif
        }
    }
#endif
}

void mct_gemm_bt(const float *A, const float *B, float *C, uint32_t M, uint32_t K, uint32_t N) {
    for (uint32_t m = 0; m < M; m++) {
        const float *a = A + (size_t)m * K;
        float *c = C + (size_t)m * N;
        uint32_t n = 0;
#if !defined(__OPTIMIZE_SIZE__)   /* four outputs per pass over a (-Os: the one-output loop alone, the same sums) */
        for (; n + 4 <= N; n += 4) {
            const float *b0 = B + (size_t)n * K, *b1 = b0 + K, *b2 = b1 + K, *b3 = b2 + K;
            float a0 = a[0];
            float s0 = a0 * b0[0], s1 = a0 * b1[0], s2 = a0 * b2[0], s3 = a0 * b3[0];
            for (uint32_t k = 1; k < K; k++) {
                float ak = a[k];
                s0 = s0 + ak * b0[k];
                s1 = s1 + ak * b1[k];
                s2 = s2 + ak * b2[k];
                s3 = s3 + ak * b3[k];
            }
            c[n] = s0; c[n + 1] = s1; c[n + 2] = s2; c[n + 3] = s3;
        }
#endif
        for (; n < N; n++) {
            const float *b = B + (size_t)n * K;
            float s = a[0] * b[0];
            for (uint32_t k = 1; k < K; k++) s = s + a[k] * b[k];
            c[n] = s;
        }
    }
}

void mct_transpose(const float *A, float *AT, uint32_t rows, uint32_t cols) {
    /* 8 x 8 blocks keep both the reads and the writes within a few cache lines */
    for (uint32_t r0 = 0; r0 < rows; r0 += 8) {
        uint32_t r1 = r0 + 8 < rows ? r0 + 8 : rows;
        for (uint32_t c0 = 0; c0 < cols; c0 += 8) {
            uint32_t c1 = c0 + 8 < cols ? c0 + 8 : cols;
            for (uint32_t r = r0; r < r1; r++)
                for (uint32_t c = c0; c < c1; c++) AT[(size_t)c * rows + r] = A[(size_t)r * cols + c];
        }
    }
}

/* The fused update of one sample's weight gradients x[i] * gy[o] (the device path), with a loop per
 * optimizer kind so that no per-weight branch on the kind remains; the update is mct_opt_elem_k's. With gx,
 * the same pass over a row of W first adds the row's term of dL/dx (gx[i] = sum over o ascending of
 * gy[o] * W[i][o], from the o = 0 product, as mct_gemm_bt sums it) from each weight before its update. */
#if !defined(__AVR__) && !defined(__OPTIMIZE_SIZE__)
#define FUSED_LOOP(KIND, REG)                                                                              \
    for (uint32_t i = 0; i < n_in; i++) {                                                                 \
        float xi = x[i], *wr = W + (size_t)i * n_out, *sr = st + (size_t)i * n_out;                      \
        if (gx) {                                                                                         \
            float a = gy[0] * wr[0];                                                                      \
            mct_opt_elem_k((KIND), (REG), oc, sc, lr, &wr[0], xi * gy[0], sr, stride, 1);                \
            for (uint32_t o = 1; o < n_out; o++) {                                                        \
                a = a + gy[o] * wr[o];                                                                    \
                mct_opt_elem_k((KIND), (REG), oc, sc, lr, &wr[o], xi * gy[o], sr + o, stride, 1);        \
            }                                                                                             \
            gx[i] = a;                                                                                    \
            continue;                                                                                     \
        }                                                                                                 \
        for (uint32_t o = 0; o < n_out; o++)                                                            \
            mct_opt_elem_k((KIND), (REG), oc, sc, lr, &wr[o], xi * gy[o], sr + o, stride, 1);           \
    }
#else   /* AVR and -Os: one copy of the loop (flash is scarce), the same sums */
#define FUSED_LOOP(KIND, REG)                                                                              \
    for (uint32_t i = 0; i < n_in; i++) {                                                                 \
        float xi = x[i], *wr = W + (size_t)i * n_out, *sr = st + (size_t)i * n_out, a = 0.0f;            \
        for (uint32_t o = 0; o < n_out; o++) {                                                            \
            if (gx) a = o ? a + gy[o] * wr[o] : gy[o] * wr[o];                                            \
            mct_opt_elem_k((KIND), (REG), oc, sc, lr, &wr[o], xi * gy[o], sr + o, stride, 1);            \
        }                                                                                                 \
        if (gx) gx[i] = a;                                                                                \
    }
#endif
#define FUSED_ROWS(KIND)                                                                                   \
    if (mct_opt_regularizes(oc)) FUSED_LOOP(KIND, 1) else FUSED_LOOP(KIND, 0)

#if MCT_VFP_ASM
/* Four weights of a row per step on a Cortex-M FPU, n4 steps: w[o] = w[o] - lr * (xi * gy[o]) (VMUL, then VMLS,
 * which rounds the product before the difference), and with a, first a = a + gy[o] * w[o] with the weight
 * before its update (VMLA): the arithmetic of FUSED_LOOP for plain SGD. */
#define SGD4_HEAD "1:\n\tvldmia %[g]!, {s8-s11}\n\tvldm %[w], {s0-s3}\n\t"
#define SGD4_TAIL                                                                                       \
    "vmul.f32 s8, %[xi], s8\n\tvmul.f32 s9, %[xi], s9\n\tvmul.f32 s10, %[xi], s10\n\tvmul.f32 s11, %[xi], s11\n\t"    \
    "vmls.f32 s0, %[lr], s8\n\tvmls.f32 s1, %[lr], s9\n\tvmls.f32 s2, %[lr], s10\n\tvmls.f32 s3, %[lr], s11\n\t"    \
    "vstmia %[w]!, {s0-s3}\n\tsubs %[n], %[n], #1\n\tbne 1b\n\t"
static void sgd_quads_vfp(float *w, const float *gy, uint32_t n4, float xi, float lr) {
    __asm__ volatile(SGD4_HEAD SGD4_TAIL
                     : [w] "+r"(w), [g] "+r"(gy), [n] "+r"(n4)
                     : [xi] "t"(xi), [lr] "t"(lr)
                     : "s0", "s1", "s2", "s3", "s8", "s9", "s10", "s11", "cc", "memory");
}
static float sgd_quads_dx_vfp(float *w, const float *gy, uint32_t n4, float xi, float lr, float a) {
    __asm__ volatile(SGD4_HEAD "vmla.f32 %[a], s8, s0\n\tvmla.f32 %[a], s9, s1\n\tvmla.f32 %[a], s10, s2\n\t"
                     "vmla.f32 %[a], s11, s3\n\t" SGD4_TAIL
                     : [w] "+r"(w), [g] "+r"(gy), [n] "+r"(n4), [a] "+t"(a)
                     : [xi] "t"(xi), [lr] "t"(lr)
                     : "s0", "s1", "s2", "s3", "s8", "s9", "s10", "s11", "cc", "memory");
    return a;
}

/* Plain SGD (no clipping, no regularization) of one sample's weights and, with gx, dL/dx: FUSED_LOOP's sums; the
 * weights outside the quads are updated by mct_opt_elem_k itself. */
static void sgd_rows_vfp(const mct_opt *oc, const mct_step *sc, float *W, const float *x, const float *gy, float *gx,
                         uint32_t n_in, uint32_t n_out, float lr) {
    for (uint32_t i = 0; i < n_in; i++) {
        float xi = x[i], *wr = W + (size_t)i * n_out, a = 0.0f;
        uint32_t o = 0;
        if (gx) {
            a = gy[0] * wr[0];
            mct_opt_elem_k(MCT_OPT_SGD, 0, oc, sc, lr, &wr[0], xi * gy[0], wr, 0, 1);
            o = 1;
        }
        uint32_t n4 = (n_out - o) / 4u;
        if (n4 && gx) a = sgd_quads_dx_vfp(wr + o, gy + o, n4, xi, lr, a);
        else if (n4) sgd_quads_vfp(wr + o, gy + o, n4, xi, lr);
        for (o += 4u * n4; o < n_out; o++) {
            if (gx) a = a + gy[o] * wr[o];
            mct_opt_elem_k(MCT_OPT_SGD, 0, oc, sc, lr, &wr[o], xi * gy[o], wr, 0, 1);
        }
        if (gx) gx[i] = a;
    }
}
#endif

/* Weights of one sample (batch of 1, so the gradient sum is the single product) updated in place, and
 * dL/dx into gx unless NULL, in one pass over W. */
static void fused_weights_1(const mct_layer *L, float *W, uint32_t q0, const float *x, const float *gy, float *gx,
                            uint32_t n_in, uint32_t n_out, const mct_sink *sink) {
    const mct_opt *oc = sink->opt;      /* pointers, not copies: this runs on the device, stack is tight */
    const mct_step *sc = sink->step;
    float lr = mct_layer_lr(sc, L);
    uint32_t stride = sink->n_params;
    float *st = sink->state ? sink->state + q0 : W;   /* SGD keeps no slots; never read then */
    switch (MCT_OPT_KIND(oc->kind)) {
    case MCT_OPT_MOMENTUM: FUSED_ROWS(MCT_OPT_MOMENTUM) break;
    case MCT_OPT_RMSPROP: FUSED_ROWS(MCT_OPT_RMSPROP) break;
    case MCT_OPT_RMSPROP_MOMENTUM: FUSED_ROWS(MCT_OPT_RMSPROP_MOMENTUM) break;
    case MCT_OPT_ADAM: FUSED_ROWS(MCT_OPT_ADAM) break;
    default:
#if MCT_VFP_ASM
        if (!mct_opt_regularizes(oc)) {
            sgd_rows_vfp(oc, sc, W, x, gy, gx, n_in, n_out, lr);
            break;
        }
#endif
        FUSED_ROWS(MCT_OPT_SGD) break;
    }
}

void mct_matmul_backward(const mct_layer *L, float *p, uint32_t j0, const float *x, const float *gy, float *gx,
                         uint32_t nb, uint32_t n_in, uint32_t n_out, const mct_sink *sink, float *tmp, int host) {
    const float *W = p + j0;
    host = host && MCT_HOST;
    if (sink && !sink->grads && nb == 1 && sink->div == 1.0f && !host) {
        fused_weights_1(L, p + j0, L->p_off + j0, x, gy, gx, n_in, n_out, sink);   /* one pass: dL/dx and update */
        return;
    }
    /* input gradient first: it needs the weights before an APPLY-mode sink changes them */
    if (gx) {
#if MCT_HOST && MCT_TILE_M > 1
        if (host && nb < n_in) {
            /* dL/dx^T = W gy^T, stored transposed into gx: a transpose of gy (nb x n_out) instead of W's
             * (n_in x n_out); each gx[s][i] is still the sum over o ascending of gy[s][o] * W[i][o] */
            mct_transpose(gy, tmp, nb, n_out);           /* gy^T: [n_out][nb] */
            gemm_host(W, n_out, 1, tmp, gx, 1, n_in, n_in, n_out, nb);
        } else
#endif
        if (host) {
            mct_transpose(W, tmp, n_in, n_out);          /* W^T: [n_out][n_in] */
            mct_gemm(gy, tmp, gx, nb, n_out, n_in);
        } else {
            mct_gemm_bt(gy, W, gx, nb, n_out, n_in);
        }
    }
    if (!sink) return;
    if (host && sink->grads) {                           /* dW = x^T gy, summed over samples in order */
        float *dW = sink->grads + L->p_off + j0;
#if MCT_TILE_M > 1
        (void)tmp;
        gemm_host(x, 1, n_in, gy, dW, n_out, 1, n_in, nb, n_out);  /* x read as x^T: (i, s) at x[s * n_in + i] */
#else
        mct_transpose(x, tmp, nb, n_in);                 /* x^T: [n_in][nb] */
        mct_gemm(tmp, gy, dW, n_in, nb, n_out);
#endif
        return;
    }
    if (!sink->grads && nb == 1 && sink->div == 1.0f) {
        fused_weights_1(L, p + j0, L->p_off + j0, x, gy, NULL, n_in, n_out, sink);
        return;
    }
    for (uint32_t i = 0; i < n_in; i++)          /* stored, or applied for a batch on a device */
        for (uint32_t o = 0; o < n_out; o++) {
            float g = x[i] * gy[o];
            for (uint32_t s = 1; s < nb; s++) g = g + x[(size_t)s * n_in + i] * gy[(size_t)s * n_out + o];
            mct_sink_put(sink, L, p, j0 + i * n_out + o, g);
        }
}

void mct_bias_grads(const mct_layer *L, float *p, uint32_t j0, const float *gy, uint32_t nb, uint32_t n,
                    const mct_sink *sink) {
    if (!sink->grads && nb == 1) {  /* one sample: its gradient is gy itself, applied as a range */
        mct_opt_apply_range(sink->opt, sink->step, mct_layer_lr(sink->step, L), p + j0, gy,
                            sink->state ? sink->state + L->p_off + j0 : 0, sink->n_params, n, 0, sink->div);
        return;
    }
    if (sink->grads) {      /* the same sums, row by row so that they vectorise */
        float *g = sink->grads + L->p_off + j0;
        for (uint32_t o = 0; o < n; o++) g[o] = gy[o];
        for (uint32_t s = 1; s < nb; s++)
            for (uint32_t o = 0; o < n; o++) g[o] = g[o] + gy[(size_t)s * n + o];
        return;
    }
    for (uint32_t o = 0; o < n; o++) {
        float g = gy[o];
        for (uint32_t s = 1; s < nb; s++) g = g + gy[(size_t)s * n + o];
        mct_sink_put(sink, L, p, j0 + o, g);
    }
}
