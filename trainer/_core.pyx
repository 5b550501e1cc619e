# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Thin binding of the C core (firmware/core) for the host trainer.

Everything numeric happens in the C core; this module only checks buffer sizes, owns the
scratch memory and releases the GIL around the C calls (the parallel batch runs chunks of the
batch on OpenMP threads, each with its own arena, scratch and gradient buffers).
"""
# Every call of the C core in this module goes through the table of the variant that runs (trainer/isa_dispatch.h);
# first, before NumPy's headers bring complex.h, whose macro I would clash with the core's variables named I.
cdef extern from *:
    """
    #define MCT_ISA_VIA_TABLE 1
    #include "isa_dispatch.h"
    """

import numpy as np
cimport numpy as cnp
from cython.parallel cimport prange
from libc.stdint cimport int32_t, uint8_t, uint16_t, uint32_t, uint64_t, uintptr_t
from libc.string cimport memcpy
from libc.math cimport NAN

cdef extern from "mct.h" nogil:
    ctypedef struct mct_layer:
        pass
    ctypedef struct mct_net:
        const mct_layer *layers
        uint16_t n_layers, n_in, n_out, max_width
        uint32_t n_params, arena, in_off, out_off
        const uint8_t *cdata
        uint32_t cdata_size
    ctypedef struct mct_opt:
        uint8_t kind
    ctypedef struct mct_train_state:
        uint32_t step
        float b1t, b2t
    ctypedef struct mct_step:
        float lr, sim, c1, c2
    ctypedef struct mct_sink:
        float *grads
        const mct_opt *opt
        const mct_step *step
        float *state
        uint32_t n_params
        float div
    enum: MCT_OK, MCT_E_NONFINITE, MCT_E_NONFINITE_GRAD, MCT_E_NONFINITE_INPUT, MCT_E_NONFINITE_STATE
    enum: MCT_SAVE_MAGIC, MCT_SAVE_HEADER
    enum: MCT_I8_WEIGHTS_BIT
    enum: MCT_QSHIFT_TFLITE
    ctypedef struct mct_layer_size:
        uint32_t params, aux, out, scratch
        uint64_t consts
    int mct_layer_size_of(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s)
    uint32_t mct_i8_floats(uint32_t n)
    uint8_t mct_opt_slots(uint8_t kind)
    int mct_opt_asks_reg(const mct_opt *o)
    mct_train_state mct_train_state_init()
    uint32_t MCT_SAVE_SLOT_BYTES(uint32_t n_params, uint32_t slots)
    int mct_net_check(const mct_net *net)
    uint32_t mct_scratch_size(const mct_net *net, uint32_t nb, int host, int with_gin)
    float *mct_forward(const mct_net *net, const float *params, const float *x, float *arena, uint32_t nb)
    void mct_backward(const mct_net *net, float *params, float *arena, uint32_t nb, const float *gout, float *gin,
                      const mct_sink *sink, float *scratch, uint32_t scratch_n, int host)
    float mct_loss_backward(const mct_net *net, float *params, float *arena, uint32_t nb, uint8_t kind, float param,
                            const float *t, float *gin, const mct_sink *sink, float *scratch, uint32_t scratch_n,
                            int host)
    void mct_apply(const mct_net *net, const mct_opt *o, const mct_step *s, float *params, const float *grads,
                   float *state, float div)
    float mct_batch_grads(const mct_net *net, const float *params, uint8_t loss_kind, float loss_param,
                          const float *x, const float *t, uint32_t nb, float *arena, float *scratch,
                          uint32_t scratch_n, int host, float *grads)
    int mct_update(const mct_net *net, float *params, const mct_opt *o, float *state, mct_train_state *ts,
                    const float *grads, uint32_t nb, float mean_loss)
    int mct_update_begin(const mct_net *net, const mct_opt *o, const float *state, const mct_train_state *ts,
                         const float *grads, float mean_loss, mct_step *s)
    void mct_apply_part(const mct_net *net, const mct_opt *o, const mct_step *s, float *params, const float *grads,
                        float *state, float div, uint32_t j0, uint32_t j1)
    int mct_train_step(const mct_net *net, float *params, const mct_opt *o, float *state, mct_train_state *ts,
                       uint8_t loss_kind, float loss_param, const float *x, const float *t, uint32_t nb,
                       float *arena, float *scratch, uint32_t scratch_n, float *loss)
    mct_step mct_step_begin(const mct_opt *o, const mct_train_state *ts, float loss)
    float mct_opt_similarity(const mct_opt *o, const float *state, const float *grads, uint32_t n_params)
    void mct_step_end(const mct_opt *o, mct_train_state *ts)
    float mct_lr_at(const mct_opt *o, uint32_t step)
    int mct_all_finite(const float *v, uint32_t n)
    float mct_loss_batch(uint8_t kind, float param, const float *y, const float *t, uint16_t n, uint32_t nb,
                         float *grad, float *losses)
    size_t MCT_LAYER_SIZE "sizeof(mct_layer)"
    size_t MCT_OPT_SIZE "sizeof(mct_opt)"
    size_t MCT_TRAIN_STATE_SIZE "sizeof(mct_train_state)"

cdef extern from "mct_facts.h" nogil:
    ctypedef struct mct_fact_entry:
        const char *name
        const char *c_name
        int32_t value
        int32_t attr[4]
    ctypedef struct mct_fact_list:
        const char *name
        const char *attrs
        const mct_fact_entry *entries
        uint32_t count
    ctypedef struct mct_fact_field:
        const char *name
        uint32_t offset, size
        char kind
    ctypedef struct mct_fact_struct:
        const char *name
        uint32_t size
        const mct_fact_field *fields
        uint32_t count
    const mct_fact_list mct_fact_lists[]
    const mct_fact_struct mct_fact_structs[]
    uint32_t MCT_FACT_N_LISTS, MCT_FACT_N_STRUCTS

cdef extern from "mct_math.h" nogil:
    float mct_div(float, float)
    float mct_expf(float)
    float mct_logf(float)
    float mct_log1pf(float)
    float mct_tanhf(float)
    float mct_sinf(float)
    float mct_cosf(float)
    float mct_sqrtf(float)
    float mct_sqrtf_soft(float)

cdef extern from "isa_dispatch.h" nogil:
    int mct_isa_count()
    const char *mct_isa_name(int i)
    int mct_isa_runs(int i)
    int mct_isa_select(const char *name)
    const char *mct_isa_active()
    uintptr_t mct_isa_entry(const char *name)

cnp.import_array()


# ---- which copy of the C core runs (trainer/isa_dispatch.c; mcutrain.isa is the public face) ----

def isa_variants():
    """[(name, this CPU runs it)] of the kernel variants built in, the baseline first."""
    return [(mct_isa_name(i).decode(), bool(mct_isa_runs(i))) for i in range(mct_isa_count())]


def isa_select(name=None):
    """Run the named variant (None: the widest this CPU runs); False when it is unknown or cannot run here."""
    if name is None:
        return mct_isa_select(NULL) >= 0
    b = name.encode()
    return mct_isa_select(b) >= 0


def isa_active():
    """The name of the variant that runs."""
    return mct_isa_active().decode()


def isa_entry(name):
    """The address the running variant's table holds for the named C core function (0: no such function)."""
    return mct_isa_entry(name.encode())


def _isa_from_env():
    """At import: the widest variant this CPU runs, or the one MCUTRAIN_ISA names (ConfigError if it cannot)."""
    import os
    want = os.environ.get("MCUTRAIN_ISA")
    isa_select(None)
    if want and not isa_select(want):
        from mcutrain.errors import ConfigError
        runs = ", ".join(n for n, r in isa_variants() if r)
        raise ConfigError(f"MCUTRAIN_ISA={want}: no kernel variant of that name runs here; choose one of {runs}")


_isa_from_env()

LAYER_SIZE = MCT_LAYER_SIZE
OPT_SIZE = MCT_OPT_SIZE
TRAIN_STATE_SIZE = MCT_TRAIN_STATE_SIZE

cdef inline float *_fp(float[::1] v, float *empty) noexcept nogil:
    """The first float of a buffer; for an empty one (a network without parameters, an optimizer without
    slots) a stand-in the core never reads, since it reads no floats of an empty buffer."""
    return &v[0] if v.shape[0] > 0 else empty


cdef inline void _need(Py_ssize_t have, Py_ssize_t need, str what) except *:
    if have < need:
        raise ValueError("%s has %d values, the network needs %d" % (what, have, need))


# ---- the core's facts (mct_lists.h through mct_facts.h): Python's enums and dtypes come from these ----

def core_lists():
    """Every list of the core: {list name: (attribute names, [(name, C name, value, attributes...), ...])}."""
    out = {}
    cdef uint32_t i, j
    cdef const mct_fact_list *L
    for i in range(MCT_FACT_N_LISTS):
        L = &mct_fact_lists[i]
        attrs = tuple(L.attrs.decode().split())
        rows = []
        for j in range(L.count):
            e = &L.entries[j]
            rows.append((e.name.decode(), e.c_name.decode(), e.value) + tuple(e.attr[k] for k in range(len(attrs))))
        out[L.name.decode()] = (attrs, rows)
    return out


def core_structs():
    """The structs the host writes as bytes: {name: (sizeof, [(field, offset, bytes, numpy kind), ...])}."""
    out = {}
    cdef uint32_t i, j
    cdef const mct_fact_struct *S
    for i in range(MCT_FACT_N_STRUCTS):
        S = &mct_fact_structs[i]
        out[S.name.decode()] = (S.size, [(S.fields[j].name.decode(), S.fields[j].offset, S.fields[j].size,
                                          chr(S.fields[j].kind)) for j in range(S.count)])
    return out


def layer_size(const uint8_t[::1] layer, uint32_t nb=1, int host=0):
    """What the core says one layer (the bytes of one struct mct_layer) needs, from its op's own code:
    (valid, params, aux floats per sample, output floats per sample, scratch floats for nb samples, const
    blob bytes); valid is 0 when the op is unknown or its fields do not suit it."""
    if layer.shape[0] != MCT_LAYER_SIZE:
        raise ValueError("a layer has %d bytes, got %d" % (MCT_LAYER_SIZE, layer.shape[0]))
    cdef mct_layer_size sz
    cdef int ok = mct_layer_size_of(<const mct_layer *>&layer[0], nb, host, &sz)
    return ok, sz.params, sz.aux, sz.out, sz.scratch, sz.consts


def i8_floats(uint32_t n):
    """Floats of arena per sample an int8 tensor of n values takes (mct_i8_floats)."""
    return mct_i8_floats(n)


def opt_slots(uint8_t kind):
    """Per-parameter slots of an optimizer kind (mct_opt_slots)."""
    return mct_opt_slots(kind)


def opt_asks_reg(const uint8_t[::1] opt):
    """Does an optimizer config (struct mct_opt bytes) ask for clipping or L1/L2 (mct_opt_asks_reg)?"""
    _need(opt.shape[0], MCT_OPT_SIZE, "the optimizer config (bytes)")
    return bool(mct_opt_asks_reg(<const mct_opt *>&opt[0]))


def train_state_init():
    """The bytes of a fresh struct mct_train_state (mct_train_state_init)."""
    cdef mct_train_state ts = mct_train_state_init()
    return bytes((<const uint8_t *>&ts)[:MCT_TRAIN_STATE_SIZE])


def save_layout():
    """The firmware's save layout (mct.h): (magic, header bytes)."""
    return MCT_SAVE_MAGIC, MCT_SAVE_HEADER


def i8_weights_bit():
    """The MCT_OPS_MASK bit that compiles in int8-weight (MCT_STORE_I8) layers."""
    return MCT_I8_WEIGHTS_BIT


def qshift_tflite():
    """The flag of a shift word that requantizes as TensorFlow Lite Micro (MCT_QSHIFT_TFLITE)."""
    return MCT_QSHIFT_TFLITE


def save_slot_bytes(uint32_t n_params, uint32_t slots):
    """Bytes of one save slot: header, RAM parameters, optimizer slots, train state (MCT_SAVE_SLOT_BYTES)."""
    return MCT_SAVE_SLOT_BYTES(n_params, slots)


def math_eval(str name, float[::1] x):
    """Evaluate one of the core's portable math functions on every element of x (float32)."""
    cdef Py_ssize_t i, n = x.shape[0]
    out = np.empty(n, np.float32)
    cdef float[::1] y = out
    cdef int f = ["exp", "log", "log1p", "tanh", "sin", "cos", "sqrt", "sqrt_soft"].index(name)
    with nogil:
        for i in range(n):
            if f == 0: y[i] = mct_expf(x[i])
            elif f == 1: y[i] = mct_logf(x[i])
            elif f == 2: y[i] = mct_log1pf(x[i])
            elif f == 3: y[i] = mct_tanhf(x[i])
            elif f == 4: y[i] = mct_sinf(x[i])
            elif f == 5: y[i] = mct_cosf(x[i])
            elif f == 6: y[i] = mct_sqrtf(x[i])
            else: y[i] = mct_sqrtf_soft(x[i])
    return out


def loss_eval(int kind, float param, float[:, ::1] y, float[:, ::1] t):
    """(per-sample losses (n,), gradients dL/dy (n, width), mean loss) of a batch, computed by the core.
    The mean is the core's own batch loss (train.c): the float32 sum in sample order, then mct_div by n."""
    cdef Py_ssize_t nb = y.shape[0], w = y.shape[1]
    losses = np.empty(nb, np.float32)
    grads = np.empty((nb, w), np.float32)
    cdef float[::1] lv = losses
    cdef float[:, ::1] gv = grads
    cdef float total = 0.0
    cdef float mean = 0.0
    with nogil:
        if nb > 0:
            total = mct_loss_batch(<uint8_t>kind, param, &y[0, 0], &t[0, 0], <uint16_t>w, <uint32_t>nb, &gv[0, 0],
                                   &lv[0])
            mean = mct_div(total, <float>nb)
    return losses, grads, float(mean)


def lr_at(uint8_t[::1] opt, uint32_t step):
    """Learning rate the core uses at a step (schedule and warm-up)."""
    return mct_lr_at(<const mct_opt *>&opt[0], step)


cdef inline uint32_t _parts(uint32_t nb, uint32_t threads) noexcept nogil:
    """How many parts train_batch splits a batch of nb samples into for `threads` threads."""
    cdef uint32_t nt = threads if threads > 0 else 1, per
    if nt > nb:
        nt = nb
    per = (nb + nt - 1) // nt
    return (nb + per - 1) // per


# parameters x samples per part below which train_batch's parts run one after another on the calling thread
# (about 20 microseconds of work: less than what waking and joining a thread costs on a busy machine)
cdef enum:
    MIN_PARALLEL_WORK = 100000


cdef inline uint32_t _bound(uint32_t P, uint32_t c, uint32_t nt) noexcept nogil:
    """Where thread c's range of the P parameters begins (thread c + 1's: where it ends), nt threads."""
    return <uint32_t>((<uint64_t>P * c) // nt)


cdef inline void _add_parts(float *g0, size_t stride, uint32_t nt, uint32_t j0, uint32_t j1) noexcept nogil:
    """Parameters [j0, j1) of the parts' gradient sums (part c at g0 + c * stride) added into part 0's, in
    part order."""
    cdef uint32_t c, j
    cdef float *gc
    for c in range(1, nt):
        gc = g0 + c * stride
        for j in range(j0, j1):
            g0[j] = g0[j] + gc[j]


cdef inline size_t _kept_floats(const mct_net *net, const mct_opt *op) noexcept nogil:
    """Floats of the copy _kept_update keeps: the parameters and the optimizer state."""
    return <size_t>net.n_params * (1 + mct_opt_slots(op.kind))


cdef int _kept_update(const mct_net *net, float *pp, float *sp, const mct_opt *op, mct_train_state *tsp,
                      float *g0, uint32_t nb, float total, size_t stride, uint32_t nt,
                      float *kept) noexcept nogil:
    """mct_update of the summed gradients g0 (in parts of `stride` floats, on nt threads where the work is large
    enough), undone when it leaves a parameter or a value of the optimizer state that is not finite (a huge
    learning rate overflows RMSProp's and Adam's moments while the parameters still look fine): then
    MCT_E_NONFINITE_STATE and the parameters, state and train state as they were. kept: _kept_floats floats
    for the copy."""
    cdef uint32_t P = net.n_params, Pw = P if P else 1, c
    cdef size_t S = <size_t>P * mct_opt_slots(op.kind)
    cdef mct_train_state ts0 = tsp[0]
    cdef mct_step st
    cdef int status
    if P:
        memcpy(kept, pp, P * sizeof(float))
    if S:
        memcpy(kept + P, sp, S * sizeof(float))
    if nt == 1 or <uint64_t>Pw * ((nb + nt - 1) // nt) < MIN_PARALLEL_WORK:
        _add_parts(g0, stride, nt, 0, Pw)
        status = mct_update(net, pp, op, sp, tsp, g0, nb, total)
    else:
        # the same sums and the same update, each thread on its own range of parameters (every parameter's sum
        # over the parts and its update are its own, so the bits do not depend on the split)
        for c in prange(nt, num_threads=nt, schedule='static', chunksize=1):
            _add_parts(g0, stride, nt, _bound(Pw, c, nt), _bound(Pw, c + 1, nt))
        status = mct_update_begin(net, op, sp, tsp, g0, total, &st)
        if status != MCT_OK:
            return status
        for c in prange(nt, num_threads=nt, schedule='static', chunksize=1):
            mct_apply_part(net, op, &st, pp, g0, sp, <float>nb, _bound(Pw, c, nt), _bound(Pw, c + 1, nt))
        mct_step_end(op, tsp)
    if status == MCT_OK and not (mct_all_finite(pp, P) and mct_all_finite(sp, <uint32_t>S)):
        if P:
            memcpy(pp, kept, P * sizeof(float))
        if S:
            memcpy(sp, kept + P, S * sizeof(float))
        tsp[0] = ts0
        return MCT_E_NONFINITE_STATE
    return status


cdef int _step(const mct_net *net, float *pp, float *sp, const mct_opt *op, mct_train_state *tsp, uint8_t loss_kind,
               float loss_param, const float *xp, const float *tp, uint32_t nb, uint32_t threads, float *b,
               float *mean) noexcept nogil:
    """One buffered update on nb samples (train_batch and every step of fit): the finite check, the
    gradient sums (in `threads` contiguous parts, each on its own thread, the parts then added in order),
    the mean loss and the update (_kept_update). b: the work buffer (CoreNet._work_floats). Returns the core's
    status; *mean is the mean loss (NaN for a non-finite input)."""
    cdef uint32_t nt = _parts(nb, threads)
    cdef uint32_t per = (nb + nt - 1) // nt
    cdef uint32_t A = net.arena, P = net.n_params if net.n_params else 1
    cdef uint32_t S = mct_scratch_size(net, per, 1, 0) + net.n_out * per
    cdef size_t stride = <size_t>A * per + S + P
    cdef float *ls = b + nt * stride
    cdef uint32_t c, s0, n
    cdef float total = 0
    cdef float *g0
    cdef uint32_t in_w = net.n_in, out_w = net.n_out
    if not mct_all_finite(xp, nb * in_w) or not mct_all_finite(tp, nb * out_w):
        mean[0] = <float>NAN
        return MCT_E_NONFINITE_INPUT
    if nt == 1:
        ls[0] = mct_batch_grads(net, pp, loss_kind, loss_param, xp, tp, nb, b, b + <size_t>A * per, S, 1,
                                b + <size_t>A * per + S)
    elif <uint64_t>P * per < MIN_PARALLEL_WORK:
        # too little work per part to pay for waking threads: the same parts, one after another (the bits
        # depend only on how the batch is split, not on which thread sums a part)
        for c in range(nt):
            s0 = c * per
            n = nb - s0 if nb - s0 < per else per
            ls[c] = mct_batch_grads(net, pp, loss_kind, loss_param, xp + <size_t>s0 * in_w, tp + <size_t>s0 * out_w,
                                    n, b + c * stride, b + c * stride + <size_t>A * per, S, 1,
                                    b + c * stride + <size_t>A * per + S)
    else:
        for c in prange(nt, num_threads=nt, schedule='static', chunksize=1):
            s0 = c * per
            n = nb - s0 if nb - s0 < per else per
            ls[c] = mct_batch_grads(net, pp, loss_kind, loss_param, xp + <size_t>s0 * in_w, tp + <size_t>s0 * out_w,
                                    n, b + c * stride, b + c * stride + <size_t>A * per, S, 1,
                                    b + c * stride + <size_t>A * per + S)
    for c in range(nt):
        total = total + ls[c]
    total = mct_div(total, <float>nb)
    mean[0] = total
    g0 = b + <size_t>A * per + S
    return _kept_update(net, pp, sp, op, tsp, g0, nb, total, stride, nt, ls + nt)



cdef inline uint64_t _mix(uint64_t z) noexcept nogil:
    """splitmix64's finaliser."""
    z = (z ^ (z >> 30)) * <uint64_t>0xbf58476d1ce4e5b9ULL
    z = (z ^ (z >> 27)) * <uint64_t>0x94d049bb133111ebULL
    return z ^ (z >> 31)


cdef void _shuffle(uint32_t *order, uint32_t n, uint64_t seed, uint64_t epoch) noexcept nogil:
    """order = a permutation of 0 .. n-1, a pure function of (seed, epoch): Fisher-Yates driven by splitmix64
    (the state seeded from both numbers), each index drawn without bias (Lemire's multiply and reject)."""
    cdef uint64_t state = _mix(_mix(seed + <uint64_t>0x9e3779b97f4a7c15ULL) ^ epoch)
    cdef uint64_t m, r
    cdef uint32_t i, j, tmp, bound, low, threshold
    for i in range(n):
        order[i] = i
    i = n
    while i > 1:
        bound = i
        state = state + <uint64_t>0x9e3779b97f4a7c15ULL
        r = _mix(state) >> 32
        m = r * bound
        low = <uint32_t>m
        if low < bound:
            threshold = (<uint32_t>(-bound)) % bound
            while low < threshold:
                state = state + <uint64_t>0x9e3779b97f4a7c15ULL
                r = _mix(state) >> 32
                m = r * bound
                low = <uint32_t>m
        j = <uint32_t>(m >> 32)
        i -= 1
        tmp = order[i]
        order[i] = order[j]
        order[j] = tmp


def shuffle_order(uint64_t n, uint64_t seed, uint64_t epoch):
    """The sample order fit uses in epoch `epoch` for n samples and a shuffle seed: a uint32 permutation."""
    if n > 0xffffffff:
        raise ValueError("at most 2**32 - 1 samples")
    out = np.empty(n, np.uint32)
    cdef uint32_t[::1] o = out
    if n:
        with nogil:
            _shuffle(&o[0], <uint32_t>n, seed, epoch)
    return out


cdef class CoreNet:
    """A checked layer table plus the buffer sizes; runs the core's passes on NumPy buffers."""
    cdef mct_net net
    cdef object table          # keeps the layer table's memory alive
    cdef object cdata          # and the const blob's
    cdef object work           # train_batch's work buffer, kept between calls of the same size
    cdef uint32_t work_nb, work_nt
    cdef object fit_order      # fit's sample order of epoch fit_epoch for (samples, seed) fit_key
    cdef object fit_key
    cdef uint64_t fit_epoch
    cdef public uint32_t n_params, arena, n_in, n_out

    def __init__(self, uint8_t[::1] table, int n_layers, int n_in, int n_out, int max_width,
                 int n_params, int arena, int in_off, int out_off, bytes cdata=b""):
        if table.shape[0] != n_layers * MCT_LAYER_SIZE:
            raise ValueError("layer table has %d bytes, expected %d" % (table.shape[0], n_layers * MCT_LAYER_SIZE))
        self.table = np.asarray(table)
        self.net.layers = <const mct_layer *>&table[0]
        self.net.n_layers = n_layers
        self.net.n_in = n_in
        self.net.n_out = n_out
        self.net.max_width = max_width
        self.net.n_params = n_params
        self.net.arena = arena
        self.net.in_off = in_off
        self.net.out_off = out_off
        self.cdata = cdata
        self.net.cdata = <const uint8_t *>(<const char *>cdata) if len(cdata) else NULL
        self.net.cdata_size = len(cdata)
        self.n_params, self.arena, self.n_in, self.n_out = n_params, arena, n_in, n_out
        if mct_net_check(&self.net) != 0:
            raise ValueError("the C core rejected the layer table (sizes, parameter counts or offsets)")

    def scratch_size(self, uint32_t nb, int host):
        """Floats of scratch a training update needs for nb samples, dL/dy included (host: with transposes)."""
        return mct_scratch_size(&self.net, nb, host, 0) + self.net.n_out * nb

    cdef object _scratch(self, uint32_t nb):
        return np.empty(mct_scratch_size(&self.net, nb, 1, 1), np.float32)

    def forward(self, float[::1] params, float[:, ::1] x):
        """Outputs (nb, n_out) of a batch x (nb, n_in)."""
        cdef uint32_t nb = x.shape[0]
        _need(params.shape[0], self.net.n_params, "params")
        arena = np.empty(self.net.arena * nb, np.float32)
        cdef float[::1] a = arena
        cdef float *y
        cdef float empty = 0
        with nogil:
            y = mct_forward(&self.net, _fp(params, &empty), &x[0, 0], &a[0], nb)
        off = self.net.out_off * nb
        return arena[off:off + nb * self.net.n_out].reshape(nb, self.net.n_out).copy()

    def traced_forward(self, float[::1] params, float[:, ::1] x):
        """(outputs, arena): the arena is the trace the backward pass reads."""
        cdef uint32_t nb = x.shape[0]
        _need(params.shape[0], self.net.n_params, "params")
        arena = np.empty(self.net.arena * nb, np.float32)
        cdef float[::1] a = arena
        cdef float empty = 0
        with nogil:
            mct_forward(&self.net, _fp(params, &empty), &x[0, 0], &a[0], nb)
        off = self.net.out_off * nb
        return arena[off:off + nb * self.net.n_out].reshape(nb, self.net.n_out).copy(), arena

    def backward(self, float[::1] params, float[::1] arena, float[:, ::1] gout):
        """(dL/dx (nb, n_in), parameter gradients summed over the batch (n_params,))."""
        cdef uint32_t nb = gout.shape[0]
        if arena.shape[0] != self.net.arena * nb:
            raise ValueError("the trace belongs to a batch of another size")
        _need(params.shape[0], self.net.n_params, "params")
        cdef float empty = 0
        gin = np.empty((nb, self.net.n_in), np.float32)
        grads = np.zeros(max(self.net.n_params, 1), np.float32)
        scratch = self._scratch(nb)
        cdef float[:, ::1] gi = gin
        cdef float[::1] g = grads, sc = scratch
        cdef mct_sink sink
        sink.grads = &g[0]
        sink.div = 1.0
        with nogil:
            mct_backward(&self.net, _fp(params, &empty), &arena[0], nb, &gout[0, 0], &gi[0, 0], &sink, &sc[0],
                         sc.shape[0], 1)
        return gin, grads[:self.net.n_params]

    def loss_backward(self, float[::1] params, float[::1] arena, int kind, float param, float[:, ::1] t):
        """(summed loss, dL/dx (nb, n_in), parameter gradients summed over the batch (n_params,)) of the loss
        after a traced forward pass, as training computes them (mct_loss_backward: cross-entropy after a final
        Softmax in one fused step)."""
        cdef uint32_t nb = t.shape[0]
        if arena.shape[0] != self.net.arena * nb:
            raise ValueError("the trace belongs to a batch of another size")
        _need(params.shape[0], self.net.n_params, "params")
        if t.shape[1] != self.net.n_out:
            raise ValueError("targets have %d values per sample, the network %d" % (t.shape[1], self.net.n_out))
        cdef float empty = 0
        gin = np.empty((nb, self.net.n_in), np.float32)
        grads = np.zeros(max(self.net.n_params, 1), np.float32)
        scratch = np.empty(mct_scratch_size(&self.net, nb, 1, 1) + self.net.n_out * nb, np.float32)
        cdef float[:, ::1] gi = gin
        cdef float[::1] g = grads, sc = scratch
        cdef mct_sink sink
        cdef float total
        sink.grads = &g[0]
        sink.div = 1.0
        with nogil:
            total = mct_loss_backward(&self.net, _fp(params, &empty), &arena[0], nb, <uint8_t>kind, param, &t[0, 0],
                                      &gi[0, 0], &sink, &sc[0], sc.shape[0], 1)
        return total, gin, grads[:self.net.n_params]

    def apply(self, uint8_t[::1] opt, uint8_t[::1] ts, float[::1] params, float[::1] grads, float[::1] state,
              float div, float loss):
        """One optimizer update from gradient sums (divided by div) and the mean loss; advances the train
        state. Returns the core's status (enum mct_status: MCT_OK, or MCT_E_NONFINITE / MCT_E_NONFINITE_GRAD when
        the loss / a gradient is not finite, MCT_E_NONFINITE_STATE when the update would leave a parameter or the
        optimizer state not finite: nothing changed). Empty buffers are fine when the network has no
        parameters or the optimizer no slots."""
        cdef int rc
        cdef float empty = 0
        _need(opt.shape[0], MCT_OPT_SIZE, "the optimizer config (bytes)")
        _need(ts.shape[0], MCT_TRAIN_STATE_SIZE, "the train state (bytes)")
        _need(params.shape[0], self.net.n_params, "params")
        _need(grads.shape[0], self.net.n_params, "grads")
        _need(state.shape[0], mct_opt_slots((<const mct_opt *>&opt[0]).kind) * self.net.n_params, "the optimizer state")
        kept = np.empty(max(1, _kept_floats(&self.net, <const mct_opt *>&opt[0])), np.float32)
        cdef float[::1] k = kept
        with nogil:
            rc = _kept_update(&self.net, _fp(params, &empty), _fp(state, &empty), <const mct_opt *>&opt[0],
                              <mct_train_state *>&ts[0], _fp(grads, &empty), <uint32_t>div, loss, 0, 1, &k[0])
        return rc

    cdef object _check_train(self, cnp.ndarray opt, cnp.ndarray ts, cnp.ndarray params, cnp.ndarray state,
                             cnp.ndarray x, cnp.ndarray t):
        if (cnp.PyArray_NDIM(x) != 2 or cnp.PyArray_DIM(x, 1) != self.net.n_in or cnp.PyArray_NDIM(t) != 2
                or cnp.PyArray_DIM(t, 0) != cnp.PyArray_DIM(x, 0) or cnp.PyArray_DIM(t, 1) != self.net.n_out
                or cnp.PyArray_DIM(x, 0) == 0 or cnp.PyArray_DIM(x, 0) > 0xffffffff
                or not cnp.PyArray_IS_C_CONTIGUOUS(x) or not cnp.PyArray_IS_C_CONTIGUOUS(t)
                or cnp.PyArray_TYPE(x) != cnp.NPY_FLOAT32 or cnp.PyArray_TYPE(t) != cnp.NPY_FLOAT32):
            raise ValueError("training needs C-contiguous float32 batches x (nb, n_in) and t (nb, n_out)")
        _need(cnp.PyArray_NBYTES(opt), MCT_OPT_SIZE, "the optimizer config (bytes)")
        _need(cnp.PyArray_NBYTES(ts), MCT_TRAIN_STATE_SIZE, "the train state (bytes)")
        _need(cnp.PyArray_NBYTES(params) // 4, self.net.n_params, "params")
        _need(cnp.PyArray_NBYTES(state) // 4,
              mct_opt_slots((<const mct_opt *>cnp.PyArray_DATA(opt)).kind) * self.net.n_params, "the optimizer state")

    cdef Py_ssize_t _work_floats(self, uint32_t nb, uint32_t threads, const mct_opt *op):
        """Floats of work buffer one step on nb samples with `threads` threads and the optimizer op needs (see
        _step: the parts, their losses, the copy _kept_update keeps)."""
        cdef uint32_t nt = _parts(nb, threads), per = (nb + nt - 1) // nt
        cdef Py_ssize_t S = mct_scratch_size(&self.net, per, 1, 0) + self.net.n_out * per
        return (nt * (<Py_ssize_t>self.net.arena * per + S + (self.net.n_params if self.net.n_params else 1)) + nt
                + <Py_ssize_t>_kept_floats(&self.net, op))

    def train_batch(self, cnp.ndarray opt, cnp.ndarray ts, cnp.ndarray params, cnp.ndarray state,
                    int loss_kind, float loss_param, cnp.ndarray x, cnp.ndarray t, int threads=1):
        """One update on a batch: (status, mean loss). Parameters are untouched unless status is MCT_OK.
        The status is the core's (enum mct_status): MCT_OK, MCT_E_NONFINITE_INPUT (an input or target is not
        finite), MCT_E_NONFINITE (the loss), MCT_E_NONFINITE_GRAD (a gradient), MCT_E_NONFINITE_STATE (the update
        would have left a parameter or the optimizer state not finite).

        The arrays are the trainer's own (params, optimizer config and state) and batches checked by
        mcutrain.checks.as_batch: C-contiguous float32 x (nb, n_in) and t (nb, n_out). They are taken as
        plain pointers, which keeps a call for a small batch cheap.

        threads > 1 splits the batch into that many contiguous parts, each summed in sample order on
        its own thread; the parts are then added in order (deterministic for a given thread count).

        The work buffer is kept between calls of the same size; the caller serialises calls on one network
        (Module.lock). Even without that, a call holds its own reference to the buffer it uses, so another
        call that replaces it cannot free it underneath."""
        self._check_train(opt, ts, params, state, x, t)
        cdef uint32_t nb = <uint32_t>cnp.PyArray_DIM(x, 0), nt = threads if threads > 0 else 1
        cdef const mct_opt *op = <const mct_opt *>cnp.PyArray_DATA(opt)
        cdef Py_ssize_t need = self._work_floats(nb, nt, op)
        work = self.work
        if work is None or nb != self.work_nb or nt != self.work_nt or cnp.PyArray_DIM(work, 0) != need:
            work = self.work = np.empty(need, np.float32)
            self.work_nb, self.work_nt = nb, nt
        cdef float *b = <float *>cnp.PyArray_DATA(work)
        cdef float total = 0
        cdef int status
        with nogil:
            status = _step(&self.net, <float *>cnp.PyArray_DATA(params), <float *>cnp.PyArray_DATA(state),
                           op, <mct_train_state *>cnp.PyArray_DATA(ts),
                           <uint8_t>loss_kind, loss_param, <float *>cnp.PyArray_DATA(x),
                           <float *>cnp.PyArray_DATA(t), nb, nt, b, &total)
        return status, total

    def fit(self, cnp.ndarray opt, cnp.ndarray ts, cnp.ndarray params, cnp.ndarray state, int loss_kind,
            float loss_param, cnp.ndarray x, cnp.ndarray t, uint32_t batch, int shuffle, uint64_t seed,
            uint64_t start, uint64_t stop, int threads, float[::1] losses):
        """Steps start .. stop-1 of a run over the samples x, t (epoch after epoch) in one call without the
        GIL: (status, steps done, value of the failed step). Step g takes batch g % E (E = ceil(n / batch)
        batches per epoch; the last one holds the remaining samples) of epoch g // E, whose sample order is
        shuffle_order(n, seed, epoch) when shuffle, else 0 .. n-1. Each step is exactly train_batch on that
        batch (the same _step); its mean loss goes to losses[g - start]. Stops at the first step whose status
        is not MCT_OK, with the parameters as after the step before it."""
        self._check_train(opt, ts, params, state, x, t)
        cdef uint64_t n = <uint64_t>cnp.PyArray_DIM(x, 0)
        if batch == 0:
            raise ValueError("batch must be at least 1")
        if stop < start or <uint64_t>losses.shape[0] < stop - start:
            raise ValueError("losses needs stop - start floats")
        cdef uint32_t nt = threads if threads > 0 else 1, bs = batch if batch < n else <uint32_t>n
        cdef uint64_t per_epoch = (n + bs - 1) // bs
        cdef uint32_t last = <uint32_t>(n - (per_epoch - 1) * bs)
        cdef const mct_opt *op = <const mct_opt *>cnp.PyArray_DATA(opt)
        cdef Py_ssize_t need = max(self._work_floats(bs, nt, op), self._work_floats(last, nt, op))
        work = np.empty(need, np.float32)
        # the last epoch's order is kept, so a run in many chunks shuffles each epoch once
        order = self.fit_order
        cdef uint64_t have = <uint64_t>-1
        if shuffle and order is not None and self.fit_key == (n, seed) and order.shape[0] == n:
            have = self.fit_epoch
        elif shuffle:
            order = self.fit_order = np.empty(n, np.uint32)
            self.fit_key = (n, seed)
        else:
            order = np.empty(1, np.uint32)
        xg = np.empty((bs if shuffle else 1) * self.net.n_in, np.float32)
        tg = np.empty((bs if shuffle else 1) * self.net.n_out, np.float32)
        cdef float *b = <float *>cnp.PyArray_DATA(work)
        cdef uint32_t *ordp = <uint32_t *>cnp.PyArray_DATA(order)
        cdef float *xgp = <float *>cnp.PyArray_DATA(xg)
        cdef float *tgp = <float *>cnp.PyArray_DATA(tg)
        cdef float *xp = <float *>cnp.PyArray_DATA(x)
        cdef float *tp = <float *>cnp.PyArray_DATA(t)
        cdef float *pp = <float *>cnp.PyArray_DATA(params)
        cdef float *sp = <float *>cnp.PyArray_DATA(state)
        cdef mct_train_state *tsp = <mct_train_state *>cnp.PyArray_DATA(ts)
        cdef uint32_t I = self.net.n_in, O = self.net.n_out, nb, s
        cdef uint64_t g, epoch, j, first
        cdef float value = 0
        cdef int status = MCT_OK
        with nogil:
            g = start
            while g < stop:
                epoch = g // per_epoch
                j = g - epoch * per_epoch
                first = j * bs
                nb = bs if j + 1 < per_epoch else last
                if shuffle:
                    if epoch != have:
                        _shuffle(ordp, <uint32_t>n, seed, epoch)
                        have = epoch
                    for s in range(nb):
                        memcpy(xgp + <size_t>s * I, xp + <size_t>ordp[first + s] * I, I * sizeof(float))
                        memcpy(tgp + <size_t>s * O, tp + <size_t>ordp[first + s] * O, O * sizeof(float))
                    status = _step(&self.net, pp, sp, op, tsp, <uint8_t>loss_kind, loss_param, xgp, tgp, nb, nt,
                                   b, &value)
                else:
                    status = _step(&self.net, pp, sp, op, tsp, <uint8_t>loss_kind, loss_param,
                                   xp + first * I, tp + first * O, nb, nt, b, &value)
                if status != MCT_OK:
                    break
                losses[g - start] = value
                g += 1
        if shuffle:
            self.fit_epoch = have
        return status, g - start, value

    def train_fused(self, uint8_t[::1] opt, uint8_t[::1] ts, float[::1] params, float[::1] state,
                    int loss_kind, float loss_param, float[:, ::1] x, float[:, ::1] t):
        """The device's update (gradients applied as they are known, no grads buffer): (status, mean loss), the
        status the core's (enum mct_status)."""
        cdef uint32_t nb = x.shape[0]
        cdef float empty = 0
        _need(opt.shape[0], MCT_OPT_SIZE, "the optimizer config (bytes)")
        _need(ts.shape[0], MCT_TRAIN_STATE_SIZE, "the train state (bytes)")
        _need(params.shape[0], self.net.n_params, "params")
        _need(state.shape[0], mct_opt_slots((<const mct_opt *>&opt[0]).kind) * self.net.n_params, "the optimizer state")
        scratch = np.empty(mct_scratch_size(&self.net, nb, 0, 0) + self.net.n_out * nb, np.float32)
        arena = np.empty(self.net.arena * nb, np.float32)
        cdef float[::1] sc = scratch, a = arena
        cdef float loss = 0
        cdef int rc
        with nogil:
            rc = mct_train_step(&self.net, _fp(params, &empty), <const mct_opt *>&opt[0], _fp(state, &empty),
                                <mct_train_state *>&ts[0], <uint8_t>loss_kind, loss_param, &x[0, 0], &t[0, 0], nb,
                                &a[0], &sc[0], sc.shape[0], &loss)
        return rc, loss
include "_feat.pxi"
