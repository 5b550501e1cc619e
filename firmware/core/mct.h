/* mct.h - the mcutrain core: one C99 implementation of every layer, loss and optimizer,
 * compiled into the host trainer (Cython) and into the firmware.
 *
 * A network is a const table of layer descriptors (mct_layer) plus flat f32 buffers that the
 * caller owns: params, grads, optimizer state and a trace arena. Nothing here allocates or
 * keeps global state. Every kernel works on a batch of `nb` samples stored sample-major
 * ([nb][width]); a device simply uses nb = 1, so host and device run the same code and, built
 * with -ffp-contract=off, compute the same bits.
 */
#ifndef MCT_H
#define MCT_H

#include <stddef.h>
#include <stdint.h>

#include "mct_lists.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MCT_VERSION 1

/* The format versions (MCT_FORMAT_LIST): MCT_FORMAT_PROTOCOL, MCT_FORMAT_BLOB, MCT_FORMAT_MODEL. */
#define MCT_FORMAT_ENUM(NAME, VALUE) MCT_FORMAT_##NAME = VALUE,
enum mct_format { MCT_FORMAT_LIST(MCT_FORMAT_ENUM) MCT_FORMAT_END_ };
#undef MCT_FORMAT_ENUM

/* Firmware for one model compiles only what it uses (the exporter sets these build flags):
 *   MCT_OPT_ONLY=k   the one optimizer kind (enum mct_opt_kind) the device trains with;
 *   MCT_LOSS_ONLY=k  the one loss (enum mct_loss_kind) it trains on;
 *   MCT_SCHED_ONLY=k the one learning-rate schedule (enum mct_schedule) of its optimizer;
 *   MCT_OPS_MASK=m   the layer ops it uses: bit op (enum mct_op) set, plus bit 0 for frozen Dense
 *                    layers kept in flash and bit MCT_I8_WEIGHTS_BIT (31) for those with int8 weights
 *                    (MCT_STORE_I8); ops left out are rejected by mct_net_check;
 *   MCT_ACTS_MASK=m  the activations it uses: bit kind (enum mct_act);
 *   MCT_LAST_OP=op   the op of its last layer (mct_net_check rejects a table ending in another), so whether
 *                    training fuses Softmax and cross-entropy (mct_loss_fused) is known when compiling;
 *   MCT_REGULARIZE=0 its optimizer neither clips nor adds L1/L2 (mct_opt_asks_reg is 0; mct_train_step
 *                    refuses a config that asks for them with MCT_E_UNSUPPORTED).
 * Without them (the host) everything is compiled in. The host build also defines MCT_HOST_KERNELS
 * (batch paths that transpose into scratch, see gemm.c) and wider MCT_TILE_M / MCT_TILE_N. */
/* A library export (`mcutrain export --library`) writes these settings into mct_config.h next to the core,
 * since the Arduino IDE passes no build flags to a library. */
#if defined(__has_include)
#if __has_include("mct_config.h")
#include "mct_config.h"
#endif
#endif
#ifdef MCT_OPT_ONLY
#define MCT_OPT_KIND(k) ((void)(k), (uint8_t)(MCT_OPT_ONLY))
#else
#define MCT_OPT_KIND(k) (k)
#endif
#ifdef MCT_SCHED_ONLY
#define MCT_SCHED_KIND(k) ((void)(k), (uint8_t)(MCT_SCHED_ONLY))
#else
#define MCT_SCHED_KIND(k) (k)
#endif
#ifdef MCT_LOSS_ONLY
#define MCT_LOSS_KIND(k) ((void)(k), (uint8_t)(MCT_LOSS_ONLY))
#else
#define MCT_LOSS_KIND(k) (k)
#endif
#ifndef MCT_OPS_MASK
#define MCT_OPS_MASK 0xFFFFFFFFu
#endif
#ifndef MCT_ACTS_MASK
#define MCT_ACTS_MASK 0xFFFFu
#endif
#ifndef MCT_REGULARIZE
#define MCT_REGULARIZE 1
#endif
/* The MCT_OPS_MASK bit of int8-weight (MCT_STORE_I8) const layers (the ops stay below it). */
#define MCT_I8_WEIGHTS_BIT 31
/* A flag in a QDENSE / QCONV2D / QDWCONV2D shift word: requantize as TensorFlow Lite Micro (see MCT_OP_QDENSE). */
#define MCT_QSHIFT_TFLITE 0x40000000
/* Is layer op (or activation kind) compiled in? A constant for constant arguments. */
#define MCT_WITH_OP(op) ((((uint32_t)(MCT_OPS_MASK)) >> (op)) & 1u)
#define MCT_WITH_ACT(kind) ((((uint32_t)(MCT_ACTS_MASK)) >> (kind)) & 1u)

/* Small functions in loops must be inlined for the host's loops to vectorise (GCC, Clang). */
#if defined(__GNUC__)
#define MCT_INLINE inline __attribute__((always_inline))
#else
#define MCT_INLINE inline
#endif

/* Constant tables (exported parameters) live in flash. On AVR flash is a separate address space:
 * such data carries MCT_CONST (PROGMEM) and is read with mct_const_copy. */
#if defined(__AVR__)
#include <avr/pgmspace.h>
#define MCT_CONST PROGMEM
#define mct_const_copy(dst, src, bytes) memcpy_P((dst), (src), (bytes))
#else
#include <string.h>
#define MCT_CONST
#define mct_const_copy(dst, src, bytes) memcpy((dst), (src), (bytes))
#endif

/* Read a float from const memory (4-byte aligned offset into the blob). */
static inline float mct_cload_f32(const uint8_t *p) {
#if defined(__AVR__)
    union { uint32_t u; float f; } v;
    v.u = pgm_read_dword(p);
    return v.f;
#else
    float v;
    memcpy(&v, p, sizeof v);
    return v;
#endif
}
/* Read an int32 from const memory. */
static inline int32_t mct_cload_i32(const uint8_t *p) {
#if defined(__AVR__)
    return (int32_t)pgm_read_dword(p);
#else
    int32_t v;
    memcpy(&v, p, sizeof v);
    return v;
#endif
}
/* Read an int8 from const memory. */
static inline int8_t mct_cload_i8(const uint8_t *p) {
#if defined(__AVR__)
    return (int8_t)pgm_read_byte(p);
#else
    return (int8_t)*p;
#endif
}

/* Layer operations (mct_layer.op), from MCT_OP_LIST (mct_lists.h), which says what each computes. */
#define MCT_OP_ENUM(NAME, VALUE, STEM, CALL, IN_I8, OUT_I8) MCT_OP_##NAME = VALUE,
enum mct_op { MCT_OP_LIST(MCT_OP_ENUM) MCT_OP_END_ };
#undef MCT_OP_ENUM
/* Full-integer int8 ops (call QOP in MCT_OP_LIST; layer_quant.c), forward only: always frozen, storage
 * MCT_STORE_Q, no params (n_p = n_w = 0), constants in the const blob at byte offset p_off (4-byte aligned;
 * layouts below), and they come before the first trainable layer (mct_net_check). They read and/or write int8
 * tensors: in the arena an int8 tensor of n values takes mct_i8_floats(n) = ceil(n / 4) floats per sample;
 * sample s of a batch starts at byte 4 * ceil(n / 4) * s of the tensor's region. The network's input and
 * output and every non-Q op's input and output are f32, but for RES_BEGIN and RES_SHORTCUT of kind 1 (an int8
 * residual block), which carry int8 tensors. Rounding is always to nearest, ties away from zero;
 * zero points are clamped to [-128, 127] when read. A dL/dx asked for through them is 0 (a quantized block is
 * piecewise constant in its input).
 *   MCT_OP_QUANT    f32 -> int8: q = clamp(round(x * inv_scale) + zp, -128, 127), the product in f32 (NaN gives
 *                   -128). Blob: f32 inv_scale, i32 zp (8 bytes).
 *   MCT_OP_DEQUANT  int8 -> f32: y = (float)(q - zp) * scale. Blob: f32 scale, i32 zp (8 bytes).
 *   MCT_OP_QDENSE   int8 -> int8 dense, kind 0. Blob: i32 zx, i32 zy, i32 bias[n_out], i32 mult[n_out],
 *                   i32 shift[n_out], then int8 W[n_out][n_in] (row o = output o's weights), padded to
 *                   4 bytes. Per output o, in integers only:
 *                     acc = bias[o] + sum_i x[i] * W[o][i]     (the sum in int32, exact;
 *                           adding the bias saturates to +-(2^31 - 1))
 *                     y[o] = clamp(zy + round(acc * mult[o] / 2^shift[o]), -128, 127)
 *                   with the product in int64 and shift clamped to [1, 62]. The input zero point is
 *                   folded into the bias by the exporter; zx is kept for reference and the kernel does
 *                   not read it. The exporter makes the weights symmetric per output (zero point 0),
 *                   bias = round(b / (sx * sw[o])) - zx * sum_i W[o][i] (saturated to +-(2^31 - 1)) and
 *                   mult[o] / 2^shift[o] = sx * sw[o] / sy with mult in [2^30, 2^31).
 *                   A positive shift word with MCT_QSHIFT_TFLITE set (an imported .tflite) rounds as TensorFlow Lite
 *                   Micro's MultiplyByQuantizedMultiplier instead (its low 8 bits are the shift n, clamped to
 *                   [1, 62]): h = (acc * 2^max(31 - n, 0) * mult + (2^30 or 1 - 2^30 by the product's sign)) / 2^31
 *                   in int64, truncated (the left shift saturated to int32), then round(h / 2^max(n - 31, 0))
 *                   ties away from zero: two roundings, bit for bit as TFLM's reference kernels.
 *   MCT_OP_QLUT     int8 -> int8 elementwise table: y = T[x + 128]; kind = the activation it stands for
 *                   (informational). Blob: int8 T[256] (256 bytes).
 *   MCT_OP_QCONV2D  int8 -> int8 Conv2d, kind 0, the geometry of MCT_OP_CONV2D ("Spatial ops" below; padding taps
 *                   skipped, i.e. they stand for the real value 0, as TFLite's padding with the zero point). Blob:
 *                   i32 zx, i32 zy, i32 bias[c_out], i32 mult[c_out], i32 shift[c_out], then int8 W[c_out][kh][kw]
 *                   [c_in] (TFLite's OHWI; row o = output channel o's weights), padded to 4 bytes. Per output:
 *                     acc = bias[o] + sum_{taps inside, c} (x[iy][ix][c] - zx) * W[o][ky][kx][c]
 *                   (exact in int32: kh kw c_in <= 65535), then requantized as QDENSE's acc. The input zero point
 *                   is not folded into the bias (a window with padding taps has fewer terms).
 *   MCT_OP_QDWCONV2D int8 -> int8 depthwise Conv2d, kind 0, c_out = m c_in, as MCT_OP_DWCONV2D: output channel o
 *                   reads input channel o / m. Blob as QCONV2D's with W[kh][kw][c_out] (TFLite's 1HWO);
 *                   acc = bias[o] + sum_{taps inside} (x[iy][ix][o / m] - zx) * W[ky][kx][o], kh kw <= 65535.
 *   MCT_OP_QMAXPOOL2D int8 -> int8 max pooling as MCT_OP_MAXPOOL2D: the largest code of the taps inside the input;
 *                   the output has the input's scale and zero point. No blob.
 *   MCT_OP_QAVGPOOL2D int8 -> int8 average pooling as MCT_OP_AVGPOOL2D (global pooling: a window the size of the
 *                   input): the sum of the n codes of the taps inside the input, divided by n rounding to
 *                   nearest, ties away from zero (TFLite's), kh kw <= 65535; the input's scale and zero point.
 *                   No blob.
 *   MCT_OP_QRES_END the end of an int8 residual block (call NET, partners as MCT_OP_RES_END's; its RES_BEGIN and
 *                   RES_SHORTCUT have kind 1): y = x + s, x the main (or shortcut) body's output, s the input of
 *                   layer k, each int8 with its own scale and zero point, as TFLite's int8 ADD. Blob: i32 zx, i32
 *                   zs, i32 zy, i32 mult_x, shift_x, mult_s, shift_s, mult_y, shift_y, i32 lo, i32 hi (44 bytes).
 *                   Per element, with requant(a, m, n) = round(a * m / 2^n) as QDENSE's (the MCT_QSHIFT_TFLITE flag
 *                   included):
 *                     a = requant((x - zx) * 2^20, mult_x, shift_x) + requant((s - zs) * 2^20, mult_s, shift_s)
 *                     y = clamp(zy + requant(a, mult_y, shift_y), max(lo, -128), min(hi, 127))
 *                   (the sum in int64, saturated to +-(2^31 - 1)); the exporter takes mult_x / 2^shift_x = sx / (2m),
 *                   mult_s / 2^shift_s = ss / (2m), mult_y / 2^shift_y = 2m / (2^20 sy), m = max(sx, ss), and a
 *                   ReLU after the add fused as lo = zy.
 *   MCT_OP_QSOFTMAX int8 -> int8 softmax over the n_in (<= 511) values of a sample, kind 0, bit for bit TensorFlow
 *                   Lite Micro's reference int8 kernel (gemmlowp fixed point); the output has TFLite's fixed scale
 *                   1/256 and zero point -128. Blob: i32 mult, i32 left shift (clamped to [0, 31]), i32 diff_min
 *                   (12 bytes), computed as TFLite's Prepare does from beta and the input scale sx: mult 2^-shift
 *                   2^31 = beta sx 2^26 (capped at 2^31 - 1), diff_min = -floor(31 2^26 / 2^shift). Per sample, with
 *                   m = the largest code and d = x - m: values with d < diff_min give -128; the others give
 *                   clamp(round(256 e(d) / S) - 128), e(d) = exp(d beta sx) from d 2^shift mult / 2^31 as a Q5.26
 *                   number through gemmlowp's exp_on_negative_values (Q0.31), S = the sum of the e(d) / 2^12 (Q12.19)
 *                   and 1 / S by gemmlowp's Newton-Raphson reciprocal, every rounding as gemmlowp's (layer_qsoftmax.c). */
/* Spatial ops (MCT_OP_CONV2D ... MCT_OP_BATCHNORM) read and write channels-last tensors, as TFLite and CMSIS-NN do:
 * a sample is [h][w][c] (a 1-D series [t][c] is h = 1), so n_in = h_in * w_in * c_in and n_out = h_out * w_out *
 * c_out. A window of kh x kw taps starts at row oy * sh - pt and column ox * sw - pl of the input; taps outside the
 * input (padding) are skipped, never read as zeros; the padding below and right follows from the output size and is
 * less than the window. Every sum runs over the taps row by row, column by column, channel by channel, ascending.
 *   MCT_OP_CONV2D    y[oy][ox][o] = sum_{ky,kx,c} x[iy][ix][c] W[ky][kx][c][o] (+ b[o]); parameters W [kh][kw][c_in]
 *                    [c_out] (connection weights; a 1x1 convolution's W is a Dense layer's), then b [c_out] if kind 1.
 *   MCT_OP_DWCONV2D  y[oy][ox][o] = sum_{ky,kx} x[iy][ix][o / m] W[ky][kx][o] (+ b[o]), m = c_out / c_in; W [kh][kw]
 *                    [c_out] (TFLite's depthwise layout), then b [c_out] if kind 1.
 *   MCT_OP_MAXPOOL2D y = the largest tap (the first of equal ones gets the gradient); c_out = c_in.
 *   MCT_OP_AVGPOOL2D y = (sum of the taps inside the input) / their count; c_out = c_in.
 *   MCT_OP_BATCHNORM y = g[c] (x - mean[c]) / sqrt(var[c] + alpha) + b[c] over the channels c of [..][c_in];
 *                    parameters g, b, then the running mean and variance (c_in each; only g and b are learned).
 *                    kind 0 uses the running statistics; kind 1 (host training) the batch's, over all samples and
 *                    positions, and its backward pass moves the running ones by momentum beta (the variance unbiased). */

/* Ops (bit op) whose input / output is an int8 tensor, and the full-integer ops, as bit masks. */
#define MCT_OP_READS_I8_BIT(NAME, VALUE, STEM, CALL, IN_I8, OUT_I8) MCT_BIT(IN_I8, VALUE)
#define MCT_OP_WRITES_I8_BIT(NAME, VALUE, STEM, CALL, IN_I8, OUT_I8) MCT_BIT(OUT_I8, VALUE)
#define MCT_CALL_IS_QOP_PARAM 0
#define MCT_CALL_IS_QOP_CONST 0
#define MCT_CALL_IS_QOP_QOP 1
#define MCT_CALL_IS_QOP_NET 0
/* full-integer: the QOP ops, and every op that reads or writes an int8 tensor (QRES_END, call NET) */
#define MCT_OP_QOP_BIT(NAME, VALUE, STEM, CALL, IN_I8, OUT_I8) \
    MCT_BIT(MCT_CALL_IS_QOP_##CALL || (IN_I8) || (OUT_I8), VALUE)
#define MCT_CALL_HAS_CONST_PARAM 0
#define MCT_CALL_HAS_CONST_CONST 1
#define MCT_CALL_HAS_CONST_QOP 0
#define MCT_CALL_HAS_CONST_NET 0
#define MCT_OP_CONST_BIT(NAME, VALUE, STEM, CALL, IN_I8, OUT_I8) MCT_BIT(MCT_CALL_HAS_CONST_##CALL, VALUE)
#define MCT_OPS_READ_I8 (0u MCT_OP_LIST(MCT_OP_READS_I8_BIT))
#define MCT_OPS_WRITE_I8 (0u MCT_OP_LIST(MCT_OP_WRITES_I8_BIT))
#define MCT_OPS_QOP (0u MCT_OP_LIST(MCT_OP_QOP_BIT))
#define MCT_OPS_CONST_STORAGE (0u MCT_OP_LIST(MCT_OP_CONST_BIT))   /* may keep their parameters in the blob */

/* Floats of arena per sample an int8 tensor of n values occupies (see MCT_OP_QUANT). */
static inline uint32_t mct_i8_floats(uint32_t n) { return (n + 3u) / 4u; }

/* Where a layer's parameters live (mct_layer.storage). Only frozen layers of the ops with const storage (Dense/Linear,
 * Conv2d, depthwise Conv2d: call CONST in MCT_OP_LIST) may live in the const blob (net->cdata, flash on a device), at
 * byte offset p_off:
 *   MCT_STORE_F32: the parameters as f32 in their RAM layout (Dense: W [n_in][n_out], then b [n_out] for Linear).
 *   MCT_STORE_I8 of a Conv2d / depthwise Conv2d: scale f32 [c_out], then b f32 [c_out] if kind 1, then W int8 in
 *                  the f32 layout ([kh][kw][c_in][c_out] / [kh][kw][c_out]), W ~= W8 * scale[o]. The input stays
 *                  f32: y[o] = (the f32 kernel's sum of x * (float)W8, in its order) * scale[o] (+ b[o]).
 *   MCT_STORE_I8 of a Dense:  scale f32 [n_out], then b f32 [n_out] for Linear, then W int8 [n_out][n_in] (row o =
 *                  output o's weights, as QDENSE's). Each sample's input is quantized once, symmetric:
 *                  m = max |x|, q[i] = round(x[i] * (127 / m))
 *                  (ties to even, in [-127, 127]; q = 0 when m <= 1e-30), then in integers and one float
 *                  step per output: y[o] = (float)(sum_i q[i] * W[o][i]) * ((m / 127) * scale[o]) (+ b[o]);
 *                  a sample with an inf or NaN input gives NaN outputs.
 *   MCT_STORE_Q:   the constants of a full-integer op (MCT_OP_QUANT ... MCT_OP_QLUT, layouts there);
 *                  those ops always have this storage. */
#define MCT_STORAGE_ENUM(NAME, VALUE) MCT_STORE_##NAME = VALUE,
enum mct_storage { MCT_STORAGE_LIST(MCT_STORAGE_ENUM) MCT_STORE_END_ };
#undef MCT_STORAGE_ENUM

/* Elementwise activations (kind of MCT_OP_ACT, gate of MCT_OP_GLU), from MCT_ACT_LIST. */
#define MCT_ACT_ENUM(NAME, VALUE, LAYER, GATE) MCT_ACT_##NAME = VALUE,
enum mct_act { MCT_ACT_LIST(MCT_ACT_ENUM) MCT_ACT_END_ };
#undef MCT_ACT_ENUM
/* Activation kinds an ACT layer may have, and GLU gates, as bit masks. */
#define MCT_ACT_LAYER_BIT(NAME, VALUE, LAYER, GATE) MCT_BIT(LAYER, VALUE)
#define MCT_ACT_GATE_BIT(NAME, VALUE, LAYER, GATE) MCT_BIT(GATE, VALUE)
#define MCT_ACTS_LAYER (0u MCT_ACT_LIST(MCT_ACT_LAYER_BIT))
#define MCT_ACTS_GATE (0u MCT_ACT_LIST(MCT_ACT_GATE_BIT))

/* One layer of a network: the fields of MCT_LAYER_FIELDS (mct_lists.h), which documents them. */
typedef struct mct_layer { MCT_LAYER_FIELDS(MCT_FIELD_MEMBER) } mct_layer;

/* A network: the layer table and the sizes every buffer must have. On AVR the layer table lives in
 * flash (MCT_CONST) and is read through mct_get_layer. */
typedef struct mct_net {
    const mct_layer *layers;
    uint16_t n_layers;
    uint16_t n_in;        /* network input width */
    uint16_t n_out;       /* network output width */
    uint16_t max_width;   /* widest layer input or output (gradient buffers when dL/dx is wanted) */
    uint32_t n_params;    /* floats in params (and in grads) */
    uint32_t arena;       /* floats of trace arena per sample */
    uint32_t in_off;      /* arena offset of the network input */
    uint32_t out_off;     /* arena offset of the network output */
    const uint8_t *cdata; /* const blob of layers not kept in RAM (MCT_CONST memory), or NULL */
    uint32_t cdata_size;  /* bytes in cdata */
} mct_net;

/* Statuses returned by the checked entry points, from MCT_STATUS_LIST. */
#define MCT_STATUS_ENUM(NAME, VALUE) MCT_##NAME = VALUE,
enum mct_status { MCT_STATUS_LIST(MCT_STATUS_ENUM) MCT_STATUS_END_ };
#undef MCT_STATUS_ENUM

/* ---- losses ---- */
#define MCT_LOSS_ENUM(NAME, VALUE) MCT_LOSS_##NAME = VALUE,
enum mct_loss_kind { MCT_LOSS_LIST(MCT_LOSS_ENUM) MCT_LOSS_END_ };
#undef MCT_LOSS_ENUM

/* Loss of one sample (y = output, t = target, n values); dL/dy goes to grad (n floats, not NULL). */
float mct_loss(uint8_t kind, float param, const float *y, const float *t, uint16_t n, float *grad);
/* Losses of nb samples of n values each (rows of y, t, grad): returns their sum in sample order, each
 * sample's loss into losses[s] unless NULL; the same bits as mct_loss sample by sample. */
float mct_loss_batch(uint8_t kind, float param, const float *y, const float *t, uint16_t n, uint32_t nb, float *grad,
                     float *losses);

/* ---- optimizers ---- */
#define MCT_OPT_ENUM(NAME, VALUE, SLOTS) MCT_OPT_##NAME = VALUE,
enum mct_opt_kind { MCT_OPT_LIST(MCT_OPT_ENUM) MCT_OPT_END_ };
#undef MCT_OPT_ENUM
#define MCT_SCHEDULE_ENUM(NAME, VALUE) MCT_LR_##NAME = VALUE,
enum mct_schedule { MCT_SCHEDULE_LIST(MCT_SCHEDULE_ENUM) MCT_LR_END_ };
#undef MCT_SCHEDULE_ENUM

/* Optimizer configuration: the fields of MCT_OPT_FIELDS (mct_lists.h). */
typedef struct mct_opt { MCT_OPT_FIELDS(MCT_FIELD_MEMBER) } mct_opt;

/* Training progress that the optimizer needs besides its per-parameter slots (MCT_TRAIN_STATE_FIELDS). */
typedef struct mct_train_state { MCT_TRAIN_STATE_FIELDS(MCT_FIELD_MEMBER) } mct_train_state;

/* ---- saved state: the firmware's SAVE/LOAD (docs/protocol.md) ----
 * Two slots in the board's storage, each a header of MCT_SAVE_HEADER bytes (u32 MCT_SAVE_MAGIC, u32 sequence
 * number, u32 blob bytes, u32 CRC-32 of the blob, the 8-byte model hash, u32 blob format version
 * MCT_FORMAT_BLOB) followed by the blob: the RAM parameters, the optimizer slots (slots * n_params floats)
 * and the train state. A save of another blob version is not loaded. */
#define MCT_SAVE_MAGIC 0x5354434Du /* "MCTS" */
#define MCT_SAVE_HEADER 28u
#define MCT_SAVE_BLOB_BYTES(n_params, slots) \
    ((uint32_t)(sizeof(float) * (n_params) * (1u + (slots)) + sizeof(mct_train_state)))
#define MCT_SAVE_SLOT_BYTES(n_params, slots) (MCT_SAVE_HEADER + MCT_SAVE_BLOB_BYTES(n_params, slots))

/* Values derived once per update from the optimizer, the state and the loss. */
typedef struct mct_step {
    float lr;               /* learning rate of this step (schedule, warm-up, loss scaling applied) */
    float sim;              /* momentum multiplier from the similarity penalty (1 = none) */
    float c1, c2;           /* Adam bias corrections 1 - beta1^t, 1 - beta2^t */
} mct_step;

/* Per-parameter optimizer slots (0, 1 or 2) of an optimizer kind. */
uint8_t mct_opt_slots(uint8_t kind);
/* Initial train state (step 0, Adam powers 1). */
mct_train_state mct_train_state_init(void);
/* Learning rate at a step from the schedule and the warm-up. */
float mct_lr_at(const mct_opt *o, uint32_t step);
/* Prepare one update: learning rate, loss scaling, Adam corrections (advances nothing). */
mct_step mct_step_begin(const mct_opt *o, const mct_train_state *ts, float loss);
/* Does the optimizer config ask for gradient clipping or L1/L2 regularization? (1 = yes) */
int mct_opt_asks_reg(const mct_opt *o);
/* The optimizer state slot that holds the velocity (0 MOMENTUM, 1 RMSPROP_MOMENTUM), -1 for kinds without one. */
int mct_opt_velocity_slot(const mct_opt *o);
/* Momentum multiplier of the similarity penalty from the velocity and the summed grads (1 when off). */
float mct_opt_similarity(const mct_opt *o, const float *state, const float *grads, uint32_t n_params);
/* Advance the train state after an update. */
void mct_step_end(const mct_opt *o, mct_train_state *ts);

/* Where a backward pass sends parameter gradients: written to grads (STORE), or applied to the
 * parameters at once (APPLY, when grads is NULL). */
typedef struct mct_sink {
    float *grads;           /* STORE: gradient sums over the batch, net-wide offsets */
    const mct_opt *opt;     /* APPLY: optimizer, step values and slots */
    const mct_step *step;
    float *state;           /* APPLY: optimizer slots, n_params floats each */
    uint32_t n_params;      /* APPLY: distance between slots */
    float div;              /* APPLY: gradient sums are divided by this (the batch size) */
} mct_sink;

/* ---- network ---- */
/* Arena offset (in_off, or aux_off when aux) of layer l, read without copying the whole layer. */
static inline uint32_t mct_layer_off(const mct_net *net, uint16_t l, int aux) {
    const uint32_t *f = aux ? &net->layers[l].aux_off : &net->layers[l].in_off;
#if defined(__AVR__)
    return pgm_read_dword(f);
#else
    return *f;
#endif
}
/* Layer l of a network, copied into *tmp when the table lives in const memory (AVR flash); returns it. */
static inline const mct_layer *mct_get_layer(const mct_net *net, uint16_t l, mct_layer *tmp) {
#if defined(__AVR__)
    mct_const_copy(tmp, &net->layers[l], sizeof *tmp);
    return tmp;
#else
    (void)tmp;
    return &net->layers[l];
#endif
}
/* What a layer needs besides its input region, as its op's own code computes it (mct_<stem>_size). */
typedef struct mct_layer_size {
    uint32_t params;    /* parameter count (n_p must be this) */
    uint32_t aux;       /* floats of aux trace per sample */
    uint32_t out;       /* floats of arena per sample its output takes (an int8 tensor: mct_i8_floats) */
    uint32_t scratch;   /* floats of backward scratch for the nb samples asked for */
    uint64_t consts;    /* bytes in the const blob (a const-stored Dense or convolution, a full-integer op), else 0 */
} mct_layer_size;
/* Sizes of layer L for nb samples (host: room for transposes) into *s; returns 1 when its op is known and compiled in and its fields are valid for it, else 0. */
int mct_layer_size_of(const mct_layer *L, uint32_t nb, int host, mct_layer_size *s);
/* Check a layer table for consistent sizes, parameter counts and arena offsets: MCT_OK or MCT_E_NET. */
int mct_net_check(const mct_net *net);
/* Floats of scratch mct_backward needs for nb samples (host: room for transposes; with_gin: dL/dx too). */
uint32_t mct_scratch_size(const mct_net *net, uint32_t nb, int host, int with_gin);

/* Forward pass of nb samples: copies x [nb][n_in] into the arena; returns the output [nb][n_out] in the arena. */
float *mct_forward(const mct_net *net, const float *params, const float *x, float *arena, uint32_t nb);
/* Forward pass of layers [first, end) of one sample on the arena's contents: their output, or NULL if a region of one of them reaches past arena_n floats. */
float *mct_forward_layers(const mct_net *net, const float *params, float *arena, uint32_t arena_n, uint16_t first,
                          uint16_t end);
/* One value to int8 as QUANT computes it, with a QUANT layer's constants c (f32 1/scale, i32 zero point). */
int8_t mct_quantize_value(const uint8_t *c, float x);
/* One int8 value to f32 as DEQUANT computes it, with a DEQUANT layer's constants c (f32 scale, i32 zero point). */
float mct_dequantize_value(const uint8_t *c, int8_t q);
/* Backward pass after mct_forward: gout [nb][n_out] is dL/dy; writes dL/dx to gin unless NULL; sends the
 * parameter gradients of trainable layers to sink (APPLY mode updates params); scratch_n >= mct_scratch_size. */
void mct_backward(const mct_net *net, float *params, float *arena, uint32_t nb, const float *gout, float *gin,
                  const mct_sink *sink, float *scratch, uint32_t scratch_n, int host);
/* mct_backward from the output of layer top - 1 (gout [nb][its n_out] is dL/d that output; top = n_layers is
 * mct_backward, top = 0 copies gout to gin): the layers top .. n_layers - 1 are skipped. */
void mct_backward_from(const mct_net *net, uint16_t top, float *params, float *arena, uint32_t nb, const float *gout,
                       float *gin, const mct_sink *sink, float *scratch, uint32_t scratch_n, int host);
/* Does the gradient of loss kind start below the network's last layer? Cross-entropy after a final Softmax:
 * the loss and its gradient w.r.t. the Softmax's input come in one step, (p sum(t) - t) / T (1 = yes). */
int mct_loss_fused(const mct_net *net, uint8_t kind);
/* Summed loss of nb samples after mct_forward (targets t [nb][n_out]) and its gradient into g [nb][n_out]:
 * dL/dy, or, when mct_loss_fused, dL/d(the last layer's input); training starts its backward pass from there. */
float mct_net_loss(const mct_net *net, const float *arena, uint32_t nb, uint8_t kind, float param, const float *t,
                   float *g);
/* After mct_forward: mct_net_loss and the backward pass from its gradient (gin, sink as for mct_backward;
 * scratch_n >= mct_scratch_size(net, nb, host, gin != NULL) + n_out * nb, the last n_out * nb floats take the
 * loss gradient); returns the summed loss. */
float mct_loss_backward(const mct_net *net, float *params, float *arena, uint32_t nb, uint8_t kind, float param,
                        const float *t, float *gin, const mct_sink *sink, float *scratch, uint32_t scratch_n,
                        int host);
/* Apply gradient sums (divided by div) to the parameters of every trainable layer. */
void mct_apply(const mct_net *net, const mct_opt *o, const mct_step *s, float *params, const float *grads,
               float *state, float div);
/* mct_apply for the parameters with indices in [j0, j1) only (each parameter's update is its own: parts of the
 * range may run on several threads). */
void mct_apply_part(const mct_net *net, const mct_opt *o, const mct_step *s, float *params, const float *grads,
                    float *state, float div, uint32_t j0, uint32_t j1);
/* Forward, loss and backward of nb samples with gradient sums stored in grads; returns the summed loss
 * (scratch as for mct_train_step, with host's transposes if host). */
float mct_batch_grads(const mct_net *net, const float *params, uint8_t loss_kind, float loss_param,
                      const float *x, const float *t, uint32_t nb, float *arena, float *scratch,
                      uint32_t scratch_n, int host, float *grads);
/* Are all n values finite? (1 = yes) */
int mct_all_finite(const float *v, uint32_t n);
/* Finish an update from gradient sums over nb samples and their mean loss: a non-finite loss
 * (MCT_E_NONFINITE) or gradient (MCT_E_NONFINITE_GRAD) changes nothing, else the similarity penalty,
 * the apply and the step advance follow (MCT_OK). */
int mct_update(const mct_net *net, float *params, const mct_opt *o, float *state, mct_train_state *ts,
               const float *grads, uint32_t nb, float mean_loss);
/* mct_update up to the apply: the checks (MCT_E_NONFINITE, MCT_E_NONFINITE_GRAD) or MCT_OK and the step's
 * values in *s; then mct_apply (or its parts) and mct_step_end finish it. */
int mct_update_begin(const mct_net *net, const mct_opt *o, const float *state, const mct_train_state *ts,
                     const float *grads, float mean_loss, mct_step *s);
/* One training update on nb samples that applies each gradient as soon as it is known, with no grads buffer (the
 * device's update; scratch: mct_scratch_size(net, nb, 0, 0) + n_out * nb floats, the last n_out * nb hold the
 * loss gradient; a momentum optimizer with the similarity penalty needs the summed gradient first:
 * MCT_E_UNSUPPORTED, use mct_batch_grads + mct_update). The mean loss goes to *loss; a non-finite input or target
 * returns MCT_E_NONFINITE_INPUT, a non-finite loss MCT_E_NONFINITE, and params and state stay untouched. */
int mct_train_step(const mct_net *net, float *params, const mct_opt *o, float *state, mct_train_state *ts,
                   uint8_t loss_kind, float loss_param, const float *x, const float *t, uint32_t nb,
                   float *arena, float *scratch, uint32_t scratch_n, float *loss);

#ifdef __cplusplus
}
#endif
#endif /* MCT_H */
