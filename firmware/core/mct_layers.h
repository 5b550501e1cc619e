/* mct_layers.h - per-layer kernels of the mcutrain core and the small inline helpers they share.
 *
 * One file per layer (layer_*.c), each with its forward and backward side by side; the
 * parameter update is the optimizer's (optim.c), reached through mct_sink_put. Every forward
 * takes the layer, its parameters, the input x [nb][n_in], the output y [nb][n_out] and the
 * layer's aux trace; every backward takes an mct_bwd. Summation orders are fixed, so any tiling
 * gives the same bits.
 */
#ifndef MCT_LAYERS_H
#define MCT_LAYERS_H

#include "mct.h"
#include "mct_math.h"

/* The host build (MCT_HOST_KERNELS) has the batch paths that transpose into scratch and copies the
 * optimizer settings into locals for vectorisation; device builds leave both out. */
#ifdef MCT_HOST_KERNELS
#define MCT_HOST 1
#else
#define MCT_HOST 0
#endif

/* May the core use GNU inline assembly (GCC, Clang)? -DMCT_NO_ASM keeps the C loops everywhere (every asm path has
 * one beside it that gives the same bits), for a compiler without it. */
#if !defined(MCT_NO_ASM) && defined(__GNUC__)
#define MCT_GNU_ASM 1
#else
#define MCT_GNU_ASM 0
#endif

/* Device builds for a Cortex-M with a single-precision FPU (Thumb-2) run the hot loops of gemm.c as inline
 * assembly that loads eight floats with one VLDM. VMLA and VMLS round the product before the sum, so they give
 * the bits of the C loops beside them (the compiler itself emits them for those loops under -ffp-contract=off). */
#if !MCT_HOST && MCT_GNU_ASM && defined(__thumb2__) && defined(__ARM_FP) && (__ARM_FP & 4)
#define MCT_VFP_ASM 1
#else
#define MCT_VFP_ASM 0
#endif

/* Everything a layer's backward pass needs. */
typedef struct mct_bwd {
    const float *x;         /* layer input [nb][n_in] */
    const float *y;         /* layer output [nb][n_out] */
    float *aux;             /* the layer's aux trace */
    const float *gy;        /* dL/dy [nb][n_out] */
    float *gx;              /* dL/dx [nb][n_in], or NULL when not needed */
    uint32_t nb;            /* samples */
    const mct_sink *sink;   /* where parameter gradients go (NULL: frozen layer) */
    float *tmp;             /* scratch: mct_layer_scratch floats */
    int host;               /* 1: host layout (transposes in tmp) */
} mct_bwd;

/* ---- shared kernels (gemm.c) ---- */
/* C[m][n] = sum over k of A[m][k] * B[k][n], k ascending from the k = 0 product (tiled). */
void mct_gemm(const float *A, const float *B, float *C, uint32_t M, uint32_t K, uint32_t N);
/* C[m][n] = sum over k of A[m][k] * B[n][k] (B stored transposed), same summation order as mct_gemm. */
void mct_gemm_bt(const float *A, const float *B, float *C, uint32_t M, uint32_t K, uint32_t N);
/* AT[c][r] = A[r][c] for a rows x cols matrix. */
void mct_transpose(const float *A, float *AT, uint32_t rows, uint32_t cols);
/* Backward of y = x W, the core of Dense, Linear and GLU, with W = p + j0 ([n_in][n_out]): gx = gy W^T
 * (if gx), then the weight gradients (summed over samples) to the sink as layer parameters j0... */
void mct_matmul_backward(const mct_layer *L, float *p, uint32_t j0, const float *x, const float *gy, float *gx,
                         uint32_t nb, uint32_t n_in, uint32_t n_out, const mct_sink *sink, float *tmp, int host);
/* Sum over samples of gy [nb][n] into parameters j0.. of the layer via the sink (a bias gradient). */
void mct_bias_grads(const mct_layer *L, float *p, uint32_t j0, const float *gy, uint32_t nb, uint32_t n,
                    const mct_sink *sink);

/* ---- optimizer, per element ---- */
/* Update one parameter w with gradient g (already divided by the batch size) for optimizer kind (a
 * separate argument so loops over many parameters can pass a constant); st points to its first slot.
 * reg = 0 skips clipping and L1/L2 (the caller knows all three are off: same result, less work). */
static MCT_INLINE void mct_opt_elem_k(uint8_t kind, int reg, const mct_opt *o, const mct_step *s, float lr, float *w,
                                  float g, float *st, uint32_t stride, int weight) {
    float wv = *w;
    if (reg && o->clip > 0.0f) g = g > o->clip ? o->clip : (g < -o->clip ? -o->clip : g);
    if (reg && weight) {
        if (o->l1 != 0.0f) g = g + o->l1 * (wv > 0.0f ? 1.0f : (wv < 0.0f ? -1.0f : 0.0f));
        if (o->l2 != 0.0f) g = g + 2.0f * o->l2 * wv;
    }
    switch (MCT_OPT_KIND(kind)) {
    case MCT_OPT_MOMENTUM: {
        float v = o->momentum * st[0] + s->sim * g;
        st[0] = v;
        wv = wv - lr * v;
        break;
    }
    case MCT_OPT_RMSPROP: {
        float a = o->beta * st[0] + (1.0f - o->beta) * (g * g);
        st[0] = a;
        wv = wv - lr * mct_div(g, mct_sqrtf(a + o->eps));
        break;
    }
    case MCT_OPT_RMSPROP_MOMENTUM: {
        float a = o->beta * st[0] + (1.0f - o->beta) * (g * g);
        st[0] = a;
        float v = o->momentum * st[stride] + s->sim * mct_div(g, mct_sqrtf(a + o->eps));
        st[stride] = v;
        wv = wv - lr * v;
        break;
    }
    case MCT_OPT_ADAM: {
        float m = o->beta1 * st[0] + (1.0f - o->beta1) * g;
        float v = o->beta * st[stride] + (1.0f - o->beta) * (g * g);
        st[0] = m;
        st[stride] = v;
        wv = wv - lr * mct_div(mct_div(m, s->c1), mct_sqrtf(mct_div(v, s->c2)) + o->eps);
        break;
    }
    default: /* MCT_OPT_SGD */
        wv = wv - lr * g;
        break;
    }
    *w = wv;
}

/* Does the update clip or regularize (else mct_opt_elem_k may skip those steps)? Never in firmware built with
 * MCT_REGULARIZE=0 (mct_train_step refuses such a config there: mct_opt_asks_reg). */
static inline int mct_opt_regularizes(const mct_opt *o) { return MCT_REGULARIZE && mct_opt_asks_reg(o); }

/* Update one parameter with the optimizer's own kind (see mct_opt_elem_k). */
static inline void mct_opt_elem(const mct_opt *o, const mct_step *s, float lr, float *w, float g, float *st,
                                uint32_t stride, int weight) {
    mct_opt_elem_k(o->kind, MCT_REGULARIZE, o, s, lr, w, g, st, stride, weight);
}

/* Update n parameters w[0..n) from gradient sums g (divided by div); the first n_w are connection weights. */
void mct_opt_apply_range(const mct_opt *o, const mct_step *s, float lr, float *w, const float *g, float *st,
                         uint32_t stride, uint32_t n, uint32_t n_w, float div);

/* Learning rate of a layer: the step's, divided by the layer's LR-wrapper divisor. */
static inline float mct_layer_lr(const mct_step *s, const mct_layer *L) {
    return L->lr_div == 1.0f ? s->lr : mct_div(s->lr, L->lr_div);
}

/* Hand the batch-summed gradient of layer parameter j (p = the layer's parameters) to the sink. */
static inline void mct_sink_put(const mct_sink *k, const mct_layer *L, float *p, uint32_t j, float gsum) {
    if (k->grads) {
        k->grads[L->p_off + j] = gsum;
    } else {
        float g = k->div == 1.0f ? gsum : mct_div(gsum, k->div);
        mct_opt_elem(k->opt, k->step, mct_layer_lr(k->step, L), &p[j], g,
                     k->state ? k->state + L->p_off + j : NULL, k->n_params, j < L->n_w);
    }
}

/* ---- activations, per element ---- */
/* Logistic sigmoid 1 / (1 + e^-x). */
static inline float mct_sigmoidf(float x) { return mct_div(1.0f, 1.0f + mct_expf(-x)); }

/* ReLU. */
static inline float mct_relu(float x) { return x > 0.0f ? x : 0.0f; }
/* ReLU's derivative at x. */
static inline float mct_drelu(float x) { return x > 0.0f ? 1.0f : 0.0f; }
/* ReLU6: min(max(x, 0), 6). */
static inline float mct_relu6(float x) { return x > 6.0f ? 6.0f : mct_relu(x); }
/* ReLU6's derivative at x. */
static inline float mct_drelu6(float x) { return x > 0.0f && x < 6.0f ? 1.0f : 0.0f; }
/* Leaky ReLU with slope alpha below zero. */
static inline float mct_leaky(float x, float alpha) { return x < 0.0f ? alpha * x : x; }
/* Leaky ReLU's derivative at x. */
static inline float mct_dleaky(float x, float alpha) { return x < 0.0f ? alpha : 1.0f; }
/* Sigmoid's derivative from its output y. */
static inline float mct_dsigmoid(float y) { return y * (1.0f - y); }
/* tanh's derivative from its output y. */
static inline float mct_dtanh(float y) { return 1.0f - y * y; }
/* SiLU: x sigmoid(x). */
static inline float mct_silu(float x) { return x * mct_sigmoidf(x); }
/* SiLU's derivative at x. */
static inline float mct_dsilu(float x) { float s = mct_sigmoidf(x); return s * (1.0f + x * (1.0f - s)); }
/* Softplus log(1 + e^x), without overflow. */
static inline float mct_softplus(float x) {
    return (x > 0.0f ? x : 0.0f) + mct_log1pf(mct_expf(-(x < 0.0f ? -x : x)));
}

/* Activation function of kind (enum mct_act, not SWISH) at x; alpha is the leaky slope. */
static inline float mct_act1(uint8_t kind, float alpha, float x) {
    switch (kind) {
    case MCT_ACT_RELU: if (!MCT_WITH_ACT(MCT_ACT_RELU)) return 0.0f; return mct_relu(x);
    case MCT_ACT_LEAKY_RELU: if (!MCT_WITH_ACT(MCT_ACT_LEAKY_RELU)) return 0.0f; return mct_leaky(x, alpha);
    case MCT_ACT_SIGMOID: if (!MCT_WITH_ACT(MCT_ACT_SIGMOID)) return 0.0f; return mct_sigmoidf(x);
    case MCT_ACT_TANH: if (!MCT_WITH_ACT(MCT_ACT_TANH)) return 0.0f; return mct_tanhf(x);
    case MCT_ACT_SILU: if (!MCT_WITH_ACT(MCT_ACT_SILU)) return 0.0f; return mct_silu(x);
    case MCT_ACT_SOFTPLUS: if (!MCT_WITH_ACT(MCT_ACT_SOFTPLUS)) return 0.0f; return mct_softplus(x);
    case MCT_ACT_SINE: if (!MCT_WITH_ACT(MCT_ACT_SINE)) return 0.0f; return mct_sinf(x);
    case MCT_ACT_COSINE: if (!MCT_WITH_ACT(MCT_ACT_COSINE)) return 0.0f; return mct_cosf(x);
    case MCT_ACT_RELU6: if (!MCT_WITH_ACT(MCT_ACT_RELU6)) return 0.0f; return mct_relu6(x);
    default: return x;
    }
}

/* Derivative of activation kind at x, given y = mct_act1(kind, alpha, x). */
static inline float mct_dact1(uint8_t kind, float alpha, float x, float y) {
    switch (kind) {
    case MCT_ACT_RELU: if (!MCT_WITH_ACT(MCT_ACT_RELU)) return 0.0f; return mct_drelu(x);
    case MCT_ACT_LEAKY_RELU: if (!MCT_WITH_ACT(MCT_ACT_LEAKY_RELU)) return 0.0f; return mct_dleaky(x, alpha);
    case MCT_ACT_SIGMOID: if (!MCT_WITH_ACT(MCT_ACT_SIGMOID)) return 0.0f; return mct_dsigmoid(y);
    case MCT_ACT_TANH: if (!MCT_WITH_ACT(MCT_ACT_TANH)) return 0.0f; return mct_dtanh(y);
    case MCT_ACT_SILU: if (!MCT_WITH_ACT(MCT_ACT_SILU)) return 0.0f; return mct_dsilu(x);
    case MCT_ACT_SOFTPLUS: if (!MCT_WITH_ACT(MCT_ACT_SOFTPLUS)) return 0.0f; return mct_sigmoidf(x);
    case MCT_ACT_SINE: if (!MCT_WITH_ACT(MCT_ACT_SINE)) return 0.0f; return mct_cosf(x);
    case MCT_ACT_COSINE: if (!MCT_WITH_ACT(MCT_ACT_COSINE)) return 0.0f; return -mct_sinf(x);
    case MCT_ACT_RELU6: if (!MCT_WITH_ACT(MCT_ACT_RELU6)) return 0.0f; return mct_drelu6(x);
    default: return 1.0f;
    }
}

/* ---- per-layer kernels (one file each) ---- */
/* Every op of MCT_OP_LIST has, in its own file, mct_<stem>_check and mct_<stem>_size (declared here from the
 * list): does the layer's op-specific fields (kind, sizes, alpha, k) suit the op (1 = yes), and what the layer
 * needs: parameters, aux trace, backward scratch for nb samples (host: with room for transposes), const blob
 * bytes. The size function only adds to *s, which the caller zeroes (out comes preset). */
#define MCT_OP_FACTS_DECL(NAME, VALUE, STEM, CALL, IN_I8, OUT_I8)                                  \
    int mct_##STEM##_check(const mct_layer *L);                                                     \
    void mct_##STEM##_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s);
MCT_OP_LIST(MCT_OP_FACTS_DECL)
#undef MCT_OP_FACTS_DECL
/* Is bit v of a 32-bit mask set (0 for v >= 32)? */
static inline int mct_bit(uint32_t mask, uint8_t v) { return v < 32 && ((mask >> v) & 1u); }
/* Floats of backward scratch of y = x W for nb samples: on the host the transposes of mct_matmul_backward. */
static inline uint32_t mct_matmul_scratch(const mct_layer *L, uint32_t nb, int host) {
    uint32_t I = L->n_in, O = L->n_out;
    return host ? (I * O > nb * I ? I * O : nb * I) + nb * O : 0;
}

/* ---- spatial ops (see "Spatial ops" in mct.h) ---- */
/* Taps [*k0, *k1) of the window of output index o along one axis (stride st, padding pad, window k, input
 * size n) that fall inside the input; the tap kk reads input index o * st - pad + kk. */
static inline void mct_window(uint32_t o, uint32_t st, uint32_t pad, uint32_t k, uint32_t n, uint32_t *k0,
                              uint32_t *k1) {
    int32_t start = (int32_t)(o * st) - (int32_t)pad;
    *k0 = start < 0 ? (uint32_t)(-start) : 0u;
    *k1 = start + (int32_t)k > (int32_t)n ? (uint32_t)((int32_t)n - start) : k;
}
/* Where tap (ky, kx) of the window at output (oy, ox) reads: the offset of its channel 0 in one sample of L's input. */
static MCT_INLINE size_t mct_tap_at(const mct_layer *L, uint32_t oy, uint32_t ox, uint32_t ky, uint32_t kx) {
    return ((size_t)(oy * L->sh + ky - L->pt) * L->w_in + (ox * L->sw + kx - L->pl)) * L->c_in;
}
/* Parameter j of a layer kept in RAM (p), or in the const blob (c, f32 in the same layout) when c is set. */
static MCT_INLINE float mct_wget(const float *p, const uint8_t *c, size_t j) {
    return c ? mct_cload_f32(c + 4 * j) : p[j];
}
/* Weight j of a convolution: its int8 weight (q set: a frozen layer with int8 weights, MCT_STORE_I8), else
 * mct_wget(p, c, j). */
static MCT_INLINE float mct_wget8(const float *p, const uint8_t *c, const uint8_t *q, size_t j) {
    return q ? (float)mct_cload_i8(q + j) : mct_wget(p, c, j);
}
/* 1: a frozen convolution's kernels get a copy for f32 weights and one for int8 weights; 0 (AVR): one copy that
 * reads either (flash is scarcer there than the time of a branch beside soft-float products). */
#if defined(__AVR__)
#define MCT_CONV_I8_SPLIT 0
#else
#define MCT_CONV_I8_SPLIT 1
#endif
/* A convolution's int8 weights in its const blob c (MCT_STORE_I8: after the scales and, with kind 1, the biases),
 * or NULL when it is kept otherwise (or int8 weights are not compiled in). */
static MCT_INLINE const uint8_t *mct_conv_i8(const mct_layer *L, const uint8_t *c) {
    if (!MCT_WITH_OP(MCT_I8_WEIGHTS_BIT) || L->storage != MCT_STORE_I8) return NULL;
    return c + 4u * (size_t)L->c_out * (L->kind ? 2u : 1u);
}
/* Are a spatial layer's geometry fields consistent (sizes, windows, padding less than the window)? 1 = yes. */
int mct_spatial_check(const mct_layer *L);
/* Runs the statements after L and nb for every sample s < nb and output position (oy, ox) of spatial layer L, in that
 * order, with the taps of the window that fall inside the input: rows [ky0, ky1), columns [kx0, kx1) (mct_window);
 * tap (ky, kx) reads input row oy sh - pt + ky, column ox sw - pl + kx. Every spatial kernel walks its windows here. */
#define MCT_FOR_WINDOWS(L, nb, ...)                                                                           \
    for (uint32_t s = 0; s < (nb); s++)                                                                       \
        for (uint32_t oy = 0; oy < (L)->h_out; oy++) {                                                        \
            uint32_t ky0, ky1;                                                                                \
            mct_window(oy, (L)->sh, (L)->pt, (L)->kh, (L)->h_in, &ky0, &ky1);                                 \
            for (uint32_t ox = 0; ox < (L)->w_out; ox++) {                                                    \
                uint32_t kx0, kx1;                                                                            \
                mct_window(ox, (L)->sw, (L)->pl, (L)->kw, (L)->w_in, &kx0, &kx1);                             \
                __VA_ARGS__                                                                                   \
            }                                                                                                 \
        }

/* Dense / Linear forward (layer_dense.c). */
void mct_dense_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb);
/* Dense / Linear backward. */
void mct_dense_backward(const mct_layer *L, float *p, const mct_bwd *b);
/* Forward of a frozen Dense / Linear kept in the const blob at c (f32 or int8 weights). */
void mct_dense_const_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb);
/* Input gradient of a frozen Dense / Linear kept in the const blob (it has no parameter gradients). */
void mct_dense_const_backward(const mct_layer *L, const uint8_t *c, const mct_bwd *b);
/* Bias1d forward (layer_bias.c). */
void mct_bias_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb);
/* Bias1d backward. */
void mct_bias_backward(const mct_layer *L, float *p, const mct_bwd *b);
/* Elementwise activation forward (layer_activation.c). */
void mct_act_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb);
/* Elementwise activation backward. */
void mct_act_backward(const mct_layer *L, float *p, const mct_bwd *b);
/* Softmax forward (layer_softmax.c). */
void mct_softmax_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb);
/* Softmax backward. */
void mct_softmax_backward(const mct_layer *L, float *p, const mct_bwd *b);
/* Cross-entropy -sum t log p of one sample on a Softmax's output p (input x), from log-softmax; its gradient
 * w.r.t. x, (p sum(t) - t) / T, into gx (layer_softmax.c). */
float mct_softmax_xent(const mct_layer *L, const float *x, const float *p, const float *t, float *gx);
/* Swish with learned beta forward (layer_swish.c). */
void mct_swish_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb);
/* Swish backward. */
void mct_swish_backward(const mct_layer *L, float *p, const mct_bwd *b);
/* Gated linear unit forward (layer_glu.c). */
void mct_glu_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb);
/* Gated linear unit backward. */
void mct_glu_backward(const mct_layer *L, float *p, const mct_bwd *b);
/* Diag (learned per-element scale) forward (layer_diag.c). */
void mct_diag_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb);
/* Diag backward. */
void mct_diag_backward(const mct_layer *L, float *p, const mct_bwd *b);
/* ScalarScale forward (layer_scale.c). */
void mct_scale_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb);
/* ScalarScale backward. */
void mct_scale_backward(const mct_layer *L, float *p, const mct_bwd *b);
/* RMSNorm forward (layer_rmsnorm.c). */
void mct_rmsnorm_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb);
/* RMSNorm backward. */
void mct_rmsnorm_backward(const mct_layer *L, float *p, const mct_bwd *b);
/* DyT (dynamic tanh) forward (layer_dyt.c). */
void mct_dyt_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb);
/* DyT backward. */
void mct_dyt_backward(const mct_layer *L, float *p, const mct_bwd *b);
/* Conv1d forward (layer_conv1d.c). */
void mct_conv1d_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb);
/* Conv1d backward. */
void mct_conv1d_backward(const mct_layer *L, float *p, const mct_bwd *b);
/* Conv2d forward (layer_conv2d.c). */
void mct_conv2d_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb);
/* Conv2d backward. */
void mct_conv2d_backward(const mct_layer *L, float *p, const mct_bwd *b);
/* Forward of a frozen Conv2d kept in the const blob at c (f32, the RAM layout). */
void mct_conv2d_const_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb);
/* Input gradient of a frozen Conv2d kept in the const blob. */
void mct_conv2d_const_backward(const mct_layer *L, const uint8_t *c, const mct_bwd *b);
/* Depthwise Conv2d forward (layer_dwconv2d.c). */
void mct_dwconv2d_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb);
/* Depthwise Conv2d backward. */
void mct_dwconv2d_backward(const mct_layer *L, float *p, const mct_bwd *b);
/* Forward of a frozen depthwise Conv2d kept in the const blob at c (f32, the RAM layout). */
void mct_dwconv2d_const_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb);
/* Input gradient of a frozen depthwise Conv2d kept in the const blob. */
void mct_dwconv2d_const_backward(const mct_layer *L, const uint8_t *c, const mct_bwd *b);
/* Max pooling forward (layer_pool2d.c). */
void mct_maxpool2d_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb);
/* Max pooling backward. */
void mct_maxpool2d_backward(const mct_layer *L, float *p, const mct_bwd *b);
/* Average pooling forward (layer_pool2d.c). */
void mct_avgpool2d_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb);
/* Average pooling backward. */
void mct_avgpool2d_backward(const mct_layer *L, float *p, const mct_bwd *b);
/* BatchNorm forward (layer_batchnorm.c). */
void mct_batchnorm_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb);
/* BatchNorm backward (kind 1 also moves the running statistics). */
void mct_batchnorm_backward(const mct_layer *L, float *p, const mct_bwd *b);
/* Dropout forward (layer_dropout.c). */
void mct_dropout_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb);
/* Dropout backward (kind 1 also advances its step counter). */
void mct_dropout_backward(const mct_layer *L, float *p, const mct_bwd *b);
/* Residual blocks (layer_residual.c): RES_BEGIN forward (nothing: its output is its input). */
void mct_res_begin_forward(const mct_net *net, const mct_layer *L, const float *x, float *y, float *arena,
                           uint32_t nb);
/* RES_BEGIN backward: dL/dx = dL/dy + the gradient around the body (its RES_END's or RES_SHORTCUT's aux). */
void mct_res_begin_backward(const mct_net *net, const mct_layer *L, float *arena, const mct_bwd *b);
/* RES_SHORTCUT forward (nothing: its output is its block's input, where the shortcut body starts). */
void mct_res_shortcut_forward(const mct_net *net, const mct_layer *L, const float *x, float *y, float *arena,
                              uint32_t nb);
/* RES_SHORTCUT backward: keeps dL/dx of the shortcut body in aux; dL/d(main body output) = its RES_END's dL/dy. */
void mct_res_shortcut_backward(const mct_net *net, const mct_layer *L, float *arena, const mct_bwd *b);
/* RES_END forward: y = x + the input of layer k (the block's input, or the main body's output). */
void mct_res_end_forward(const mct_net *net, const mct_layer *L, const float *x, float *y, float *arena,
                         uint32_t nb);
/* RES_END backward: dL/dy flows into the body and, kept in aux, around it. */
void mct_res_end_backward(const mct_net *net, const mct_layer *L, float *arena, const mct_bwd *b);
/* Full-integer ops (layer_quant.c); c = the op's constants in the const blob, x and y in the arena (int8
 * tensors as described at MCT_OP_QUANT). Is op one of them? */
static inline int mct_is_qop(uint8_t op) { return mct_bit(MCT_OPS_QOP, op); }
/* Does the op read an int8 tensor? */
static inline int mct_reads_i8(uint8_t op) { return mct_bit(MCT_OPS_READ_I8, op); }
/* Does the op write an int8 tensor? */
static inline int mct_writes_i8(uint8_t op) { return mct_bit(MCT_OPS_WRITE_I8, op); }
/* QUANT forward: f32 x [nb][n_in] -> int8 y. */
void mct_quantize_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb);
/* DEQUANT forward: int8 x -> f32 y [nb][n_out]. */
void mct_dequantize_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb);
/* QDENSE forward: int8 x -> int8 y. */
void mct_qdense_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb);
/* Rows of int8 weights mct_dot8_rows sums in one pass over x. */
#define MCT_DOT8_ROWS 4u
/* acc[k] = sum_{i < n} x[i] * w[k * stride + i] (int8 w in const memory) for k < rows (1 to MCT_DOT8_ROWS), exact. */
void mct_dot8_rows(const int8_t *x, const uint8_t *w, uint32_t n, uint32_t stride, uint32_t rows, int32_t *acc);
/* QLUT forward: int8 x -> int8 y. */
void mct_qlut_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb);
/* QCONV2D forward (int8 Conv2d, reference kernel): int8 x -> int8 y. */
void mct_qconv2d_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb);
/* QDWCONV2D forward (int8 depthwise Conv2d, reference kernel): int8 x -> int8 y. */
void mct_qdwconv2d_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb);
/* QMAXPOOL2D forward (int8 max pooling): int8 x -> int8 y. */
void mct_qmaxpool2d_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb);
/* QAVGPOOL2D forward (int8 average pooling): int8 x -> int8 y. */
void mct_qavgpool2d_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb);
/* QSOFTMAX forward (TensorFlow Lite Micro's int8 softmax, layer_qsoftmax.c): int8 x -> int8 y. */
void mct_qsoftmax_forward(const mct_layer *L, const uint8_t *c, const float *x, float *y, uint32_t nb);
/* Backward of any full-integer op: only dL/dx, which is 0 (when asked for). */
void mct_qop_backward(const mct_layer *L, const mct_bwd *b);
/* round(a * mult / 2^shift) as QDENSE requantizes (MCT_QSHIFT_TFLITE included), saturated to +-2^30. */
int32_t mct_requantize(int32_t a, int32_t mult, int32_t shift);
/* Does layer L read an int8 tensor (its op's, or a RES_BEGIN / RES_SHORTCUT of kind 1, which carry int8)? */
static inline int mct_layer_reads_i8(const mct_layer *L) {
    return mct_reads_i8(L->op) || ((L->op == MCT_OP_RES_BEGIN || L->op == MCT_OP_RES_SHORTCUT) && L->kind == 1);
}
/* Does layer L write an int8 tensor (as mct_layer_reads_i8)? */
static inline int mct_layer_writes_i8(const mct_layer *L) {
    return mct_writes_i8(L->op) || ((L->op == MCT_OP_RES_BEGIN || L->op == MCT_OP_RES_SHORTCUT) && L->kind == 1);
}
/* QRES_END forward (layer_qadd.c): int8 y = x + the input of layer k, requantized (constants at net->cdata +
 * L->p_off). */
void mct_qres_end_forward(const mct_net *net, const mct_layer *L, const float *x, float *y, float *arena,
                          uint32_t nb);
/* QRES_END backward: dL/dx is 0, as any full-integer op's. */
void mct_qres_end_backward(const mct_net *net, const mct_layer *L, float *arena, const mct_bwd *b);

#endif /* MCT_LAYERS_H */
