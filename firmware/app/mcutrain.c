/* mcutrain.c - the model-level API of mcutrain.h over the firmware's own model state (mct_app.c): the one
 * static model instance, its predictions, training steps and saves. */
#include "mcutrain.h"

static mct_app model;   /* the model instance: parameters, optimizer slots, trace arena, scratch */

int mct_model_init(void) {
    mct_app_init(&model);
    return model.loaded;
}

void mct_model_predict(const float *x, float *y) {
    float *in = model.arena + mct_model.in_off;
    for (uint16_t i = 0; i < MCT_MODEL_N_IN; i++) in[i] = x[i];
    const float *out = mct_app_predict(&model);
    for (uint16_t i = 0; i < MCT_MODEL_N_OUT; i++) y[i] = out[i];
}

int mct_model_train(const float *x, const float *target, float *loss) {
    float *in = model.arena + mct_model.in_off;
    for (uint16_t i = 0; i < MCT_MODEL_N_IN; i++) in[i] = x[i];
    for (uint16_t i = 0; i < MCT_MODEL_N_OUT; i++) model.target[i] = target[i];
    return mct_app_status(mct_app_train(&model, loss));
}

#if MCT_MODEL_FEAT
static void take_raw(const mct_raw_t *raw) {
    for (uint32_t i = 0; i < MCT_MODEL_RAW_IN; i++) model.raw[i] = raw[i];
    mct_app_features(&model);
}

void mct_model_predict_raw(const mct_raw_t *raw, float *y) {
    take_raw(raw);
    const float *out = mct_app_predict(&model);
    for (uint16_t i = 0; i < MCT_MODEL_N_OUT; i++) y[i] = out[i];
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
