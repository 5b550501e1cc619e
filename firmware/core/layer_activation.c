/* layer_activation.c - elementwise activations without parameters: ReLU, LeakyReLU(alpha),
 * Sigmoid, Tanh, SiLU, Softplus, Sine, Cosine, ReLU6 (kind = enum mct_act). Each kind has its own loop
 * over the batch calling its own inline function, so a host compiler inlines and vectorises it. */
#include "mct_layers.h"

/* y[j] = F for j < n (F may use x[j] and alpha), if activation K is compiled in. */
#define MAP(K, F) if (MCT_WITH_ACT(K)) for (uint32_t j = 0; j < n; j++) y[j] = (F)
/* gx[j] = gy[j] * D for j < n (D may use x[j], y[j] and alpha), if activation K is compiled in. */
#define GRAD(K, D) if (MCT_WITH_ACT(K)) for (uint32_t j = 0; j < n; j++) gx[j] = gy[j] * (D)

void mct_act_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    (void)p; (void)aux;
    uint32_t n = (uint32_t)L->n_out * nb;
    float alpha = L->alpha;
    switch (L->kind) {
    case MCT_ACT_RELU: MAP(MCT_ACT_RELU, mct_relu(x[j])); break;
    case MCT_ACT_LEAKY_RELU: MAP(MCT_ACT_LEAKY_RELU, mct_leaky(x[j], alpha)); break;
    case MCT_ACT_SIGMOID: MAP(MCT_ACT_SIGMOID, mct_sigmoidf(x[j])); break;
    case MCT_ACT_TANH: MAP(MCT_ACT_TANH, mct_tanhf(x[j])); break;
    case MCT_ACT_SILU: MAP(MCT_ACT_SILU, mct_silu(x[j])); break;
    case MCT_ACT_SOFTPLUS: MAP(MCT_ACT_SOFTPLUS, mct_softplus(x[j])); break;
    case MCT_ACT_SINE: MAP(MCT_ACT_SINE, mct_sinf(x[j])); break;
    case MCT_ACT_RELU6: MAP(MCT_ACT_RELU6, mct_relu6(x[j])); break;
    default: MAP(MCT_ACT_COSINE, mct_cosf(x[j])); break;
    }
}

void mct_act_backward(const mct_layer *L, float *p, const mct_bwd *b) {
    (void)p;
    if (!b->gx) return;
    uint32_t n = (uint32_t)L->n_out * b->nb;
    const float *x = b->x, *y = b->y, *gy = b->gy;
    float *gx = b->gx, alpha = L->alpha;
    switch (L->kind) {
    case MCT_ACT_RELU: GRAD(MCT_ACT_RELU, mct_drelu(x[j])); break;
    case MCT_ACT_LEAKY_RELU: GRAD(MCT_ACT_LEAKY_RELU, mct_dleaky(x[j], alpha)); break;
    case MCT_ACT_SIGMOID: GRAD(MCT_ACT_SIGMOID, mct_dsigmoid(y[j])); break;
    case MCT_ACT_TANH: GRAD(MCT_ACT_TANH, mct_dtanh(y[j])); break;
    case MCT_ACT_SILU: GRAD(MCT_ACT_SILU, mct_dsilu(x[j])); break;
    case MCT_ACT_SOFTPLUS: GRAD(MCT_ACT_SOFTPLUS, mct_sigmoidf(x[j])); break;
    case MCT_ACT_SINE: GRAD(MCT_ACT_SINE, mct_cosf(x[j])); break;
    case MCT_ACT_RELU6: GRAD(MCT_ACT_RELU6, mct_drelu6(x[j])); break;
    default: GRAD(MCT_ACT_COSINE, -mct_sinf(x[j])); break;
    }
}

int mct_act_check(const mct_layer *L) {
    return L->n_in == L->n_out && mct_bit(MCT_ACTS_LAYER & (uint32_t)(MCT_ACTS_MASK) & 0xFFFFu, L->kind);
}

void mct_act_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) { (void)L; (void)nb; (void)host; (void)s; }
