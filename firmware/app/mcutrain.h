/* mcutrain.h - the model-level API for your own firmware (docs/embedding.md): one model, exported by
 * `mcutrain export --library`, in static buffers sized by its model.h; no malloc. Saves go to the port's
 * storage (port_store_size/read/write of mct_port.h: the Arduino port uses EEPROM; elsewhere you write
 * those three functions), two slots with a CRC each, so a power cut during a save loses nothing.
 * Not thread-safe: call it from one thread (or guard it), never from an interrupt handler. */
#ifndef MCUTRAIN_H
#define MCUTRAIN_H

#ifdef __cplusplus
extern "C" {
#endif

#include "mct_app.h"

/* Inputs and outputs of the model (floats). */
#define MCT_N_IN MCT_MODEL_N_IN
#define MCT_N_OUT MCT_MODEL_N_OUT
/* Classes with names (a model trained on text labels): MCT_N_CLASSES of them, in the order of the outputs;
 * `static const char *const names[] = MCT_CLASS_NAMES;` makes the table where it is used. 0 otherwise. */
#define MCT_N_CLASSES MCT_MODEL_N_CLASSES
#if MCT_MODEL_N_CLASSES > 0
#define MCT_CLASS_NAMES MCT_MODEL_CLASS_NAMES
#endif

/* Set up the model: the newest valid save in storage if there is one (returns 1), else the exported one (0). */
int mct_model_init(void);
/* Predict: x holds MCT_N_IN floats, y receives MCT_N_OUT floats (NaN if the core refuses the exported layer table). */
void mct_model_predict(const float *x, float *y);
/* One training step on x and its target (MCT_N_OUT floats), loss in *loss; MCT_ST_OK, else the model is unchanged (MCT_ST_UNSUPPORTED with MCT_MODEL_INT8_IO). */
int mct_model_train(const float *x, const float *target, float *loss);
/* Persist what the model learned into storage; MCT_ST_OK, MCT_ST_UNSUPPORTED (no room) or MCT_ST_STORE. */
int mct_model_save(void);
/* Go back to the newest valid save; MCT_ST_OK, MCT_ST_NO_SAVE (model unchanged), or an error (model reset). */
int mct_model_load(void);
#if MCT_MODEL_FEAT
/* Raw windows (a model trained with `mcutrain train --features`): MCT_RAW_IN samples of type mct_raw_t. */
#define MCT_RAW_IN MCT_MODEL_RAW_IN
/* Predict from a raw window: the model computes its features (and their normalisation) first. */
void mct_model_predict_raw(const mct_raw_t *raw, float *y);
/* One training step on a raw window and its target; as mct_model_train. */
int mct_model_train_raw(const mct_raw_t *raw, const float *target, float *loss);
/* The network input (MCT_N_IN floats: normalised features) of a raw window into x. */
void mct_model_features(const mct_raw_t *raw, float *x);
#endif
/* Go back to the exported model: its parameters, no optimizer state, step 0. */
void mct_model_reset(void);
/* Training steps applied so far (kept across save and load). */
uint32_t mct_model_steps(void);

#ifdef __cplusplus
}
#endif

#endif /* MCUTRAIN_H */
