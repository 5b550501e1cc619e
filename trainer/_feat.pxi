# The signal front end of the C core (firmware/core/mct_feat.h), included by _core.pyx: the pipeline's facts,
# sizes and tables, and features of batches of windows computed by the C without the GIL.
from libc.stdint cimport int16_t

cdef extern from "mct_feat.h" nogil:
    ctypedef struct mct_feat_cfg:
        pass
    ctypedef struct mct_feat_sizes:
        uint32_t n_in, n_frames, n_per_frame, n_out, tables, scratch
    int mct_feat_size(const mct_feat_cfg *c, mct_feat_sizes *s)
    int mct_feat_tables(const mct_feat_cfg *c, float *tab)
    void mct_feat_run(const mct_feat_cfg *c, const float *tab, const float *x, float *out, float *scratch)
    void mct_feat_run_i16(const mct_feat_cfg *c, const float *tab, const int16_t *x, float *out, float *scratch)
    size_t MCT_FEAT_CFG_SIZE "sizeof(mct_feat_cfg)"

cdef extern from "mct_feat_facts.h" nogil:
    const mct_fact_list mct_feat_fact_lists[]
    uint32_t MCT_FEAT_FACT_N_LISTS
    const mct_fact_struct mct_feat_fact_struct


def feat_lists():
    """The feature pipeline's lists: {list name: [(name, C name, value), ...]}."""
    out = {}
    cdef uint32_t i, j
    cdef const mct_fact_list *L
    for i in range(MCT_FEAT_FACT_N_LISTS):
        L = &mct_feat_fact_lists[i]
        out[L.name.decode()] = [(L.entries[j].name.decode(), L.entries[j].c_name.decode(), L.entries[j].value)
                                for j in range(L.count)]
    return out


def feat_struct():
    """struct mct_feat_cfg: (sizeof, [(field, offset, bytes, numpy kind), ...])."""
    cdef const mct_fact_struct *S = &mct_feat_fact_struct
    cdef uint32_t j
    return S.size, [(S.fields[j].name.decode(), S.fields[j].offset, S.fields[j].size, chr(S.fields[j].kind))
                    for j in range(S.count)]


cdef const mct_feat_cfg *_feat_cfg(const uint8_t[::1] cfg) except NULL:
    if cfg.shape[0] != MCT_FEAT_CFG_SIZE:
        raise ValueError("a feature config has %d bytes, got %d" % (MCT_FEAT_CFG_SIZE, cfg.shape[0]))
    return <const mct_feat_cfg *>&cfg[0]


def feat_size(const uint8_t[::1] cfg):
    """What the core says a pipeline (the bytes of one struct mct_feat_cfg) needs and makes: (valid, n_in,
    n_frames, n_per_frame, n_out, table floats, scratch floats); valid is 0 for a config the core rejects."""
    cdef mct_feat_sizes s
    cdef int ok = mct_feat_size(_feat_cfg(cfg), &s)
    return ok, s.n_in, s.n_frames, s.n_per_frame, s.n_out, s.tables, s.scratch


def feat_tables(const uint8_t[::1] cfg):
    """The pipeline's constant tables (float32), as mct_feat_tables computes them."""
    cdef const mct_feat_cfg *c = _feat_cfg(cfg)
    cdef mct_feat_sizes s
    if not mct_feat_size(c, &s):
        raise ValueError("the C core rejected the feature config")
    tab = np.zeros(max(s.tables, 1), np.float32)
    cdef float[::1] t = tab
    with nogil:
        mct_feat_tables(c, &t[0])
    return tab[:s.tables]


def feat_run(const uint8_t[::1] cfg, const float[::1] tables, cnp.ndarray x):
    """Features (nw, n_out) float32 of nw windows x (nw, n_in), float32 or int16 (C-contiguous), computed by
    mct_feat_run / mct_feat_run_i16 with the tables of feat_tables."""
    cdef const mct_feat_cfg *c = _feat_cfg(cfg)
    cdef mct_feat_sizes s
    if not mct_feat_size(c, &s):
        raise ValueError("the C core rejected the feature config")
    if tables.shape[0] != s.tables:
        raise ValueError("the tables have %d floats, the pipeline %d" % (tables.shape[0], s.tables))
    if (cnp.PyArray_NDIM(x) != 2 or cnp.PyArray_DIM(x, 1) != s.n_in or not cnp.PyArray_IS_C_CONTIGUOUS(x)
            or cnp.PyArray_TYPE(x) not in (cnp.NPY_FLOAT32, cnp.NPY_INT16)):
        raise ValueError("windows must be a C-contiguous float32 or int16 array (n, %d)" % s.n_in)
    cdef Py_ssize_t nw = cnp.PyArray_DIM(x, 0), w
    out = np.empty((nw, s.n_out), np.float32)
    scratch = np.empty(max(s.scratch, 1), np.float32)
    cdef float[:, ::1] o = out
    cdef float[::1] sc = scratch
    cdef const float *tp = &tables[0] if s.tables else NULL
    cdef int i16 = cnp.PyArray_TYPE(x) == cnp.NPY_INT16
    cdef char *xp = <char *>cnp.PyArray_DATA(x)
    cdef Py_ssize_t row = cnp.PyArray_STRIDE(x, 0) if nw else 0
    with nogil:
        for w in range(nw):
            if i16:
                mct_feat_run_i16(c, tp, <const int16_t *>(xp + w * row), &o[w, 0], &sc[0])
            else:
                mct_feat_run(c, tp, <const float *>(xp + w * row), &o[w, 0], &sc[0])
    return out
