/* mcutrain.c - the model-level API of mcutrain.h over the firmware's own model state (mct_app.c): the one
 * static model instance, its predictions, training steps and saves. */
#include "mcutrain.h"

#include <string.h>

static mct_app model;   /* the model instance: parameters, optimizer slots, trace arena, scratch */

int mct_model_init(void) {
    mct_app_init(&model);
    return model.loaded;
}

/* The outputs of a prediction on the input in the model into y; NaN if the core refused the layer table. */
static void predict_into(float *y) {
    int ok = mct_app_predict(&model) == MCT_OK;
    const uint32_t nan_bits = 0x7FC00000u;
    float nan;
    memcpy(&nan, &nan_bits, 4);
    for (uint16_t i = 0; i < MCT_MODEL_N_OUT; i++) y[i] = ok ? mct_app_output(&model, i) : nan;
}

void mct_model_predict(const float *x, float *y) {
    for (uint16_t i = 0; i < MCT_MODEL_N_IN; i++) mct_app_input(&model, i, x[i]);
    predict_into(y);
}

int mct_model_train(const float *x, const float *target, float *loss) {
#if MCT_MODEL_INT8_IO   /* no target buffer: mct_app_train refuses */
    (void)x; (void)target;
#else
    for (uint16_t i = 0; i < MCT_MODEL_N_IN; i++) mct_app_input(&model, i, x[i]);
    for (uint16_t i = 0; i < MCT_MODEL_N_OUT; i++) model.target[i] = target[i];
#endif
    return mct_app_status(mct_app_train(&model, loss));
}

#if MCT_MODEL_FEAT
static void take_raw(const mct_raw_t *raw) {
    for (uint32_t i = 0; i < MCT_MODEL_RAW_IN; i++) model.raw[i] = raw[i];
    mct_app_features(&model);
}

void mct_model_predict_raw(const mct_raw_t *raw, float *y) {
    take_raw(raw);
    predict_into(y);
}

int mct_model_train_raw(const mct_raw_t *raw, const float *target, float *loss) {
    take_raw(raw);
    for (uint16_t i = 0; i < MCT_MODEL_N_OUT; i++) model.target[i] = target[i];
    return mct_app_status(mct_app_train(&model, loss));
}

void mct_model_features(const mct_raw_t *raw, float *x) {
    take_raw(raw);
    const float *in = model.arena + mct_model.in_off;
    for (uint16_t i = 0; i < MCT_MODEL_N_IN; i++) x[i] = in[i];
}
#endif

int mct_model_save(void) {
    uint32_t seq;
    return mct_app_save(&model, &seq);
}

int mct_model_load(void) {
    uint32_t seq;
    int st = mct_app_load(&model, &seq);
    if (st != MCT_ST_OK && st != MCT_ST_NO_SAVE && st != MCT_ST_UNSUPPORTED) mct_app_reset(&model);
    return st;
}

void mct_model_reset(void) { mct_app_reset(&model); }

uint32_t mct_model_steps(void) { return model.ts.step; }
