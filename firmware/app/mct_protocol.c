/* mct_protocol.c - the device side of docs/protocol.md: frames in, model work, frames out. Bad frames are
 * answered with an error status and never change the model: PREDICT and TRAIN payloads are streamed into
 * scratch buffers (the arena input and the target), everything else into rx, and nothing is acted on before
 * the CRC has been checked. The model's state and the saves are mct_app.c's. */
#include "mct_app.h"
#include "mct_crc.h"
#include "mct_port.h"

#include <string.h>

#define SYNC_IN 0xA5u
#define SYNC_OUT 0x5Au
#define STACK_PATTERN 0xA5u
/* The longest payload any valid frame has (TRAIN's, or the frame buffer's). */
#define TRAIN_PAYLOAD ((MCT_MODEL_N_IN + MCT_MODEL_N_OUT) * 4)
#if MCT_MODEL_FEAT
#define RAW_BYTES (MCT_MODEL_RAW_IN * (uint32_t)sizeof(mct_raw_t))
#define TRAIN_RAW_PAYLOAD (RAW_BYTES + MCT_MODEL_N_OUT * 4u)
#else
#define TRAIN_RAW_PAYLOAD 0u
#endif
#define MAX_FRAME0 (TRAIN_PAYLOAD > MCT_MODEL_RX_MAX ? TRAIN_PAYLOAD : MCT_MODEL_RX_MAX)
#define MAX_FRAME (TRAIN_RAW_PAYLOAD > MAX_FRAME0 ? TRAIN_RAW_PAYLOAD : MAX_FRAME0)
#define put_u16 mct_put_u16
#define put_u32 mct_put_u32
#define get_u16 mct_get_u16
#define get_u32 mct_get_u32

/* ---- small helpers ---- */
static int next_byte(void) {
    int c = port_getc();
    if (c < 0) port_exit(0);
    return c;
}

/* ---- replies: header, data in pieces, CRC ---- */
typedef struct { uint16_t crc; } reply_t;

static void reply_bytes(reply_t *r, const void *p, uint16_t n) {
    r->crc = mct_crc16(r->crc, (const uint8_t *)p, n);
    port_write((const uint8_t *)p, n);
}

static void reply_begin(reply_t *r, uint8_t cmd, uint8_t status, uint16_t n_data) {
    uint8_t h[6];
    h[0] = SYNC_OUT;
    h[1] = MCT_PROTOCOL_VERSION;
    h[2] = (uint8_t)(cmd | 0x80u);
    put_u16(h + 3, (uint16_t)(n_data + 1u));
    h[5] = status;
    port_write(h, 1);
    r->crc = 0xFFFFu;
    reply_bytes(r, h + 1, 5);
}

static void reply_end(reply_t *r) {
    uint8_t c[2];
    put_u16(c, r->crc);
    port_write(c, 2);
    port_flush();
}

static void reply_status(uint8_t cmd, uint8_t status) {
    reply_t r;
    reply_begin(&r, cmd, status, 0);
    reply_end(&r);
}

/* Status VERSION: the frame or blob is of another format version than this firmware's `mine`, sent back. */
static void reply_version(uint8_t cmd, uint8_t mine) {
    reply_t r;
    reply_begin(&r, cmd, MCT_ST_VERSION, 1);
    reply_bytes(&r, &mine, 1);
    reply_end(&r);
}

/* Start and length (in floats) of a READ/WRITE region, or 0 for an unknown one. */
static float *region(mct_app *a, uint8_t which, uint32_t *n) {
    switch (which) {
    case 0: *n = MCT_MODEL_N_PARAMS; return a->params;
    case 1: *n = MCT_MODEL_N_PARAMS * MCT_MODEL_SLOTS; return a->state;
    case 2: *n = 3; return (float *)(void *)&a->ts;
    default: *n = 0; return 0;
    }
}

/* ---- stack use ---- */
void mct_stack_paint(void) {
    uint8_t *lo, *hi, here;
    if (!port_stack_bounds(&lo, &hi)) return;
    uintptr_t limit = (uintptr_t)&here - 64u;   /* stay clear of this function's own frame */
    for (uint8_t *p = lo; (uintptr_t)p < limit && p < hi; p++) *p = STACK_PATTERN;
}

static uint32_t stack_used(uint32_t *avail) {
    uint8_t *lo, *hi;
    if (!port_stack_bounds(&lo, &hi)) { *avail = 0; return 0; }
    uint8_t *p = lo;
    while (p < hi && *p == STACK_PATTERN) p++;
    *avail = (uint32_t)(hi - lo);
    return (uint32_t)(hi - p);
}

/* ---- commands ---- */
static void cmd_info(mct_app *a) {
    uint8_t d[31];
    d[0] = MCT_PROTOCOL_VERSION;
    for (uint8_t k = 0; k < 8; k++) d[1 + k] = mct_model_hash[k];
    put_u16(d + 9, MCT_MODEL_N_IN);
    put_u16(d + 11, MCT_MODEL_N_OUT);
    put_u32(d + 13, MCT_MODEL_N_PARAMS);
    put_u32(d + 17, MCT_MODEL_N_TRAINABLE);
    d[21] = mct_model_opt.kind;
    d[22] = MCT_MODEL_SLOTS;
    d[23] = MCT_MODEL_LOSS_KIND;
    put_u32(d + 24, a->ts.step);
    put_u16(d + 28, MCT_MODEL_RX_MAX);
    d[30] = (uint8_t)((port_store_size() >= mct_app_save_bytes() ? 1u : 0u) | (a->loaded ? 2u : 0u));
    reply_t r;
    reply_begin(&r, MCT_CMD_INFO, MCT_ST_OK, 31);
    reply_bytes(&r, d, 31);
    reply_end(&r);
}

static void cmd_predict(mct_app *a, uint8_t cmd) {
    port_mark(0, 1);
    int rc = mct_app_predict(a);
    port_mark(0, 0);
    if (rc != MCT_OK) { reply_status(cmd, mct_app_status(rc)); return; }
    reply_t r;
    reply_begin(&r, cmd, MCT_ST_OK, MCT_MODEL_N_OUT * 4);
    for (uint16_t i = 0; i < MCT_MODEL_N_OUT; i++) {
        float y = mct_app_output(a, i);
        reply_bytes(&r, &y, 4);
    }
    reply_end(&r);
}

#if MCT_MODEL_FEAT
/* FEATURES: the network input the raw window gives (what PREDICT_RAW and TRAIN_RAW feed the network). */
static void cmd_features(mct_app *a) {
    mct_app_features(a);
    reply_t r;
    reply_begin(&r, MCT_CMD_FEATURES, MCT_ST_OK, MCT_MODEL_N_IN * 4);
    reply_bytes(&r, a->arena + mct_model.in_off, MCT_MODEL_N_IN * 4);
    reply_end(&r);
}

/* CAPTURE: the sensor's next raw window (into a->raw, where PREDICT_RAW would put it), or status NO_WINDOW. */
static void cmd_capture(mct_app *a) {
    if (!port_sensor_read(a->raw, RAW_BYTES)) { reply_status(MCT_CMD_CAPTURE, MCT_ST_NO_WINDOW); return; }
    reply_t r;
    reply_begin(&r, MCT_CMD_CAPTURE, MCT_ST_OK, (uint16_t)RAW_BYTES);
    reply_bytes(&r, a->raw, (uint16_t)RAW_BYTES);
    reply_end(&r);
}
#endif

static void cmd_train(mct_app *a, uint8_t cmd) {
    float loss = 0.0f;
    port_mark(1, 1);
    int rc = mct_app_train(a, &loss);
    port_mark(1, 0);
    uint8_t d[8];
    memcpy(d, &loss, 4);
    put_u32(d + 4, a->ts.step);
    reply_t r;
    reply_begin(&r, cmd, mct_app_status(rc), 8);
    reply_bytes(&r, d, 8);
    reply_end(&r);
}

static void cmd_read(mct_app *a) {
    uint32_t n, off = get_u32(a->rx + 1), count = get_u16(a->rx + 5);      /* len is 7 (length_ok) */
    float *base = region(a, a->rx[0], &n);
    if (!base || off > n || count > n - off || count * 4u > MCT_MODEL_RX_MAX - 5u) {
        reply_status(MCT_CMD_READ, MCT_ST_BAD_ARG);
        return;
    }
    reply_t r;
    reply_begin(&r, MCT_CMD_READ, MCT_ST_OK, (uint16_t)(count * 4u));
    reply_bytes(&r, base + off, (uint16_t)(count * 4u));
    reply_end(&r);
}

static void cmd_write(mct_app *a, uint16_t len) {
    uint32_t n, off = get_u32(a->rx + 1), count = (uint32_t)(len - 5) / 4u;   /* len is 5 + 4k (length_ok) */
    float *base = region(a, a->rx[0], &n);
    if (!base || off > n || count > n - off) { reply_status(MCT_CMD_WRITE, MCT_ST_BAD_ARG); return; }
    uint8_t *dst = (uint8_t *)(base + off);
    for (uint32_t j = 0; j < count * 4u; j++) dst[j] = a->rx[5 + j];
    reply_status(MCT_CMD_WRITE, MCT_ST_OK);
}

static void cmd_seq(uint8_t cmd, int st, uint32_t seq) {
    uint8_t d[4];
    put_u32(d, seq);
    reply_t r;
    reply_begin(&r, cmd, (uint8_t)st, st == MCT_ST_OK ? 4 : 0);
    if (st == MCT_ST_OK) reply_bytes(&r, d, 4);
    reply_end(&r);
}

static void cmd_stats(mct_app *a) {
    uint8_t d[12];
    uint32_t avail, used = stack_used(&avail);
    put_u32(d, used);
    put_u32(d + 4, avail);
    put_u32(d + 8, a->saves);
    reply_t r;
    reply_begin(&r, MCT_CMD_STATS, MCT_ST_OK, 12);
    reply_bytes(&r, d, 12);
    reply_end(&r);
}

/* BLOB: the host announces the blob it pulls or pushes (u8 blob version, u32 RAM parameters, u8 optimizer slots
 * it carries: 0 or the model's); a blob of another version or another model is refused before any READ or
 * WRITE of it, so the device keeps its state. */
static void cmd_blob(mct_app *a) {
    if (a->rx[0] != MCT_FORMAT_BLOB) { reply_version(MCT_CMD_BLOB, MCT_FORMAT_BLOB); return; }
    uint8_t slots = a->rx[5];
    int ok = get_u32(a->rx + 1) == MCT_MODEL_N_PARAMS && (slots == 0 || slots == MCT_MODEL_SLOTS);
    reply_status(MCT_CMD_BLOB, ok ? MCT_ST_OK : MCT_ST_BAD_ARG);
}

/* Is len the right payload length for a command buffered in rx? */
static int length_ok(uint8_t cmd, uint16_t len) {
    switch (cmd) {
    case MCT_CMD_READ: return len == 7;
    case MCT_CMD_WRITE: return len >= 5 && (len - 5) % 4 == 0;
    case MCT_CMD_BLOB: return len == 6;
    case MCT_CMD_INFO: case MCT_CMD_SAVE: case MCT_CMD_LOAD: case MCT_CMD_STATS: case MCT_CMD_RESET:
    case MCT_CMD_CAPTURE: case MCT_CMD_QUIT: return len == 0;
    default: return 1;          /* unknown commands are answered as such */
    }
}

void mct_app_poll(mct_app *a) {
    uint8_t h[4];
    while (next_byte() != SYNC_IN) {}
    h[0] = (uint8_t)next_byte();
    if (h[0] != MCT_PROTOCOL_VERSION) {  /* bytes 0 and 1 mean the same in every version: answer now, resync */
        reply_version(0, MCT_PROTOCOL_VERSION);
        return;
    }
    for (uint8_t k = 1; k < 4; k++) h[k] = (uint8_t)next_byte();
    uint8_t cmd = h[1];
    uint16_t len = get_u16(h + 2), crc = mct_crc16(0xFFFFu, h, 4);
    if (len > MAX_FRAME) {              /* longer than any frame this model takes: answer now, resync */
        reply_status(cmd, MCT_ST_BAD_LENGTH);
        return;
    }
    /* where the payload goes: PREDICT/TRAIN of the right size stream into scratch buffers */
    uint8_t *dst = 0, *dst2 = 0, word[4];
    uint16_t split = len;
    int by_value = 0;   /* PREDICT's input goes in value by value (mct_app_input: an MCT_MODEL_INT8_IO model) */
    int refuse = 0;     /* a TRAIN frame that mct_app_train will refuse (MCT_MODEL_INT8_IO: nowhere to put it) */
    if (cmd == MCT_CMD_PREDICT && len == MCT_MODEL_N_IN * 4) {
        by_value = MCT_MODEL_INT8_IO;
        dst = by_value ? word : (uint8_t *)(a->arena + mct_model.in_off);
    } else if (cmd == MCT_CMD_TRAIN && len == TRAIN_PAYLOAD) {
#if MCT_MODEL_INT8_IO
        refuse = 1;
#else
        dst = (uint8_t *)(a->arena + mct_model.in_off);
        dst2 = (uint8_t *)a->target;
        split = MCT_MODEL_N_IN * 4;
#endif
#if MCT_MODEL_FEAT
    } else if ((cmd == MCT_CMD_PREDICT_RAW || cmd == MCT_CMD_FEATURES) && len == RAW_BYTES) {
        dst = (uint8_t *)a->raw;
    } else if (cmd == MCT_CMD_TRAIN_RAW && len == TRAIN_RAW_PAYLOAD) {
        dst = (uint8_t *)a->raw;
        dst2 = (uint8_t *)a->target;
        split = (uint16_t)RAW_BYTES;
    } else if (cmd == MCT_CMD_PREDICT_RAW || cmd == MCT_CMD_TRAIN_RAW || cmd == MCT_CMD_FEATURES) {
        dst = 0;   /* a raw window of the wrong size */
#endif
    } else if (cmd != MCT_CMD_PREDICT && cmd != MCT_CMD_TRAIN && len <= MCT_MODEL_RX_MAX) {
        dst = a->rx;
    }
    for (uint16_t k = 0; k < len; k++) {
        uint8_t b = (uint8_t)next_byte();
        crc = mct_crc16(crc, &b, 1);
        if (by_value) {
            word[k & 3u] = b;
            if ((k & 3u) == 3u) {
                float v;
                memcpy(&v, word, 4);
                mct_app_input(a, k >> 2, v);
            }
        } else if (dst) {
            if (k < split) dst[k] = b;
            else dst2[k - split] = b;
        }
    }
    uint8_t c0 = (uint8_t)next_byte(), c1 = (uint8_t)next_byte();
    if ((uint16_t)(c0 | (c1 << 8)) != crc) { reply_status(cmd, MCT_ST_BAD_CRC); return; }
    if (refuse) { cmd_train(a, cmd); return; }
    if (!dst) {
        int known = (cmd >= MCT_CMD_INFO && cmd <= MCT_CMD_BLOB) || cmd == MCT_CMD_QUIT ||
                    (MCT_MODEL_FEAT && cmd >= MCT_CMD_PREDICT_RAW && cmd <= MCT_CMD_CAPTURE);
        reply_status(cmd, known ? MCT_ST_BAD_LENGTH : MCT_ST_UNKNOWN);
        return;
    }
    if (dst == a->rx && !length_ok(cmd, len)) { reply_status(cmd, MCT_ST_BAD_LENGTH); return; }
    uint32_t seq = 0;
    int st;
    switch (cmd) {
    case MCT_CMD_INFO: cmd_info(a); break;
    case MCT_CMD_PREDICT: cmd_predict(a, cmd); break;
    case MCT_CMD_TRAIN: cmd_train(a, cmd); break;
#if MCT_MODEL_FEAT
    case MCT_CMD_PREDICT_RAW: mct_app_features(a); cmd_predict(a, cmd); break;
    case MCT_CMD_TRAIN_RAW: mct_app_features(a); cmd_train(a, cmd); break;
    case MCT_CMD_FEATURES: cmd_features(a); break;
    case MCT_CMD_CAPTURE: cmd_capture(a); break;
#endif
    case MCT_CMD_READ: cmd_read(a); break;
    case MCT_CMD_WRITE: cmd_write(a, len); break;
    case MCT_CMD_SAVE: st = mct_app_save(a, &seq); cmd_seq(cmd, st, seq); break;
    case MCT_CMD_LOAD:
        st = mct_app_load(a, &seq);
        if (st != MCT_ST_OK && st != MCT_ST_NO_SAVE && st != MCT_ST_UNSUPPORTED) mct_app_reset(a);
        cmd_seq(cmd, st, seq);
        break;
    case MCT_CMD_STATS: cmd_stats(a); break;
    case MCT_CMD_RESET: mct_app_reset(a); reply_status(cmd, MCT_ST_OK); break;
    case MCT_CMD_BLOB: cmd_blob(a); break;
#ifdef MCT_ALLOW_QUIT
    case MCT_CMD_QUIT: reply_status(cmd, MCT_ST_OK); port_exit(0); break;
#endif
    default: reply_status(cmd, MCT_ST_UNKNOWN); break;
    }
}
