/* mct_app.c - the model's state on the device: the exported parameters, one prediction, one training step,
 * and the double-buffered saves (two slots in the port's storage, each committed by its header last, the
 * newer valid one wins, so a power cut during a save loses nothing). The protocol (mct_protocol.c) and the
 * model-level API (mcutrain.c) both work through these functions; this file needs only the port's storage. */
#include "mct_app.h"
#include "mct_crc.h"
#include "mct_port.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the protocol and saves assume a little-endian target"
#endif

/* the save layout is the core's (mct.h): a save holds the RAM parameters, the optimizer slots it keeps
 * (MCT_MODEL_SAVE_SLOTS: all of them, or none with `mcutrain export --save params`) and the train state */
#define SAVE_MAGIC MCT_SAVE_MAGIC
#define SAVE_HEADER MCT_SAVE_HEADER
#define SAVE_BLOB MCT_SAVE_BLOB_BYTES(MCT_MODEL_N_PARAMS, MCT_MODEL_SAVE_SLOTS)
#define SAVE_SLOT MCT_SAVE_SLOT_BYTES(MCT_MODEL_N_PARAMS, MCT_MODEL_SAVE_SLOTS)

void mct_put_u16(uint8_t *p, uint16_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }
void mct_put_u32(uint8_t *p, uint32_t v) { mct_put_u16(p, (uint16_t)v); mct_put_u16(p + 2, (uint16_t)(v >> 16)); }
uint16_t mct_get_u16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
uint32_t mct_get_u32(const uint8_t *p) { return (uint32_t)mct_get_u16(p) | ((uint32_t)mct_get_u16(p + 2) << 16); }

/* ---- model state ---- */
void mct_app_reset(mct_app *a) {
    mct_model_load_init(a->params);
    for (uint32_t j = 0; j < MCT_STATE_FLOATS; j++) a->state[j] = 0.0f;
    a->ts = mct_train_state_init();
}

/* ---- saves: two slots, the newer valid one wins ---- */
/* The blob of a save, piece by piece: params, the optimizer slots it keeps, train state. */
static uint8_t *blob_piece(mct_app *a, uint8_t i, uint32_t *n) {
    switch (i) {
    case 0: *n = sizeof(float) * MCT_MODEL_N_PARAMS; return (uint8_t *)a->params;
    case 1: *n = sizeof(float) * MCT_MODEL_N_PARAMS * MCT_MODEL_SAVE_SLOTS; return (uint8_t *)a->state;
    default: *n = sizeof(mct_train_state); return (uint8_t *)&a->ts;
    }
}

uint32_t mct_app_save_bytes(void) { return 2u * SAVE_SLOT; }

/* Sequence number of a valid save in slot s (its data CRC checked), or 0 when the slot is not valid. */
static uint32_t slot_seq(mct_app *a, uint8_t s) {
    uint8_t h[SAVE_HEADER];
    uint32_t base = (uint32_t)s * SAVE_SLOT;
    if (port_store_read(base, h, SAVE_HEADER)) return 0;
    if (mct_get_u32(h) != SAVE_MAGIC || mct_get_u32(h + 8) != SAVE_BLOB) return 0;
    for (uint8_t k = 0; k < 8; k++) if (h[16 + k] != mct_model_hash[k]) return 0;
    if (mct_get_u32(h + 24) != MCT_FORMAT_BLOB) return 0;   /* a save of another blob version is not read */
    uint32_t crc = 0;
    for (uint32_t off = 0; off < SAVE_BLOB;) {
        uint32_t n = SAVE_BLOB - off < MCT_MODEL_RX_MAX ? SAVE_BLOB - off : MCT_MODEL_RX_MAX;
        if (port_store_read(base + SAVE_HEADER + off, a->rx, n)) return 0;
        crc = mct_crc32(crc, a->rx, n);
        off += n;
    }
    return crc == mct_get_u32(h + 12) ? mct_get_u32(h + 4) : 0;
}

int mct_app_save(mct_app *a, uint32_t *seq_out) {
    if (port_store_size() < 2u * SAVE_SLOT) return MCT_ST_UNSUPPORTED;
    uint32_t s0 = slot_seq(a, 0), s1 = slot_seq(a, 1);
    uint8_t slot = s0 <= s1 ? 0 : 1;                 /* overwrite the older (or invalid) one */
    uint32_t seq = (s0 > s1 ? s0 : s1) + 1u, base = (uint32_t)slot * SAVE_SLOT, off = SAVE_HEADER, crc = 0;
    for (uint8_t i = 0; i < 3; i++) {
        uint32_t n;
        uint8_t *p = blob_piece(a, i, &n);
        if (port_store_write(base + off, p, n)) return MCT_ST_STORE;
        crc = mct_crc32(crc, p, n);
        off += n;
    }
    uint8_t h[SAVE_HEADER];
    mct_put_u32(h, SAVE_MAGIC);
    mct_put_u32(h + 4, seq);
    mct_put_u32(h + 8, SAVE_BLOB);
    mct_put_u32(h + 12, crc);
    for (uint8_t k = 0; k < 8; k++) h[16 + k] = mct_model_hash[k];
    mct_put_u32(h + 24, MCT_FORMAT_BLOB);
    if (port_store_write(base, h, SAVE_HEADER)) return MCT_ST_STORE;   /* the header commits the save */
    *seq_out = seq;
    a->saves++;
    return MCT_ST_OK;
}

int mct_app_load(mct_app *a, uint32_t *seq_out) {
    if (port_store_size() < 2u * SAVE_SLOT) return MCT_ST_UNSUPPORTED;
    uint32_t s0 = slot_seq(a, 0), s1 = slot_seq(a, 1);
    if (!s0 && !s1) return MCT_ST_NO_SAVE;
    uint8_t slot = s1 > s0 ? 1 : 0;
    uint32_t base = (uint32_t)slot * SAVE_SLOT + SAVE_HEADER;
    for (uint8_t i = 0; i < 3; i++) {
        uint32_t n;
        uint8_t *p = blob_piece(a, i, &n);
        if (port_store_read(base, p, n)) return MCT_ST_STORE;
        base += n;
    }
#if MCT_MODEL_SAVE_SLOTS < MCT_MODEL_SLOTS
    /* a save of the parameters only: the optimizer starts afresh (zero slots, Adam's powers at step 0),
     * the step count (and so the learning-rate schedule) goes on */
    for (uint32_t j = 0; j < MCT_STATE_FLOATS; j++) a->state[j] = 0.0f;
    {
        uint32_t step = a->ts.step;
        a->ts = mct_train_state_init();
        a->ts.step = step;
    }
#endif
    *seq_out = s1 > s0 ? s1 : s0;
    return MCT_ST_OK;
}

#if MCT_MODEL_FEAT
void mct_app_features(mct_app *a) {
    float *in = a->arena + mct_model.in_off;
#if MCT_MODEL_RAW_I16
    mct_feat_run_i16(&mct_model_feat, a->feat_tab, a->raw, in, a->feat_scratch);
#else
    mct_feat_run(&mct_model_feat, a->feat_tab, a->raw, in, a->feat_scratch);
#endif
#if MCT_MODEL_NORM
    const uint8_t *norm = (const uint8_t *)mct_model_norm;   /* mean [N_IN], then scale [N_IN] */
    for (uint32_t i = 0; i < MCT_MODEL_N_IN; i++)
        in[i] = (in[i] - mct_cload_f32(norm + 4u * i)) * mct_cload_f32(norm + 4u * (MCT_MODEL_N_IN + i));
#endif
}
#endif

void mct_app_init(mct_app *a) {
    uint32_t seq;
#if MCT_MODEL_FEAT
    mct_feat_tables(&mct_model_feat, a->feat_tab);
#endif
    mct_app_reset(a);
    a->saves = 0;
    a->loaded = mct_app_load(a, &seq) == MCT_ST_OK;
    if (!a->loaded) mct_app_reset(a);   /* a failed load may have touched the buffers */
}

#if MCT_MODEL_INT8_IO
/* The constants of boundary layer l (QUANT, the first, or DEQUANT, the last) and where its int8 side lies. */
static int8_t *boundary(mct_app *a, uint16_t l, const uint8_t **c) {
    mct_layer tmp;
    const mct_layer *L = mct_get_layer(&mct_model, l, &tmp);
    *c = mct_model.cdata + L->p_off;
    return (int8_t *)(a->arena + (l ? L->in_off : L->out_off));
}
#endif

void mct_app_input(mct_app *a, uint32_t i, float v) {
#if MCT_MODEL_INT8_IO
    const uint8_t *c;
    int8_t *q = boundary(a, 0, &c);
    q[i] = mct_quantize_value(c, v);
#else
    a->arena[mct_model.in_off + i] = v;
#endif
}

int mct_app_predict(mct_app *a) {
#if MCT_MODEL_INT8_IO
    float *y = mct_forward_layers(&mct_model, a->params, a->arena, MCT_MODEL_APP_ARENA, 1, MCT_MODEL_N_LAYERS - 1);
    return y ? MCT_OK : MCT_E_NET;
#else
    mct_forward(&mct_model, a->params, a->arena + mct_model.in_off, a->arena, 1);
    return MCT_OK;
#endif
}

float mct_app_output(mct_app *a, uint32_t i) {
#if MCT_MODEL_INT8_IO
    const uint8_t *c;
    const int8_t *q = boundary(a, MCT_MODEL_N_LAYERS - 1, &c);
    return mct_dequantize_value(c, q[i]);
#else
    return a->arena[mct_model.out_off + i];
#endif
}

int mct_app_train(mct_app *a, float *loss) {
#if MCT_MODEL_INT8_IO
    (void)a;
    *loss = 0.0f;
    return MCT_E_ARG;
#else
    return mct_train_step(&mct_model, a->params, &mct_model_opt, a->state, &a->ts, MCT_MODEL_LOSS_KIND,
                          MCT_MODEL_LOSS_PARAM, a->arena + mct_model.in_off, a->target, 1, a->arena, a->scratch,
                          MCT_MODEL_SCRATCH, loss);
#endif
}

uint8_t mct_app_status(int rc) {
    return rc == MCT_OK ? MCT_ST_OK
         : rc == MCT_E_NONFINITE || rc == MCT_E_NONFINITE_GRAD || rc == MCT_E_NONFINITE_INPUT ? MCT_ST_NONFINITE
         : MCT_ST_UNSUPPORTED;
}
