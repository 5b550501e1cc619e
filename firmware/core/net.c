/* net.c - the interpreter over a layer table: checks, forward, backward and apply. */
#include "mct_layers.h"

/* ---- dispatch over MCT_OP_LIST: one switch case per op, its kernels called in the shape of its call kind;
 * an op left out of the build (MCT_OPS_MASK) compiles to nothing ---- */
#define FWD_PARAM(S) mct_##S##_forward(L, p, xi, y, aux, nb)
#define FWD_CONST(S)                                                                                \
    if (L->storage == MCT_STORE_RAM) mct_##S##_forward(L, p, xi, y, aux, nb);                       \
    else if (MCT_WITH_OP(0)) mct_##S##_const_forward(L, net->cdata + L->p_off, xi, y, nb)
#define FWD_QOP(S) mct_##S##_forward(L, net->cdata + L->p_off, xi, y, nb)
#define FWD_NET(S) mct_##S##_forward(net, L, xi, y, arena, nb)
#define BWD_PARAM(S) mct_##S##_backward(L, p, &b)
#define BWD_CONST(S)                                                                                \
    if (L->storage == MCT_STORE_RAM) mct_##S##_backward(L, p, &b);                                  \
    else if (MCT_WITH_OP(0)) mct_##S##_const_backward(L, net->cdata + L->p_off, &b)
#define BWD_QOP(S) mct_qop_backward(L, &b)
#define BWD_NET(S) mct_##S##_backward(net, L, arena, &b)
#define CASE_FWD(NAME, VALUE, STEM, CALL, IN_I8, OUT_I8) \
    case MCT_OP_##NAME: if (MCT_WITH_OP(MCT_OP_##NAME)) { FWD_##CALL(STEM); } break;
#define CASE_BWD(NAME, VALUE, STEM, CALL, IN_I8, OUT_I8) \
    case MCT_OP_##NAME: if (MCT_WITH_OP(MCT_OP_##NAME)) { BWD_##CALL(STEM); } break;
#define CASE_SIZE(NAME, VALUE, STEM, CALL, IN_I8, OUT_I8)                                            \
    case MCT_OP_##NAME:                                                                             \
        if (!MCT_WITH_OP(MCT_OP_##NAME)) return 0;                                                  \
        mct_##STEM##_size(L, nb, host, s);                                                          \
        return mct_##STEM##_check(L);

int mct_layer_size_of(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s) {
    s->params = s->aux = s->scratch = 0;
    s->consts = 0;
    s->out = mct_layer_writes_i8(L) ? mct_i8_floats(L->n_out) : L->n_out;
    if (L->n_in == 0 || L->n_out == 0) return 0;
    switch (L->op) {
    MCT_OP_LIST(CASE_SIZE)
    default: return 0;   /* unknown */
    }
}

/* The fields of a layer that link a residual block (a few bytes on the stack rather than a whole mct_layer copy,
 * which AVR needs for a table in flash). */
typedef struct res_link {
    uint8_t op, kind;
    uint16_t k, n_in, n_out;
    uint32_t in_off, out_off;
} res_link;

static res_link res_link_of(const mct_net *net, uint16_t l) {
    mct_layer c;
    const mct_layer *L = mct_get_layer(net, l, &c);
    res_link r;
    r.op = L->op;
    r.kind = L->kind;
    r.k = L->k;
    r.n_in = L->n_in;
    r.n_out = L->n_out;
    r.in_off = L->in_off;
    r.out_off = L->out_off;
    return r;
}

/* Are the partners of residual layer l consistent? Every op of a block checks the whole block: RES_BEGIN b
 * (k = e, its output its input), RES_END or QRES_END e (k = b, or k = s in a block with a projection) and
 * RES_SHORTCUT s (k = b, b < s < e, its output b's output, its input as wide as e's output); b and s have kind 1
 * when e is a QRES_END (an int8 block), else 0. */
static int residual_ok(const mct_net *net, uint16_t l) {
    res_link L = res_link_of(net, l), B, S, E;
    uint16_t b, e;
    if (L.k >= net->n_layers) return 0;
    if (L.op == MCT_OP_RES_BEGIN) {
        b = l;
        e = L.k;
    } else if (L.op == MCT_OP_RES_SHORTCUT) {
        b = L.k;
        e = res_link_of(net, b).k;
    } else {
        S = res_link_of(net, L.k);
        e = l;
        b = S.op == MCT_OP_RES_SHORTCUT ? S.k : L.k;
    }
    if (b >= net->n_layers || e >= net->n_layers || b >= e) return 0;
    B = res_link_of(net, b);
    E = res_link_of(net, e);
    if (B.op != MCT_OP_RES_BEGIN || (E.op != MCT_OP_RES_END && E.op != MCT_OP_QRES_END) || B.k != e ||
        B.out_off != B.in_off || B.kind != (E.op == MCT_OP_QRES_END))
        return 0;
    if (E.k == b) return L.op != MCT_OP_RES_SHORTCUT && B.n_out == E.n_out;   /* identity shortcut */
    if (E.k >= net->n_layers || (L.op == MCT_OP_RES_SHORTCUT && E.k != l)) return 0;
    S = res_link_of(net, E.k);
    return S.op == MCT_OP_RES_SHORTCUT && b < E.k && E.k < e && S.k == b && S.out_off == B.out_off &&
           S.n_out == B.n_out && S.n_in == E.n_out && S.kind == B.kind;
}

int mct_net_check(const mct_net *net) {
    if (!net || !net->layers || net->n_layers == 0) return MCT_E_NET;
    uint32_t prev_out = net->in_off, prev_n = net->n_in;
    int prev_i8 = 0, seen_trainable = 0;   /* is the current activation int8; was a layer trainable */
    for (uint16_t l = 0; l < net->n_layers; l++) {
        mct_layer Lc;
        const mct_layer *L = mct_get_layer(net, l, &Lc);
        mct_layer_size sz;
        if (!mct_layer_size_of(L, 1, 0, &sz) || L->n_in != prev_n || L->in_off != prev_out) return MCT_E_NET;
        if (sz.params != L->n_p || L->n_w > L->n_p) return MCT_E_NET;
        /* int8 tensors only between Q ops (and the RES_BEGIN / RES_SHORTCUT of int8 blocks) */
        if (mct_layer_reads_i8(L) != prev_i8) return MCT_E_NET;
        uint32_t w_in = prev_i8 ? mct_i8_floats(L->n_in) : L->n_in;
        if (mct_is_qop(L->op)) {
            /* full-integer ops: frozen, constants in the blob, before every trainable layer */
            if (L->storage != MCT_STORE_Q || L->trainable || seen_trainable) return MCT_E_NET;
        } else if (L->storage != MCT_STORE_RAM) {
            /* only frozen layers of ops with const storage (Dense/Linear, convolutions) live in the const blob */
            if (!MCT_WITH_OP(0) || !mct_bit(MCT_OPS_CONST_STORAGE, L->op) || L->storage > MCT_STORE_I8 ||
                (L->storage == MCT_STORE_I8 && !MCT_WITH_OP(MCT_I8_WEIGHTS_BIT)) ||
                L->trainable)
                return MCT_E_NET;
        } else if ((uint64_t)L->p_off + L->n_p > net->n_params) {
            return MCT_E_NET;
        }
        if (L->storage != MCT_STORE_RAM &&
            (!net->cdata || (L->p_off & 3u) || (uint64_t)L->p_off + sz.consts > net->cdata_size))
            return MCT_E_NET;
        if ((uint64_t)L->in_off + w_in > net->arena || (uint64_t)L->out_off + sz.out > net->arena) return MCT_E_NET;
        if ((uint64_t)L->aux_off + sz.aux > net->arena) return MCT_E_NET;
        if (L->n_in > net->max_width || L->n_out > net->max_width) return MCT_E_NET;
        if (L->lr_div <= 0.0f) return MCT_E_NET;
        if (L->op == MCT_OP_RES_BEGIN || L->op == MCT_OP_RES_END || L->op == MCT_OP_RES_SHORTCUT ||
            L->op == MCT_OP_QRES_END) {
            if (!MCT_WITH_OP(MCT_OP_RES_BEGIN) || !residual_ok(net, l)) return MCT_E_NET;   /* none in this build */
        } else if (L->out_off == L->in_off) {
            return MCT_E_NET; /* only RES_BEGIN may alias its input */
        }
        if (L->trainable) seen_trainable = 1;
        prev_out = L->out_off;
        prev_n = L->n_out;
        prev_i8 = mct_layer_writes_i8(L);
    }
    if (prev_i8 || prev_n != net->n_out || prev_out != net->out_off) return MCT_E_NET;
#ifdef MCT_LAST_OP
    mct_layer Lc;
    if (mct_get_layer(net, (uint16_t)(net->n_layers - 1), &Lc)->op != (MCT_LAST_OP)) return MCT_E_NET;
#endif
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
        mct_layer_size sz;
        mct_layer_size_of(mct_get_layer(net, l, &Lc), nb, host, &sz);
        most = sz.scratch > most ? sz.scratch : most;
    }
    return 2u * w * nb + most;
}

/* Layers [first, end) forward on nb samples of what the arena holds (inline: no stack frame of its own). */
static MCT_INLINE void run_layers(const mct_net *net, const float *params, float *arena, uint32_t nb, uint16_t first,
                       uint16_t end) {
    for (uint16_t l = first; l < end; l++) {
        mct_layer Lc;
        const mct_layer *L = mct_get_layer(net, l, &Lc);
        const float *p = L->storage == MCT_STORE_RAM ? params + L->p_off : params;
        const float *xi = arena + (size_t)L->in_off * nb;
        float *y = arena + (size_t)L->out_off * nb, *aux = arena + (size_t)L->aux_off * nb;
        switch (L->op) {
        MCT_OP_LIST(CASE_FWD)
        default: break;
        }
    }
}

float *mct_forward(const mct_net *net, const float *params, const float *x, float *arena, uint32_t nb) {
    float *in = arena + (size_t)net->in_off * nb;
    if (x && x != in)
        for (size_t j = 0; j < (size_t)net->n_in * nb; j++) in[j] = x[j];
    run_layers(net, params, arena, nb, 0, net->n_layers);
    return arena + (size_t)net->out_off * nb;
}

float *mct_forward_layers(const mct_net *net, const float *params, float *arena, uint32_t arena_n, uint16_t first,
                          uint16_t end) {
    if (first >= end || end > net->n_layers) return 0;
    uint32_t out = 0;
    for (uint16_t l = first; l < end; l++) {
        mct_layer Lc;
        mct_layer_size sz;
        const mct_layer *L = mct_get_layer(net, l, &Lc);
        uint32_t w_in = mct_layer_reads_i8(L) ? mct_i8_floats(L->n_in) : L->n_in;
        if (!mct_layer_size_of(L, 1, 0, &sz) || (uint64_t)L->in_off + w_in > arena_n ||
            (uint64_t)L->out_off + sz.out > arena_n || (sz.aux && (uint64_t)L->aux_off + sz.aux > arena_n))
            return 0;
        out = L->out_off;
    }
    run_layers(net, params, arena, 1, first, end);
    return arena + out;
}

void mct_backward(const mct_net *net, float *params, float *arena, uint32_t nb, const float *gout, float *gin,
                  const mct_sink *sink, float *scratch, uint32_t scratch_n, int host) {
    mct_backward_from(net, net->n_layers, params, arena, nb, gout, gin, sink, scratch, scratch_n, host);
}

void mct_backward_from(const mct_net *net, uint16_t top, float *params, float *arena, uint32_t nb, const float *gout,
                       float *gin, const mct_sink *sink, float *scratch, uint32_t scratch_n, int host) {
    uint16_t stop = backward_stop(net, gin != NULL);
    size_t w = (size_t)(gin ? net->max_width : grad_width(net, stop)) * nb;
    float *bufs[2] = {scratch, scratch + w}, *tmp = scratch + 2 * w;
    const float *gy = gout;
    int cur = 0;
    (void)scratch_n;
    if (gin && top == 0)   /* no layer below the gradient: it is dL/dx itself */
        for (size_t j = 0; j < (size_t)net->n_in * nb; j++) gin[j] = gout[j];
    for (int l = (int)top - 1; l >= (int)stop; l--) {
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
        switch (L->op) {
        MCT_OP_LIST(CASE_BWD)
        default: break;
        }
        gy = b.gx;
        cur ^= 1;
    }
}

void mct_apply_part(const mct_net *net, const mct_opt *o, const mct_step *s, float *params, const float *grads,
                    float *state, float div, uint32_t j0, uint32_t j1) {
    for (uint16_t l = 0; l < net->n_layers; l++) {
        mct_layer Lc;
        const mct_layer *L = mct_get_layer(net, l, &Lc);
        if (!L->trainable || !L->n_p || L->storage != MCT_STORE_RAM) continue;
        /* the layer's parameters [p_off, p_off + n_p) within [j0, j1): from a to b, the first n_w are weights */
        uint32_t a = L->p_off > j0 ? L->p_off : j0, end = L->p_off + L->n_p, b = end < j1 ? end : j1;
        if (a >= b) continue;
        uint32_t k = a - L->p_off, n_w = L->n_w > k ? L->n_w - k : 0;
        mct_opt_apply_range(o, s, mct_layer_lr(s, L), params + a, grads + a, state ? state + a : NULL, net->n_params,
                            b - a, n_w < b - a ? n_w : b - a, div);
    }
}

void mct_apply(const mct_net *net, const mct_opt *o, const mct_step *s, float *params, const float *grads,
               float *state, float div) {
    mct_apply_part(net, o, s, params, grads, state, div, 0, net->n_params);
}
