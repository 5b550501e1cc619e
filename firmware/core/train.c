/* train.c - training updates built from forward, loss, backward and apply.
 * The buffered path (gradient sums in a grads buffer: mct_batch_grads, then mct_update) serves the host trainer
 * and its threads; the fused path (mct_train_step) applies each gradient as soon as it is known, so a device
 * needs no grads buffer. Both reach the same mct_opt_elem and give the same bits. */
#include "mct_layers.h"

/* mct_loss_fused, inlined where training asks it: a constant in firmware built with MCT_LAST_OP and MCT_LOSS_ONLY,
 * so the loss code it does not take is left out. */
static MCT_INLINE int loss_fused(const mct_net *net, uint8_t kind) {
    if (!MCT_WITH_OP(MCT_OP_SOFTMAX) || MCT_LOSS_KIND(kind) != MCT_LOSS_XENT) return 0;
#ifdef MCT_LAST_OP
    (void)net;
    return (MCT_LAST_OP) == MCT_OP_SOFTMAX;
#else
    mct_layer Lc;
    return mct_get_layer(net, (uint16_t)(net->n_layers - 1), &Lc)->op == MCT_OP_SOFTMAX;
#endif
}

int mct_loss_fused(const mct_net *net, uint8_t kind) { return loss_fused(net, kind); }

float mct_net_loss(const mct_net *net, const float *arena, uint32_t nb, uint8_t kind, float param, const float *t,
                   float *g) {
    const float *y = arena + (size_t)net->out_off * nb;
    float sum = 0.0f;   /* summed in sample order */
    if (loss_fused(net, kind)) {
        mct_layer Lc;
        const mct_layer *L = mct_get_layer(net, (uint16_t)(net->n_layers - 1), &Lc);
        const float *x = arena + (size_t)L->in_off * nb;
        for (uint32_t s = 0; s < nb; s++) {
            size_t o = (size_t)s * net->n_out;
            sum = sum + mct_softmax_xent(L, x + o, y + o, t + o, g + o);
        }
        return sum;
    }
    return mct_loss_batch(kind, param, y, t, net->n_out, nb, g, NULL);
}

/* Where training keeps mct_net_loss's gradient: the last n_out * nb floats of scratch, past what the backward pass
 * uses. */
static float *loss_grad(const mct_net *net, float *scratch, uint32_t scratch_n, uint32_t nb) {
    return scratch + scratch_n - (size_t)net->n_out * nb;
}

/* The backward pass from mct_net_loss's gradient (at loss_grad): from the top when it is dL/dy, from below the
 * final Softmax when the loss was fused with it. */
static void backward_after_loss(const mct_net *net, uint8_t kind, float *params, float *arena, uint32_t nb,
                                float *gin, const mct_sink *sink, float *scratch, uint32_t scratch_n, int host) {
    uint16_t top = (uint16_t)(loss_fused(net, kind) ? net->n_layers - 1 : net->n_layers);
    mct_backward_from(net, top, params, arena, nb, loss_grad(net, scratch, scratch_n, nb), gin, sink, scratch,
                      scratch_n - net->n_out * nb, host);
}

float mct_loss_backward(const mct_net *net, float *params, float *arena, uint32_t nb, uint8_t kind, float param,
                        const float *t, float *gin, const mct_sink *sink, float *scratch, uint32_t scratch_n,
                        int host) {
    float sum = mct_net_loss(net, arena, nb, kind, param, t, loss_grad(net, scratch, scratch_n, nb));
    backward_after_loss(net, kind, params, arena, nb, gin, sink, scratch, scratch_n, host);
    return sum;
}

int mct_all_finite(const float *v, uint32_t n) {
    uint32_t bad = 0;   /* no early exit: an integer OR over the exponent test vectorises */
    for (uint32_t j = 0; j < n; j++) bad |= (mct_f2u(v[j]) & 0x7f800000u) == 0x7f800000u;
    return !bad;
}

float mct_batch_grads(const mct_net *net, const float *params, uint8_t loss_kind, float loss_param,
                      const float *x, const float *t, uint32_t nb, float *arena, float *scratch,
                      uint32_t scratch_n, int host, float *grads) {
    /* frozen layers get no gradients: zero their slots so the buffer has no stale values */
    for (uint16_t l = 0; l < net->n_layers; l++) {
        mct_layer Lc;
        const mct_layer *L = mct_get_layer(net, l, &Lc);
        if (!L->trainable && L->storage == MCT_STORE_RAM)
            for (uint32_t j = 0; j < L->n_p; j++) grads[L->p_off + j] = 0.0f;
    }
    mct_forward(net, params, x, arena, nb);
    mct_sink sink = {grads, 0, 0, 0, 0, 1.0f};
    return mct_loss_backward(net, (float *)params, arena, nb, loss_kind, loss_param, t, NULL, &sink, scratch,
                             scratch_n, host);
}

int mct_update_begin(const mct_net *net, const mct_opt *o, const float *state, const mct_train_state *ts,
                     const float *grads, float mean, mct_step *s) {
    if (!mct_all_finite(&mean, 1)) return MCT_E_NONFINITE;
    if (!mct_all_finite(grads, net->n_params)) return MCT_E_NONFINITE_GRAD;
    *s = mct_step_begin(o, ts, mean);
    s->sim = mct_opt_similarity(o, state, grads, net->n_params);
    return MCT_OK;
}

int mct_update(const mct_net *net, float *params, const mct_opt *o, float *state, mct_train_state *ts,
               const float *grads, uint32_t nb, float mean) {
    mct_step s;
    int status = mct_update_begin(net, o, state, ts, grads, mean, &s);
    if (status != MCT_OK) return status;
    mct_apply(net, o, &s, params, grads, state, (float)nb);
    mct_step_end(o, ts);
    return MCT_OK;
}

int mct_train_step(const mct_net *net, float *params, const mct_opt *o, float *state, mct_train_state *ts,
                   uint8_t loss_kind, float loss_param, const float *x, const float *t, uint32_t nb,
                   float *arena, float *scratch, uint32_t scratch_n, float *loss) {
    if (nb == 0 || scratch_n < mct_scratch_size(net, nb, 0, 0) + (uint32_t)net->n_out * nb) return MCT_E_ARG;
    /* inputs and targets first: a saturating layer can hide an inf or NaN from the loss but not from
     * the gradients, which are applied as soon as they exist */
    *loss = 0.0f;
    if (!mct_all_finite(x, net->n_in * nb) || !mct_all_finite(t, net->n_out * nb)) return MCT_E_NONFINITE_INPUT;
    if ((o->sim_penalty > 0.0f && mct_opt_velocity_slot(o) >= 0) || (!MCT_REGULARIZE && mct_opt_asks_reg(o)))
        return MCT_E_UNSUPPORTED;
    mct_forward(net, params, x, arena, nb);
    float mean = mct_div(mct_net_loss(net, arena, nb, loss_kind, loss_param, t, loss_grad(net, scratch, scratch_n, nb)),
                         (float)nb);
    *loss = mean;
    if (!mct_all_finite(&mean, 1)) return MCT_E_NONFINITE;
    mct_step s = mct_step_begin(o, ts, mean);
    mct_sink sink = {0, o, &s, state, net->n_params, (float)nb};
    backward_after_loss(net, loss_kind, params, arena, nb, NULL, &sink, scratch, scratch_n, 0);
    mct_step_end(o, ts);
    return MCT_OK;
}
