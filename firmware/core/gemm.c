/* gemm.c - the matrix kernels behind Dense, Linear and GLU.
 *
 * Every output element is one dot product summed in ascending k, starting from the k = 0
 * product, whatever the tiling: the host's wide register tiles and a device's narrow ones give
 * the same bits. MCT_TILE_M x MCT_TILE_N is the register tile (the host build sets 4 x 16 so
 * the compiler vectorises across outputs; devices keep 1 x 4).
 */
#include "mct_layers.h"

#ifndef MCT_TILE_M
#define MCT_TILE_M 1
#endif
#ifndef MCT_TILE_N
#define MCT_TILE_N 4
#endif

/* One full MCT_TILE_M x MCT_TILE_N tile of C = A B. */
static void gemm_tile(const float *A, const float *B, float *C, uint32_t K, uint32_t N) {
    float acc[MCT_TILE_M][MCT_TILE_N];
    for (uint32_t m = 0; m < MCT_TILE_M; m++) {
        float a = A[m * K];
        for (uint32_t n = 0; n < MCT_TILE_N; n++) acc[m][n] = a * B[n];
    }
    for (uint32_t k = 1; k < K; k++) {
        const float *b = B + (size_t)k * N;
        for (uint32_t m = 0; m < MCT_TILE_M; m++) {
            float a = A[m * K + k];
            for (uint32_t n = 0; n < MCT_TILE_N; n++) acc[m][n] = acc[m][n] + a * b[n];
        }
    }
    for (uint32_t m = 0; m < MCT_TILE_M; m++)
        for (uint32_t n = 0; n < MCT_TILE_N; n++) C[(size_t)m * N + n] = acc[m][n];
}

/* A partial tile (rows mr <= TILE_M, columns nr <= TILE_N), same summation order. */
static void gemm_edge(const float *A, const float *B, float *C, uint32_t K, uint32_t N, uint32_t mr, uint32_t nr) {
    for (uint32_t m = 0; m < mr; m++) {
        const float *a = A + (size_t)m * K;
        for (uint32_t n = 0; n < nr; n++) {
            float acc = a[0] * B[n];
            for (uint32_t k = 1; k < K; k++) acc = acc + a[k] * B[(size_t)k * N + n];
            C[(size_t)m * N + n] = acc;
        }
    }
}

void mct_gemm(const float *A, const float *B, float *C, uint32_t M, uint32_t K, uint32_t N) {
    uint32_t m = 0;
    for (; m + MCT_TILE_M <= M; m += MCT_TILE_M) {
        const float *a = A + (size_t)m * K;
        float *c = C + (size_t)m * N;
        uint32_t n = 0;
        for (; n + MCT_TILE_N <= N; n += MCT_TILE_N) gemm_tile(a, B + n, c + n, K, N);
        if (n < N) gemm_edge(a, B + n, c + n, K, N, MCT_TILE_M, N - n);
    }
    if (m < M) gemm_edge(A + (size_t)m * K, B, C + (size_t)m * N, K, N, M - m, N);
}

void mct_gemm_bt(const float *A, const float *B, float *C, uint32_t M, uint32_t K, uint32_t N) {
    for (uint32_t m = 0; m < M; m++) {
        const float *a = A + (size_t)m * K;
        float *c = C + (size_t)m * N;
        uint32_t n = 0;
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
        for (; n < N; n++) {
            const float *b = B + (size_t)n * K;
            float s = a[0] * b[0];
            for (uint32_t k = 1; k < K; k++) s = s + a[k] * b[k];
            c[n] = s;
        }
    }
}

void mct_transpose(const float *A, float *AT, uint32_t rows, uint32_t cols) {
    for (uint32_t r = 0; r < rows; r++)
        for (uint32_t c = 0; c < cols; c++) AT[(size_t)c * rows + r] = A[(size_t)r * cols + c];
}

void mct_matmul_backward(const mct_layer *L, float *p, uint32_t j0, const float *x, const float *gy, float *gx,
                         uint32_t nb, uint32_t n_in, uint32_t n_out, const mct_sink *sink, float *tmp, int host) {
    const float *W = p + j0;
    /* input gradient first: it needs the weights before an APPLY-mode sink changes them */
    if (gx) {
        if (host) {
            mct_transpose(W, tmp, n_in, n_out);          /* W^T: [n_out][n_in] */
            mct_gemm(gy, tmp, gx, nb, n_out, n_in);
        } else {
            mct_gemm_bt(gy, W, gx, nb, n_out, n_in);
        }
    }
    if (!sink) return;
    if (host && sink->grads) {                           /* dW = x^T gy, summed over samples in order */
        mct_transpose(x, tmp, nb, n_in);                 /* x^T: [n_in][nb] */
        mct_gemm(tmp, gy, sink->grads + L->p_off + j0, n_in, nb, n_out);
        return;
    }
    for (uint32_t i = 0; i < n_in; i++) {
        for (uint32_t o = 0; o < n_out; o++) {
            float g = x[i] * gy[o];
            for (uint32_t s = 1; s < nb; s++) g = g + x[(size_t)s * n_in + i] * gy[(size_t)s * n_out + o];
            mct_sink_put(sink, L, p, j0 + i * n_out + o, g);
        }
    }
}

void mct_bias_grads(const mct_layer *L, float *p, uint32_t j0, const float *gy, uint32_t nb, uint32_t n,
                    const mct_sink *sink) {
    for (uint32_t o = 0; o < n; o++) {
        float g = gy[o];
        for (uint32_t s = 1; s < nb; s++) g = g + gy[(size_t)s * n + o];
        mct_sink_put(sink, L, p, j0 + o, g);
    }
}
