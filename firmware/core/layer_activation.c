/* layer_activation.c - elementwise activations without parameters: ReLU, LeakyReLU(alpha),
 * Sigmoid, Tanh, SiLU, Softplus, Sine, Cosine (kind = enum mct_act). The loops are written per
 * kind so a host compiler can vectorise each one. */
#include "mct_layers.h"

void mct_act_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    (void)p; (void)aux;
    uint32_t n = (uint32_t)L->n_out * nb;
    float a = L->alpha;
    switch (L->kind) {
    case MCT_ACT_RELU: for (uint32_t j = 0; j < n; j++) y[j] = mct_act1(MCT_ACT_RELU, a, x[j]); break;
    case MCT_ACT_LEAKY_RELU: for (uint32_t j = 0; j < n; j++) y[j] = mct_act1(MCT_ACT_LEAKY_RELU, a, x[j]); break;
    case MCT_ACT_SIGMOID: for (uint32_t j = 0; j < n; j++) y[j] = mct_act1(MCT_ACT_SIGMOID, a, x[j]); break;
    case MCT_ACT_TANH: for (uint32_t j = 0; j < n; j++) y[j] = mct_act1(MCT_ACT_TANH, a, x[j]); break;
    case MCT_ACT_SILU: for (uint32_t j = 0; j < n; j++) y[j] = mct_act1(MCT_ACT_SILU, a, x[j]); break;
    case MCT_ACT_SOFTPLUS: for (uint32_t j = 0; j < n; j++) y[j] = mct_act1(MCT_ACT_SOFTPLUS, a, x[j]); break;
    case MCT_ACT_SINE: for (uint32_t j = 0; j < n; j++) y[j] = mct_act1(MCT_ACT_SINE, a, x[j]); break;
    default: for (uint32_t j = 0; j < n; j++) y[j] = mct_act1(MCT_ACT_COSINE, a, x[j]); break;
    }
}

void mct_act_backward(const mct_layer *L, float *p, const mct_bwd *b) {
    (void)p;
    if (!b->gx) return;
    uint32_t n = (uint32_t)L->n_out * b->nb;
    const float *x = b->x, *y = b->y, *gy = b->gy;
    float *gx = b->gx, a = L->alpha;
    switch (L->kind) {
    case MCT_ACT_RELU: for (uint32_t j = 0; j < n; j++) gx[j] = gy[j] * mct_dact1(MCT_ACT_RELU, a, x[j], y[j]); break;
    case MCT_ACT_LEAKY_RELU: for (uint32_t j = 0; j < n; j++) gx[j] = gy[j] * mct_dact1(MCT_ACT_LEAKY_RELU, a, x[j], y[j]); break;
    case MCT_ACT_SIGMOID: for (uint32_t j = 0; j < n; j++) gx[j] = gy[j] * mct_dact1(MCT_ACT_SIGMOID, a, x[j], y[j]); break;
    case MCT_ACT_TANH: for (uint32_t j = 0; j < n; j++) gx[j] = gy[j] * mct_dact1(MCT_ACT_TANH, a, x[j], y[j]); break;
    case MCT_ACT_SILU: for (uint32_t j = 0; j < n; j++) gx[j] = gy[j] * mct_dact1(MCT_ACT_SILU, a, x[j], y[j]); break;
    case MCT_ACT_SOFTPLUS: for (uint32_t j = 0; j < n; j++) gx[j] = gy[j] * mct_dact1(MCT_ACT_SOFTPLUS, a, x[j], y[j]); break;
    case MCT_ACT_SINE: for (uint32_t j = 0; j < n; j++) gx[j] = gy[j] * mct_dact1(MCT_ACT_SINE, a, x[j], y[j]); break;
    default: for (uint32_t j = 0; j < n; j++) gx[j] = gy[j] * mct_dact1(MCT_ACT_COSINE, a, x[j], y[j]); break;
    }
}
