/* train.c - training updates built from forward, loss, backward and apply.
 * The buffered path (gradient sums in a grads buffer, then mct_update) serves the host trainer
 * and its threads; the fused path applies each gradient as soon as it is known, so a device
 * needs no grads buffer. Both reach the same mct_opt_elem and give the same bits. */
#include "mct_layers.h"

/* Loss of nb samples (outputs y, targets t) summed in sample order; dL/dy of each sample into g. */
static float batch_loss(const mct_net *net, uint8_t kind, float param, const float *y, const float *t,
                        uint32_t nb, float *g) {
    float sum = 0.0f;
    for (uint32_t s = 0; s < nb; s++) {
        size_t o = (size_t)s * net->n_out;
        sum = sum + mct_loss(kind, param, y + o, t + o, net->n_out, g + o);
    }
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
    float *y = mct_forward(net, params, x, arena, nb);
    /* dL/dy lives in the last n_out * nb floats of scratch, past what the backward pass uses */
    float *gout = scratch + scratch_n - (size_t)net->n_out * nb;
    float sum = batch_loss(net, loss_kind, loss_param, y, t, nb, gout);
    mct_sink sink = {grads, 0, 0, 0, 0, 1.0f};
    mct_backward(net, (float *)params, arena, nb, gout, NULL, &sink, scratch, scratch_n - net->n_out * nb, host);
    return sum;
}

int mct_update(const mct_net *net, float *params, const mct_opt *o, float *state, mct_train_state *ts,
               const float *grads, uint32_t nb, float mean) {
    if (!mct_all_finite(&mean, 1)) return MCT_E_NONFINITE;
    if (!mct_all_finite(grads, net->n_params)) return MCT_E_NONFINITE_GRAD;
    mct_step s = mct_step_begin(o, ts, mean);
    s.sim = mct_opt_similarity(o, state, grads, net->n_params);
    mct_apply(net, o, &s, params, grads, state, (float)nb);
    mct_step_end(o, ts);
    return MCT_OK;
}

int mct_train_step(const mct_net *net, float *params, const mct_opt *o, float *state, mct_train_state *ts,
                   uint8_t loss_kind, float loss_param, const float *x, const float *t, uint32_t nb,
                   float *arena, float *scratch, uint32_t scratch_n, float *grads, float *loss) {
    if (nb == 0 || scratch_n < mct_scratch_size(net, nb, 0, 0) + (uint32_t)net->n_out * nb) return MCT_E_ARG;
    /* inputs and targets first: a saturating layer can hide an inf or NaN from the loss but not from
     * the gradients, and the fused path applies gradients as soon as they exist */
    *loss = 0.0f;
    if (!mct_all_finite(x, net->n_in * nb) || !mct_all_finite(t, net->n_out * nb)) return MCT_E_NONFINITE_INPUT;
    if (grads) {   /* buffered: grads are only written, params change in mct_update after its checks */
        float sum = mct_batch_grads(net, params, loss_kind, loss_param, x, t, nb, arena, scratch, scratch_n, 0,
                                    grads);
        *loss = mct_div(sum, (float)nb);
        return mct_update(net, params, o, state, ts, grads, nb, *loss);
    }
    if (o->sim_penalty > 0.0f && (o->kind == MCT_OPT_MOMENTUM || o->kind == MCT_OPT_RMSPROP_MOMENTUM))
        return MCT_E_UNSUPPORTED;
    float *y = mct_forward(net, params, x, arena, nb);
    float *gout = scratch + scratch_n - (size_t)net->n_out * nb;
    float mean = mct_div(batch_loss(net, loss_kind, loss_param, y, t, nb, gout), (float)nb);
    *loss = mean;
    if (!mct_all_finite(&mean, 1)) return MCT_E_NONFINITE;
    mct_step s = mct_step_begin(o, ts, mean);
    mct_sink sink = {0, o, &s, state, net->n_params, (float)nb};
    mct_backward(net, params, arena, nb, gout, NULL, &sink, scratch, scratch_n - net->n_out * nb, 0);
    mct_step_end(o, ts);
    return MCT_OK;
}
