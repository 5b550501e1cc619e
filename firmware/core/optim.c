/* optim.c - optimizers: learning-rate schedules, per-step values, the similarity penalty, and the
 * update of a parameter range. The per-parameter update itself is mct_opt_elem_k (mct_layers.h),
 * shared by the buffered path (mct_opt_apply_range) and the fused device path (mct_sink_put). */
#include "mct_layers.h"

#define SLOTS_CASE(NAME, VALUE, SLOTS) case MCT_OPT_##NAME: return SLOTS;
uint8_t mct_opt_slots(uint8_t kind) {
    switch (kind) {
    MCT_OPT_LIST(SLOTS_CASE)
    default: return 0;
    }
}

mct_train_state mct_train_state_init(void) {
    mct_train_state ts;
    ts.step = 0;
    ts.b1t = 1.0f;
    ts.b2t = 1.0f;
    return ts;
}

float mct_lr_at(const mct_opt *o, uint32_t step) {
    float lr = o->lr;
    uint8_t schedule = MCT_SCHED_KIND(o->schedule);
    if (o->decay_steps && schedule == MCT_LR_LINEAR) {
        uint32_t t = step < o->decay_steps ? step : o->decay_steps;
        lr = o->lr + (o->lr_final - o->lr) * mct_div((float)t, (float)o->decay_steps);
    } else if (o->decay_steps && schedule == MCT_LR_COSINE) {
        if (step >= o->decay_steps) {
            lr = o->lr_final;
        } else {
            float c = mct_cosf(3.14159274f * mct_div((float)step, (float)o->decay_steps));
            lr = o->lr_final + (o->lr - o->lr_final) * (0.5f * (1.0f + c));
        }
    }
    if (o->warmup_steps && step < o->warmup_steps) lr = lr * mct_div((float)(step + 1), (float)o->warmup_steps);
    return lr;
}

mct_step mct_step_begin(const mct_opt *o, const mct_train_state *ts, float loss) {
    mct_step s;
    s.lr = mct_lr_at(o, ts->step);
    if (o->scale_by_loss) s.lr = s.lr * loss;
    s.sim = 1.0f;
    s.c1 = 1.0f - ts->b1t * o->beta1;
    s.c2 = 1.0f - ts->b2t * o->beta;
    return s;
}

int mct_opt_asks_reg(const mct_opt *o) { return o->clip > 0.0f || o->l1 != 0.0f || o->l2 != 0.0f; }

int mct_opt_velocity_slot(const mct_opt *o) {
    uint8_t k = MCT_OPT_KIND(o->kind);
    return k == MCT_OPT_MOMENTUM ? 0 : (k == MCT_OPT_RMSPROP_MOMENTUM ? 1 : -1);
}

float mct_opt_similarity(const mct_opt *o, const float *state, const float *grads, uint32_t n_params) {
    if (o->sim_penalty <= 0.0f) return 1.0f;
    int slot = mct_opt_velocity_slot(o);
    if (slot < 0) return 1.0f;
    const float *v = state + (size_t)slot * n_params;
    float dot = 0.0f, vv = 0.0f, gg = 0.0f;
    for (uint32_t j = 0; j < n_params; j++) {
        dot = dot + v[j] * grads[j];
        vv = vv + v[j] * v[j];
        gg = gg + grads[j] * grads[j];
    }
    if (vv == 0.0f || gg == 0.0f) return 1.0f;
    float c = mct_div(dot, mct_sqrtf(vv) * mct_sqrtf(gg));
    /* velocity and gradient agree (c = 1): step boosted; the step reverses (c = -1): damped */
    return mct_logf(2.0f * (c + 1.0f) + o->sim_penalty) * 1.44269502f + 0.25f;
}

void mct_step_end(const mct_opt *o, mct_train_state *ts) {
    ts->step++;
    ts->b1t = ts->b1t * o->beta1;
    ts->b2t = ts->b2t * o->beta;
}

/* mct_opt_apply_range for one optimizer kind: weights [0, n_w) and the rest, with or without the
 * division by the batch size. Constant kind, class and division let the compiler drop the branches and
 * vectorise; one function per kind keeps each small enough to optimise well. */
#define APPLY_LOOP_R(KIND, REG, WEIGHT, FROM, TO, G)                                              \
    for (uint32_t j = (FROM); j < (TO); j++) mct_opt_elem_k((KIND), (REG), oc, sc, lr, &w[j], (G), st + j, stride, (WEIGHT))
#define APPLY_LOOP(KIND, WEIGHT, FROM, TO, G)                                                     \
    do {                                                                                          \
        if (reg) APPLY_LOOP_R(KIND, 1, WEIGHT, FROM, TO, G);                                      \
        else APPLY_LOOP_R(KIND, 0, WEIGHT, FROM, TO, G);                                          \
    } while (0)
#if MCT_HOST
/* g / div for div = 2^k >= 1 as g * 2^-k: the same correctly rounded quotient (and the same flush of a
 * subnormal one as mct_div), without a division per element. */
static inline float scaled_pow2(float g, float inv) {
    float q = g * inv;
    float m = q < 0.0f ? -q : q;
    return m < 1.17549435e-38f ? q * 0.0f : q;
}
/* Is div a power of two from 1 to 2^126 (so that 1 / div is exact and normal)? */
static inline int pow2_div(float div) {
    uint32_t u = mct_f2u(div);
    return (u & 0x807fffffu) == 0 && (u >> 23) >= 127u && (u >> 23) <= 253u;
}
#define APPLY_FN(NAME, KIND)                                                                      \
    static void NAME(const mct_opt *oc, const mct_step *sc, float lr, float *restrict w,         \
                     const float *restrict g, float *restrict st, uint32_t stride, uint32_t n,    \
                     uint32_t n_w, float div) {                                                   \
        const int reg = mct_opt_regularizes(oc);                                                  \
        if (div == 1.0f) {                                                                        \
            APPLY_LOOP(KIND, 1, 0, n_w, g[j]);                                                    \
            APPLY_LOOP(KIND, 0, n_w, n, g[j]);                                                    \
        } else if (pow2_div(div)) {                                                               \
            const float inv = mct_div(1.0f, div);                                                 \
            APPLY_LOOP(KIND, 1, 0, n_w, scaled_pow2(g[j], inv));                                  \
            APPLY_LOOP(KIND, 0, n_w, n, scaled_pow2(g[j], inv));                                  \
        } else {                                                                                  \
            APPLY_LOOP(KIND, 1, 0, n_w, mct_div(g[j], div));                                      \
            APPLY_LOOP(KIND, 0, n_w, n, mct_div(g[j], div));                                      \
        }                                                                                         \
    }
#else
/* devices: one loop (flash matters more than speed here; the update per element is the same) */
#define APPLY_FN(NAME, KIND)                                                                      \
    static void NAME(const mct_opt *oc, const mct_step *sc, float lr, float *w, const float *g,  \
                     float *st, uint32_t stride, uint32_t n, uint32_t n_w, float div) {           \
        const int reg = mct_opt_regularizes(oc);                                                  \
        for (uint32_t j = 0; j < n; j++)                                                          \
            mct_opt_elem_k((KIND), reg, oc, sc, lr, &w[j], div == 1.0f ? g[j] : mct_div(g[j], div), \
                           st + j, stride, j < n_w);                                              \
    }
#endif
APPLY_FN(apply_sgd, MCT_OPT_SGD)
APPLY_FN(apply_momentum, MCT_OPT_MOMENTUM)
APPLY_FN(apply_rmsprop, MCT_OPT_RMSPROP)
APPLY_FN(apply_rmsprop_momentum, MCT_OPT_RMSPROP_MOMENTUM)
APPLY_FN(apply_adam, MCT_OPT_ADAM)

void mct_opt_apply_range(const mct_opt *o, const mct_step *s, float lr, float *w, const float *g, float *st,
                         uint32_t stride, uint32_t n, uint32_t n_w, float div) {
#if MCT_HOST
    /* local copies: the parameter stores cannot alias them, so their loads leave the loops */
    const mct_opt oc_local = *o;
    const mct_step sc_local = *s;
    o = &oc_local;
    s = &sc_local;
#endif
    if (!st) st = w;     /* SGD keeps no slots; the pointer is never read */
    switch (MCT_OPT_KIND(o->kind)) {
    case MCT_OPT_MOMENTUM: apply_momentum(o, s, lr, w, g, st, stride, n, n_w, div); break;
    case MCT_OPT_RMSPROP: apply_rmsprop(o, s, lr, w, g, st, stride, n, n_w, div); break;
    case MCT_OPT_RMSPROP_MOMENTUM: apply_rmsprop_momentum(o, s, lr, w, g, st, stride, n, n_w, div); break;
    case MCT_OPT_ADAM: apply_adam(o, s, lr, w, g, st, stride, n, n_w, div); break;
    default: apply_sgd(o, s, lr, w, g, st, stride, n, n_w, div); break;
    }
}
