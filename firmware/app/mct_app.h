/* mct_app.h - the firmware application: model buffers and saves (mct_app.c), the protocol loop
 * (mct_protocol.c). Sizes come from the generated model.h; all buffers are static members of one struct. */
#ifndef MCT_APP_H
#define MCT_APP_H

#include "mct.h"
#include "model.h"

/* A model trained on raw windows (`mcutrain train --features`) computes its own features: model.h then defines
 * MCT_MODEL_FEAT 1, the raw window's size and type, and the pipeline's table and scratch sizes. */
#ifndef MCT_MODEL_FEAT
#define MCT_MODEL_FEAT 0
#endif
#if MCT_MODEL_FEAT
#include "mct_feat.h"
#if MCT_MODEL_RAW_I16
typedef int16_t mct_raw_t;   /* raw samples: int16 (audio), times the pipeline's in_scale */
#else
typedef float mct_raw_t;     /* raw samples: floats (motion) */
#endif
#endif

/* A frozen full-integer model (model.h of older exports says nothing: 0) runs its int8 body alone: the input is
 * quantized value by value as it arrives, the output dequantized as it leaves, so the arena is the int8 buffer
 * (MCT_MODEL_APP_ARENA floats) and nothing is kept for training (TRAIN answers UNSUPPORTED). */
#ifndef MCT_MODEL_INT8_IO
#define MCT_MODEL_INT8_IO 0
#define MCT_MODEL_APP_ARENA MCT_MODEL_ARENA
#endif

#define MCT_PROTOCOL_VERSION MCT_FORMAT_PROTOCOL
#define MCT_STATE_FLOATS (MCT_MODEL_N_PARAMS * MCT_MODEL_SLOTS > 0 ? MCT_MODEL_N_PARAMS * MCT_MODEL_SLOTS : 1)
#ifndef MCT_MODEL_SAVE_SLOTS                 /* model.h of older exports: saves keep every optimizer slot */
#define MCT_MODEL_SAVE_SLOTS MCT_MODEL_SLOTS
#endif

/* Commands and status codes of docs/protocol.md (MCT_CMD_LIST, MCT_REPLY_LIST in mct_lists.h). */
#define MCT_CMD_ENUM(NAME, VALUE) MCT_CMD_##NAME = VALUE,
enum mct_cmd { MCT_CMD_LIST(MCT_CMD_ENUM) MCT_CMD_END_ };
#undef MCT_CMD_ENUM
#define MCT_REPLY_ENUM(NAME, VALUE) MCT_ST_##NAME = VALUE,
enum mct_status_code { MCT_REPLY_LIST(MCT_REPLY_ENUM) MCT_ST_END_ };
#undef MCT_REPLY_ENUM

/* Everything the firmware keeps in RAM. */
typedef struct mct_app {
    float params[MCT_MODEL_N_PARAMS > 0 ? MCT_MODEL_N_PARAMS : 1];
    float state[MCT_STATE_FLOATS];
    mct_train_state ts;
    float arena[MCT_MODEL_APP_ARENA];
#if !MCT_MODEL_INT8_IO                           /* a model that trains nothing keeps no training buffers */
    float scratch[MCT_MODEL_SCRATCH];
    float target[MCT_MODEL_N_OUT];
#endif
    uint8_t rx[MCT_MODEL_RX_MAX];
#if MCT_MODEL_FEAT
    mct_raw_t raw[MCT_MODEL_RAW_IN];             /* the raw window of PREDICT_RAW / TRAIN_RAW / FEATURES */
    float feat_tab[MCT_MODEL_FEAT_TABLES];        /* the pipeline's constant tables, computed at boot */
    float feat_scratch[MCT_MODEL_FEAT_SCRATCH];
#endif
    uint32_t saves;        /* saves done since boot */
    uint8_t loaded;        /* a saved state was loaded at boot */
} mct_app;

/* Reset the model to the exported parameters, zero optimizer state, step 0. */
void mct_app_reset(mct_app *a);
/* Boot: reset, then load the newest valid save if there is one. */
void mct_app_init(mct_app *a);
/* Put input value i (< MCT_MODEL_N_IN) where PREDICT and TRAIN read it (quantized, for MCT_MODEL_INT8_IO). */
void mct_app_input(mct_app *a, uint32_t i, float v);
/* PREDICT on the input put in by mct_app_input (or FEATURES), outputs read with mct_app_output; the core's status. */
int mct_app_predict(mct_app *a);
/* Output value i (< MCT_MODEL_N_OUT) of the last PREDICT. */
float mct_app_output(mct_app *a, uint32_t i);
/* TRAIN on the input put in and the target in a->target; the core's status (MCT_E_ARG for an MCT_MODEL_INT8_IO
 * model, which trains nothing), the loss in *loss. */
int mct_app_train(mct_app *a, float *loss);
/* The protocol status (enum mct_status_code) of a core status that mct_app_train returned. */
uint8_t mct_app_status(int rc);
/* Save the state into the older of the two storage slots; MCT_ST_OK with the save's sequence number in *seq. */
int mct_app_save(mct_app *a, uint32_t *seq);
/* Load the newest valid save; MCT_ST_OK with its sequence number in *seq, MCT_ST_NO_SAVE, or an error. */
int mct_app_load(mct_app *a, uint32_t *seq);
/* Bytes of storage the two save slots need. */
uint32_t mct_app_save_bytes(void);
/* Little-endian 16/32-bit numbers in byte buffers (frames, save headers). */
void mct_put_u16(uint8_t *p, uint16_t v);
/* See mct_put_u16. */
void mct_put_u32(uint8_t *p, uint32_t v);
/* See mct_put_u16. */
uint16_t mct_get_u16(const uint8_t *p);
/* See mct_put_u16. */
uint32_t mct_get_u32(const uint8_t *p);
#if MCT_MODEL_FEAT
/* The network input of the raw window in a->raw: its features, normalised, into the arena's input. */
void mct_app_features(mct_app *a);
#endif
/* Receive one frame from the host and answer it. */
void mct_app_poll(mct_app *a);
/* Fill the free stack area with a pattern so STATS can report the peak use (call first in main). */
void mct_stack_paint(void);

#endif /* MCT_APP_H */
