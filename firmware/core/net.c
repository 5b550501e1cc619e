/* net.c - the interpreter over a layer table: checks, forward, backward and apply. */
#include "mct_layers.h"

uint32_t mct_layer_param_count(const mct_layer *L) {
    uint32_t I = L->n_in, O = L->n_out;
    switch (L->op) {
    case MCT_OP_DENSE: return I * O + (L->kind ? O : 0);
    case MCT_OP_BIAS: case MCT_OP_SWISH: case MCT_OP_DIAG: case MCT_OP_RMSNORM: return O;
    case MCT_OP_GLU: return 2 * I * O + 2 * O + (L->kind == MCT_ACT_SWISH ? O : 0);
    case MCT_OP_SCALE: return 1;
    case MCT_OP_DYT: return 1 + 2 * O;
    case MCT_OP_CONV1D: return L->k;
    default: return 0;
    }
}

uint32_t mct_layer_aux_count(const mct_layer *L) {
    switch (L->op) {
    case MCT_OP_GLU: return 2u * L->n_out;
    case MCT_OP_RMSNORM: return 1;
    case MCT_OP_RES_END: return L->n_out;
    default: return 0;
    }
}

uint32_t mct_layer_scratch(const mct_layer *L, uint32_t nb, int host) {
    uint32_t I = L->n_in, O = L->n_out;
    /* host: W^T, or x^T, or gy^T with dW^T (see mct_matmul_backward) */
    uint32_t mm = host ? (I * O > nb * I ? I * O : nb * I) + nb * O : 0;
    if (L->op == MCT_OP_DENSE) return mm;
    if (L->op == MCT_OP_GLU) return 2 * nb * O + nb * I + mm;
    return 0;
}

/* Is the op known and are its sizes consistent? */
static int layer_shape_ok(const mct_layer *L) {
    if (L->op > 31 || !MCT_WITH_OP(L->op)) return 0;   /* unknown, or left out of this build */
    if ((L->op == MCT_OP_ACT || L->op == MCT_OP_GLU) && (L->kind > 15 || !MCT_WITH_ACT(L->kind))) return 0;
    if (L->op == MCT_OP_DENSE && L->storage != MCT_STORE_RAM && !MCT_WITH_OP(0)) return 0;
    if (L->n_in == 0 || L->n_out == 0) return 0;
    switch (L->op) {
    case MCT_OP_DENSE: return L->kind <= 1;
    case MCT_OP_GLU: return L->kind <= MCT_ACT_SWISH && L->kind != MCT_ACT_SINE && L->kind != MCT_ACT_COSINE;
    case MCT_OP_ACT: return L->n_in == L->n_out && L->kind < MCT_ACT_SWISH;
    case MCT_OP_SOFTMAX: return L->n_in == L->n_out && L->alpha > 0.0f;
    case MCT_OP_RMSNORM: return L->n_in == L->n_out && L->alpha >= 0.0f;
    case MCT_OP_BIAS: case MCT_OP_SWISH: case MCT_OP_DIAG: case MCT_OP_SCALE: case MCT_OP_DYT:
    case MCT_OP_RES_BEGIN: case MCT_OP_RES_END:
        return L->n_in == L->n_out;
    case MCT_OP_CONV1D: return L->k >= 1 && L->n_in >= L->k && L->n_out == L->n_in - L->k + 1;
    case MCT_OP_QUANT: case MCT_OP_DEQUANT: case MCT_OP_QLUT: return L->n_in == L->n_out;
    case MCT_OP_QDENSE: return L->kind == 0;
    default: return 0;
    }
}

int mct_net_check(const mct_net *net) {
    if (!net || !net->layers || net->n_layers == 0) return MCT_E_NET;
    uint32_t prev_out = net->in_off, prev_n = net->n_in;
    int prev_i8 = 0, seen_trainable = 0;   /* is the current activation int8; was a layer trainable */
    for (uint16_t l = 0; l < net->n_layers; l++) {
        mct_layer Lc;
        const mct_layer *L = mct_get_layer(net, l, &Lc);
        if (!layer_shape_ok(L) || L->n_in != prev_n || L->in_off != prev_out) return MCT_E_NET;
        if (mct_layer_param_count(L) != L->n_p || L->n_w > L->n_p) return MCT_E_NET;
        if (mct_reads_i8(L->op) != prev_i8) return MCT_E_NET;   /* int8 tensors only between Q ops */
        uint32_t w_in = prev_i8 ? mct_i8_floats(L->n_in) : L->n_in;
        uint32_t w_out = mct_writes_i8(L->op) ? mct_i8_floats(L->n_out) : L->n_out;
        if (mct_is_qop(L->op)) {
            /* full-integer ops: frozen, constants in the blob, before every trainable layer */
            if (L->storage != MCT_STORE_Q || L->trainable || seen_trainable || !net->cdata || (L->p_off & 3u) ||
                (uint64_t)L->p_off + mct_qop_const_bytes(L) > net->cdata_size)
                return MCT_E_NET;
        } else if (L->storage != MCT_STORE_RAM) {
            /* only frozen Dense/Linear layers live in the const blob */
            if (L->op != MCT_OP_DENSE || L->storage > MCT_STORE_I8 || L->trainable || !net->cdata ||
                (L->p_off & 3u) || (uint64_t)L->p_off + mct_dense_const_bytes(L) > net->cdata_size)
                return MCT_E_NET;
        } else if ((uint64_t)L->p_off + L->n_p > net->n_params) {
            return MCT_E_NET;
        }
        if ((uint64_t)L->in_off + w_in > net->arena || (uint64_t)L->out_off + w_out > net->arena) return MCT_E_NET;
        if ((uint64_t)L->aux_off + mct_layer_aux_count(L) > net->arena) return MCT_E_NET;
        if (L->n_in > net->max_width || L->n_out > net->max_width) return MCT_E_NET;
        if (L->lr_div <= 0.0f) return MCT_E_NET;
        if (L->op == MCT_OP_RES_BEGIN || L->op == MCT_OP_RES_END) {
            mct_layer Pc;
            if (L->k >= net->n_layers) return MCT_E_NET;
            const mct_layer *P = mct_get_layer(net, L->k, &Pc);
            if (P->k != l || P->n_out != L->n_out) return MCT_E_NET;
            if (L->op == MCT_OP_RES_BEGIN && (L->k <= l || P->op != MCT_OP_RES_END || L->out_off != L->in_off))
                return MCT_E_NET;
            if (L->op == MCT_OP_RES_END && (L->k >= l || P->op != MCT_OP_RES_BEGIN)) return MCT_E_NET;
        } else if (L->out_off == L->in_off) {
            return MCT_E_NET; /* only RES_BEGIN may alias its input */
        }
        if (L->trainable) seen_trainable = 1;
        prev_out = L->out_off;
        prev_n = L->n_out;
        prev_i8 = mct_writes_i8(L->op);
    }
    if (prev_i8 || prev_n != net->n_out || prev_out != net->out_off) return MCT_E_NET;
    return MCT_OK;
}

/* Index of the first layer whose backward must run: 0 when dL/dx is wanted, else the first
 * trainable layer that has parameters (n_layers when none has). */
static uint16_t backward_stop(const mct_net *net, int want_gin) {
    if (want_gin) return 0;
    for (uint16_t l = 0; l < net->n_layers; l++) {
        mct_layer Lc;
        const mct_layer *L = mct_get_layer(net, l, &Lc);
        if (L->trainable && L->n_p) return l;
    }
    return net->n_layers;
}

/* Widest gradient vector (per sample) of a backward pass that stops at layer stop. */
static uint32_t grad_width(const mct_net *net, uint16_t stop) {
    uint32_t w = 1;
    for (uint16_t l = stop; l < net->n_layers; l++) {
        mct_layer Lc;
        const mct_layer *L = mct_get_layer(net, l, &Lc);
        if (L->n_out > w) w = L->n_out;
        if (l > stop && L->n_in > w) w = L->n_in;
    }
    return w;
}

uint32_t mct_scratch_size(const mct_net *net, uint32_t nb, int host, int with_gin) {
    uint16_t stop = backward_stop(net, with_gin);
    uint32_t most = 0, w = with_gin ? net->max_width : grad_width(net, stop);
    for (uint16_t l = stop; l < net->n_layers; l++) {
        mct_layer Lc;
        uint32_t s = mct_layer_scratch(mct_get_layer(net, l, &Lc), nb, host);
        most = s > most ? s : most;
    }
    return 2u * w * nb + most;
}

float *mct_forward(const mct_net *net, const float *params, const float *x, float *arena, uint32_t nb) {
    float *in = arena + (size_t)net->in_off * nb;
    if (x && x != in)
        for (size_t j = 0; j < (size_t)net->n_in * nb; j++) in[j] = x[j];
    for (uint16_t l = 0; l < net->n_layers; l++) {
        mct_layer Lc;
        const mct_layer *L = mct_get_layer(net, l, &Lc);
        const float *p = L->storage == MCT_STORE_RAM ? params + L->p_off : params;
        const float *xi = arena + (size_t)L->in_off * nb;
        float *y = arena + (size_t)L->out_off * nb, *aux = arena + (size_t)L->aux_off * nb;
        switch (L->op) {
        case MCT_OP_DENSE:
            if (L->storage == MCT_STORE_RAM) mct_dense_forward(L, p, xi, y, aux, nb);
            else if (MCT_WITH_OP(0)) mct_dense_const_forward(L, net->cdata + L->p_off, xi, y, nb);
            break;
        case MCT_OP_BIAS: if (MCT_WITH_OP(MCT_OP_BIAS)) mct_bias_forward(L, p, xi, y, aux, nb); break;
        case MCT_OP_ACT: if (MCT_WITH_OP(MCT_OP_ACT)) mct_act_forward(L, p, xi, y, aux, nb); break;
        case MCT_OP_SOFTMAX: if (MCT_WITH_OP(MCT_OP_SOFTMAX)) mct_softmax_forward(L, p, xi, y, aux, nb); break;
        case MCT_OP_SWISH: if (MCT_WITH_OP(MCT_OP_SWISH)) mct_swish_forward(L, p, xi, y, aux, nb); break;
        case MCT_OP_GLU: if (MCT_WITH_OP(MCT_OP_GLU)) mct_glu_forward(L, p, xi, y, aux, nb); break;
        case MCT_OP_DIAG: if (MCT_WITH_OP(MCT_OP_DIAG)) mct_diag_forward(L, p, xi, y, aux, nb); break;
        case MCT_OP_SCALE: if (MCT_WITH_OP(MCT_OP_SCALE)) mct_scale_forward(L, p, xi, y, aux, nb); break;
        case MCT_OP_RMSNORM: if (MCT_WITH_OP(MCT_OP_RMSNORM)) mct_rmsnorm_forward(L, p, xi, y, aux, nb); break;
        case MCT_OP_DYT: if (MCT_WITH_OP(MCT_OP_DYT)) mct_dyt_forward(L, p, xi, y, aux, nb); break;
        case MCT_OP_CONV1D: if (MCT_WITH_OP(MCT_OP_CONV1D)) mct_conv1d_forward(L, p, xi, y, aux, nb); break;
        case MCT_OP_QUANT: if (MCT_WITH_OP(MCT_OP_QUANT)) mct_quantize_forward(L, net->cdata + L->p_off, xi, y, nb); break;
        case MCT_OP_DEQUANT: if (MCT_WITH_OP(MCT_OP_DEQUANT)) mct_dequantize_forward(L, net->cdata + L->p_off, xi, y, nb); break;
        case MCT_OP_QDENSE: if (MCT_WITH_OP(MCT_OP_QDENSE)) mct_qdense_forward(L, net->cdata + L->p_off, xi, y, nb); break;
        case MCT_OP_QLUT: if (MCT_WITH_OP(MCT_OP_QLUT)) mct_qlut_forward(L, net->cdata + L->p_off, xi, y, nb); break;
        case MCT_OP_RES_END: {
            const float *skip = arena + (size_t)mct_layer_off(net, L->k, 0) * nb;
            for (size_t j = 0; j < (size_t)L->n_out * nb; j++) y[j] = xi[j] + skip[j];
            break;
        }
        default: break; /* RES_BEGIN: its output is its input */
        }
    }
    return arena + (size_t)net->out_off * nb;
}

void mct_backward(const mct_net *net, float *params, float *arena, uint32_t nb, const float *gout, float *gin,
                  const mct_sink *sink, float *scratch, uint32_t scratch_n, int host) {
    uint16_t stop = backward_stop(net, gin != NULL);
    size_t w = (size_t)(gin ? net->max_width : grad_width(net, stop)) * nb;
    float *bufs[2] = {scratch, scratch + w}, *tmp = scratch + 2 * w;
    const float *gy = gout;
    int cur = 0;
    (void)scratch_n;
    for (int l = (int)net->n_layers - 1; l >= (int)stop; l--) {
        mct_layer Lc;
        const mct_layer *L = mct_get_layer(net, (uint16_t)l, &Lc);
        mct_bwd b;
        b.x = arena + (size_t)L->in_off * nb;
        b.y = arena + (size_t)L->out_off * nb;
        b.aux = arena + (size_t)L->aux_off * nb;
        b.gy = gy;
        b.gx = l > (int)stop ? bufs[cur] : gin;
        b.nb = nb;
        b.sink = L->trainable ? sink : NULL;
        b.tmp = tmp;
        b.host = host;
        float *p = L->storage == MCT_STORE_RAM ? params + L->p_off : params;
        size_t n = (size_t)L->n_out * nb;
        switch (L->op) {
        case MCT_OP_DENSE:
            if (L->storage == MCT_STORE_RAM) mct_dense_backward(L, p, &b);
            else if (MCT_WITH_OP(0)) mct_dense_const_backward(L, net->cdata + L->p_off, &b);
            break;
        case MCT_OP_BIAS: if (MCT_WITH_OP(MCT_OP_BIAS)) mct_bias_backward(L, p, &b); break;
        case MCT_OP_ACT: if (MCT_WITH_OP(MCT_OP_ACT)) mct_act_backward(L, p, &b); break;
        case MCT_OP_SOFTMAX: if (MCT_WITH_OP(MCT_OP_SOFTMAX)) mct_softmax_backward(L, p, &b); break;
        case MCT_OP_SWISH: if (MCT_WITH_OP(MCT_OP_SWISH)) mct_swish_backward(L, p, &b); break;
        case MCT_OP_GLU: if (MCT_WITH_OP(MCT_OP_GLU)) mct_glu_backward(L, p, &b); break;
        case MCT_OP_DIAG: if (MCT_WITH_OP(MCT_OP_DIAG)) mct_diag_backward(L, p, &b); break;
        case MCT_OP_SCALE: if (MCT_WITH_OP(MCT_OP_SCALE)) mct_scale_backward(L, p, &b); break;
        case MCT_OP_RMSNORM: if (MCT_WITH_OP(MCT_OP_RMSNORM)) mct_rmsnorm_backward(L, p, &b); break;
        case MCT_OP_DYT: if (MCT_WITH_OP(MCT_OP_DYT)) mct_dyt_backward(L, p, &b); break;
        case MCT_OP_CONV1D: if (MCT_WITH_OP(MCT_OP_CONV1D)) mct_conv1d_backward(L, p, &b); break;
        case MCT_OP_QUANT: case MCT_OP_DEQUANT: case MCT_OP_QDENSE: case MCT_OP_QLUT:
            if (MCT_WITH_OP(MCT_OP_QUANT)) mct_qop_backward(L, &b);
            break;
        case MCT_OP_RES_END:  /* the gradient flows into the body and, kept in aux, around it */
            for (size_t j = 0; j < n; j++) b.aux[j] = gy[j];
            if (b.gx) for (size_t j = 0; j < n; j++) b.gx[j] = gy[j];
            break;
        case MCT_OP_RES_BEGIN: {
            const float *skip = arena + (size_t)mct_layer_off(net, L->k, 1) * nb;
            if (b.gx) for (size_t j = 0; j < n; j++) b.gx[j] = gy[j] + skip[j];
            break;
        }
        default: break;
        }
        gy = b.gx;
        cur ^= 1;
    }
}

void mct_apply(const mct_net *net, const mct_opt *o, const mct_step *s, float *params, const float *grads,
               float *state, float div) {
    for (uint16_t l = 0; l < net->n_layers; l++) {
        mct_layer Lc;
        const mct_layer *L = mct_get_layer(net, l, &Lc);
        if (!L->trainable || !L->n_p || L->storage != MCT_STORE_RAM) continue;
        mct_opt_apply_range(o, s, mct_layer_lr(s, L), params + L->p_off, grads + L->p_off,
                            state ? state + L->p_off : NULL, net->n_params, L->n_p, L->n_w, div);
    }
}
