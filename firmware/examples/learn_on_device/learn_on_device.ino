// learn_on_device.ino - mcutrain's Arduino example: the board learns by itself from its own readings, with
// no host attached. The model is the one `mcutrain export --library` put into this library.
//
// The sensor here is synthetic (replace read_sensor() with analogRead() of yours); the label comes from a
// pin (LABEL_PIN: a button, a second sensor's comparator...) or, with LABEL_PIN -1, from a rule (class 1
// when the first reading exceeds the second).
//
// A model with a feature pipeline (`mcutrain train --features ...`) learns from whole raw windows: the
// board's sensor fills one through port_sensor_read(), the hook `mcutrain collect` captures through (define
// it in your sketch: fill dst with the n bytes of the next window, return 1); without one the example makes
// synthetic windows of noise at a random level. The model computes its own features on the board. The
// rule then: class 1 when the window's mean absolute sample exceeds a quarter of full scale (LEVEL). Every step trains once; every REPORT steps the sketch prints
// the mean loss of those steps on Serial, and every SAVE_EVERY steps it saves what it learned to EEPROM
// (double-buffered with a CRC: a power cut loses nothing), so a reset carries on where it stopped.
#include <mcutrain.h>

#ifndef LABEL_PIN
#define LABEL_PIN -1       // a digital pin to read the label from (HIGH: class 1), or -1 for the rule
#endif
#define REPORT 100         // steps per printed line
#define SAVE_EVERY 1000    // steps between saves

static uint32_t seed = 0x2545F491u;
static float loss_sum = 0.0f;
static uint16_t in_window = 0;

#if !MCT_MODEL_FEAT && MCT_N_IN < 2
#error "this example's labelling rule needs a model with two inputs or more"
#endif

// A reading of the synthetic sensor, in [-1, 1).
float read_sensor() {
    seed ^= seed << 13;
    seed ^= seed >> 17;
    seed ^= seed << 5;
    return (float)(seed >> 8) * (1.0f / 8388608.0f) - 1.0f;
}

#if MCT_MODEL_FEAT
extern "C" int port_sensor_read(void *dst, uint32_t n);   // the sensor hook (mct_port.h)

static mct_raw_t window[MCT_RAW_IN];
// full scale of a raw sample: int16 audio samples, or floats (motion) in [-1, 1)
static const float FULL_SCALE = sizeof(mct_raw_t) == 2 ? 32767.0f : 1.0f;
#ifndef LEVEL
#define LEVEL (0.25f * FULL_SCALE)
#endif

// The next window: the board's sensor when it has one ready, else synthetic noise at a random level.
void read_window() {
    if (port_sensor_read(window, sizeof window)) return;
    float level = 0.5f * (read_sensor() + 1.0f);                   // in [0, 1)
    for (uint16_t i = 0; i < MCT_RAW_IN; i++) window[i] = (mct_raw_t)(level * FULL_SCALE * read_sensor());
}

// The label of the window: from LABEL_PIN, or the rule (its mean absolute sample above LEVEL).
uint8_t read_window_label() {
#if LABEL_PIN >= 0
    return digitalRead(LABEL_PIN) == HIGH ? 1 : 0;
#else
    float sum = 0.0f;
    for (uint16_t i = 0; i < MCT_RAW_IN; i++) sum += window[i] < 0 ? -(float)window[i] : (float)window[i];
    return sum > LEVEL * MCT_RAW_IN ? 1 : 0;
#endif
}
#endif

// The label of the sample x: from LABEL_PIN, or the rule.
uint8_t read_label(const float *x) {
#if LABEL_PIN >= 0
    (void)x;
    return digitalRead(LABEL_PIN) == HIGH ? 1 : 0;
#else
    return x[0] > x[1] ? 1 : 0;
#endif
}

void setup() {
    Serial.begin(115200);
#if LABEL_PIN >= 0
    pinMode(LABEL_PIN, INPUT_PULLUP);
#endif
    int loaded = mct_model_init();   // the last save if there is one, else the exported model
    Serial.print(F("mcutrain: model ready, "));
    Serial.println(loaded ? F("carrying on from the last save") : F("as exported"));
}

void loop() {
    float target[MCT_N_OUT], loss;
#if MCT_MODEL_FEAT
    read_window();
    uint8_t c = read_window_label();
#else
    float x[MCT_N_IN];
    for (uint16_t i = 0; i < MCT_N_IN; i++) x[i] = read_sensor();
    uint8_t c = read_label(x);
#endif
    for (uint16_t j = 0; j < MCT_N_OUT; j++) target[j] = 0.0f;
    target[MCT_N_OUT > 1 ? c : 0] = MCT_N_OUT > 1 ? 1.0f : (float)c;
#if MCT_MODEL_FEAT
    if (mct_model_train_raw(window, target, &loss) != MCT_ST_OK) return;   // a bad window: the model is unchanged
#else
    if (mct_model_train(x, target, &loss) != MCT_ST_OK) return;   // a bad reading: the model is unchanged
#endif
    loss_sum += loss;
    if (++in_window == REPORT) {
        Serial.print(F("step "));
        Serial.print(mct_model_steps());
        Serial.print(F(" loss "));
        Serial.println(loss_sum / REPORT, 6);
        loss_sum = 0.0f;
        in_window = 0;
    }
    if (mct_model_steps() % SAVE_EVERY == 0) {
        int st = mct_model_save();
        Serial.print(F("saved: "));
        Serial.println(st == MCT_ST_OK ? F("ok") : F("failed"));
    }
}
