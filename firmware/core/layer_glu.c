/* layer_glu.c - gated linear units: y = act(x Wg + bg) * (x Wv + bv), gate act = kind (sigmoid,
 * ReLU, leaky ReLU with slope alpha, tanh, or Swish with a learned beta per output).
 * Parameters: Wg [I][O], Wv [I][O] (connection weights), bg [O], bv [O], then beta [O] for Swish.
 * Aux trace: the pre-activations zg [nb][O] and zv [nb][O]. */
#include "mct_layers.h"

/* Gate value a and its derivative da/dz at pre-activation z (beta only for the Swish gate). */
static float gate(uint8_t kind, float alpha, float beta, float z, float *da) {
    if (kind == MCT_ACT_SWISH && MCT_WITH_ACT(MCT_ACT_SWISH)) {
        float s = mct_sigmoidf(beta * z);
        *da = s * (1.0f + beta * z * (1.0f - s));
        return z * s;
    }
    float a = mct_act1(kind, alpha, z);
    *da = mct_dact1(kind, alpha, z, a);
    return a;
}

void mct_glu_forward(const mct_layer *L, const float *p, const float *x, float *y, float *aux, uint32_t nb) {
    uint32_t I = L->n_in, O = L->n_out;
    const float *Wg = p, *Wv = p + (size_t)I * O, *bg = Wv + (size_t)I * O, *bv = bg + O, *beta = bv + O;
    float *zg = aux, *zv = aux + (size_t)nb * O;
    mct_gemm(x, Wg, zg, nb, I, O);
    mct_gemm(x, Wv, zv, nb, I, O);
    for (uint32_t s = 0; s < nb; s++)
        for (uint32_t o = 0; o < O; o++) {
            size_t i = (size_t)s * O + o;
            float da;
            zg[i] = zg[i] + bg[o];
            zv[i] = zv[i] + bv[o];
            y[i] = gate(L->kind, L->alpha, L->kind == MCT_ACT_SWISH ? beta[o] : 0.0f, zg[i], &da) * zv[i];
        }
}

void mct_glu_backward(const mct_layer *L, float *p, const mct_bwd *b) {
    uint32_t I = L->n_in, O = L->n_out, nb = b->nb;
    const float *zg = b->aux, *zv = b->aux + (size_t)nb * O;
    float *gzg = b->tmp, *gzv = gzg + (size_t)nb * O, *gxv = gzv + (size_t)nb * O, *mm = gxv + (size_t)nb * I;
    int swish = L->kind == MCT_ACT_SWISH;
    const float *beta = p + 2 * (size_t)I * O + 2 * (size_t)O;
    for (uint32_t s = 0; s < nb; s++)
        for (uint32_t o = 0; o < O; o++) {
            size_t i = (size_t)s * O + o;
            float da, a = gate(L->kind, L->alpha, swish ? beta[o] : 0.0f, zg[i], &da);
            gzv[i] = b->gy[i] * a;
            gzg[i] = b->gy[i] * zv[i] * da;
        }
    /* all gradients above used the old parameters; the updates below touch disjoint ones */
    mct_matmul_backward(L, p, 0, b->x, gzg, b->gx, nb, I, O, b->sink, mm, b->host);
    mct_matmul_backward(L, p, I * O, b->x, gzv, b->gx ? gxv : NULL, nb, I, O, b->sink, mm, b->host);
    if (b->gx)
        for (size_t j = 0; j < (size_t)nb * I; j++) b->gx[j] = b->gx[j] + gxv[j];
    if (!b->sink) return;
    mct_bias_grads(L, p, 2 * I * O, gzg, nb, O, b->sink);
    mct_bias_grads(L, p, 2 * I * O + O, gzv, nb, O, b->sink);
    if (!swish) return;
    for (uint32_t o = 0; o < O; o++) {
        float g = 0.0f;
        for (uint32_t s = 0; s < nb; s++) {
            size_t i = (size_t)s * O + o;
            float z = zg[i], sg = mct_sigmoidf(beta[o] * z);
            g = g + b->gy[i] * zv[i] * (z * z * sg * (1.0f - sg));
        }
        mct_sink_put(b->sink, L, p, 2 * I * O + 2 * O + o, g);
    }
}

int mct_glu_check(const mct_layer *L) {
    return mct_bit(MCT_ACTS_GATE & (uint32_t)(MCT_ACTS_MASK) & 0xFFFFu, L->kind);
}

void mct_glu_size(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    uint32_t I = L->n_in, O = L->n_out;
    s->params = 2 * I * O + 2 * O + (L->kind == MCT_ACT_SWISH ? O : 0);
    s->aux = 2u * O;
    s->scratch = 2 * nb * O + nb * I + mct_matmul_scratch(L, nb, host);
}
