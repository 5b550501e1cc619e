/* model_flags.c - one training step of an exported model (its model.c and model.h) through the core, built with
 * the flags the export sets (mct.h: MCT_LAST_OP, MCT_REGULARIZE and the others) or with some of them changed:
 * prints mct_net_check's status, mct_train_step's status and whether the parameters changed
 * (tests/test_firmware_native.py, test_model_flags_guard_the_core). */
#include <stdio.h>
#include <string.h>

#include "model.h"

static float params[MCT_MODEL_N_PARAMS], start[MCT_MODEL_N_PARAMS];
static float state[MCT_MODEL_N_PARAMS * MCT_MODEL_SLOTS + 1];
static float arena[MCT_MODEL_ARENA], scratch[MCT_MODEL_SCRATCH];

int main(void) {
    float x[MCT_MODEL_N_IN], t[MCT_MODEL_N_OUT] = {0}, loss = 0.0f;
    for (int i = 0; i < MCT_MODEL_N_IN; i++) x[i] = 0.25f * (float)(i % 5) - 0.5f;
    t[0] = 1.0f;
    mct_model_load_init(params);
    memcpy(start, params, sizeof params);
    mct_train_state ts = mct_train_state_init();
    int check = mct_net_check(&mct_model);
    int step = mct_train_step(&mct_model, params, &mct_model_opt, state, &ts, MCT_MODEL_LOSS_KIND,
                              MCT_MODEL_LOSS_PARAM, x, t, 1, arena, scratch, MCT_MODEL_SCRATCH, &loss);
    printf("net_check %d train_step %d changed %d\n", check, step, memcmp(params, start, sizeof params) != 0);
    return 0;
}
