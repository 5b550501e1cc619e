/* mct_lists.h - every list of the core, once: layer ops, activations, losses, optimizers, storage modes,
 * learning-rate schedules, statuses, and the fields of the structs the host fills in byte for byte.
 *
 * Each list is an X-macro: MCT_<LIST>(X) calls X once per entry, in value order. mct.h builds the C enums
 * and structs from them, net.c the dispatch over ops, mct_facts.h the name tables the host trainer reads
 * (so Python's enums and numpy dtypes come from here too). To add an entry, add it here and write its
 * code; nothing else lists them.
 */
#ifndef MCT_LISTS_H
#define MCT_LISTS_H

/* Layer ops (mct_layer.op): X(NAME, value, stem, call, reads_i8, writes_i8).
 *   stem       the op's kernels are mct_<stem>_forward / _backward, its facts mct_<stem>_check (are the
 *              layer's op-specific fields valid) and mct_<stem>_size (parameters, aux trace, scratch,
 *              const bytes), all in the op's own layer_*.c file;
 *   call       how net.c calls the kernels (the MCT_CALL_* shapes in net.c):
 *              PARAM  forward(L, p, x, y, aux, nb), backward(L, p, &b); p = the layer's parameters in RAM;
 *              CONST  as PARAM, and a frozen layer kept in the const blob (storage F32 or I8, compiled in
 *                     with bit 0 of MCT_OPS_MASK) runs mct_<stem>_const_forward(L, c, x, y, nb) and
 *                     mct_<stem>_const_backward(L, c, &b), c = its bytes in the blob;
 *              QOP    a full-integer op: forward(L, c, x, y, nb), backward is mct_qop_backward;
 *              NET    reads another layer's regions: forward(net, L, x, y, arena, nb),
 *                     backward(net, L, arena, &b) (residual blocks); one that reads or writes int8 (QRES_END) is
 *                     a full-integer op as the QOP ones (storage Q, constants at net->cdata + p_off, frozen);
 *   reads_i8 / writes_i8  1 when the op's input / output is an int8 tensor in the arena.
 * What each op computes is described at its entry; the byte layouts of the const blob at enum mct_storage
 * (mct.h). Ops are numbered from 1 (bit 0 of MCT_OPS_MASK is the const-blob Dense) and stay below 31
 * (bit 31: int8 weights, MCT_I8_WEIGHTS_BIT). */
#define MCT_OP_LIST(X)                                                                                        \
    /* y = x W (+ b if kind == 1); W is [n_in][n_out] row-major, then b[n_out] */                             \
    X(DENSE, 1, dense, CONST, 0, 0)                                                                           \
    /* y = x + b */                                                                                           \
    X(BIAS, 2, bias, PARAM, 0, 0)                                                                             \
    /* elementwise activation, kind = enum mct_act, alpha = leaky slope */                                    \
    X(ACT, 3, act, PARAM, 0, 0)                                                                               \
    /* y = softmax(x / T), alpha = T */                                                                       \
    X(SOFTMAX, 4, softmax, PARAM, 0, 0)                                                                       \
    /* y = x * sigmoid(beta * x), beta[n] learned */                                                          \
    X(SWISH, 5, swish, PARAM, 0, 0)                                                                           \
    /* y = act(x Wg + bg) * (x Wv + bv), kind = gate (enum mct_act), alpha = leaky slope */                   \
    X(GLU, 6, glu, PARAM, 0, 0)                                                                               \
    /* y = d * x, d[n] learned */                                                                             \
    X(DIAG, 7, diag, PARAM, 0, 0)                                                                             \
    /* y = s * x, one learned scalar s */                                                                     \
    X(SCALE, 8, scale, PARAM, 0, 0)                                                                           \
    /* y = g * x / sqrt(mean(x^2) + eps), g[n] learned, alpha = eps */                                        \
    X(RMSNORM, 9, rmsnorm, PARAM, 0, 0)                                                                       \
    /* y = g * tanh(a * x) + b: scalar a, g[n], b[n] learned */                                               \
    X(DYT, 10, dyt, PARAM, 0, 0)                                                                              \
    /* single-channel valid cross-correlation, k = filter size, n_out = n_in - k + 1 */                       \
    X(CONV1D, 11, conv1d, PARAM, 0, 0)                                                                        \
    /* start of a residual block: identity (its output is its input); k = index of its RES_END; kind 1: an     \
     * int8 block (its end is a QRES_END): it carries int8 tensors (see "Full-integer int8 ops" in mct.h) */   \
    X(RES_BEGIN, 12, res_begin, NET, 0, 0)                                                                    \
    /* end of a residual block: y = x + the input of layer k, its RES_BEGIN (y = body(x) + x) or, with a      \
     * projection, its RES_SHORTCUT (y = body(x) + shortcut(x)) */                                            \
    X(RES_END, 13, res_end, NET, 0, 0)                                                                        \
    /* f32 -> int8 (see "Full-integer int8 ops" in mct.h) */                                                  \
    X(QUANT, 14, quantize, QOP, 0, 1)                                                                         \
    /* int8 -> f32 */                                                                                         \
    X(DEQUANT, 15, dequantize, QOP, 1, 0)                                                                     \
    /* int8 -> int8 dense with integer requantization */                                                      \
    X(QDENSE, 16, qdense, QOP, 1, 1)                                                                          \
    /* int8 -> int8 elementwise table */                                                                      \
    X(QLUT, 17, qlut, QOP, 1, 1)                                                                              \
    /* 2-D convolution, channels last (see "Spatial ops" in mct.h); kind 1: with bias */                      \
    X(CONV2D, 18, conv2d, CONST, 0, 0)                                                                        \
    /* depthwise 2-D convolution, c_out = c_in * multiplier; kind 1: with bias */                             \
    X(DWCONV2D, 19, dwconv2d, CONST, 0, 0)                                                                    \
    /* max pooling over kh x kw windows (padding taps skipped) */                                             \
    X(MAXPOOL2D, 20, maxpool2d, PARAM, 0, 0)                                                                  \
    /* average pooling over kh x kw windows (the mean of the taps inside the input) */                        \
    X(AVGPOOL2D, 21, avgpool2d, PARAM, 0, 0)                                                                  \
    /* batch normalisation per channel (c_in channels, last): kind 0 running statistics, 1 batch statistics */ \
    X(BATCHNORM, 22, batchnorm, PARAM, 0, 0)                                                                  \
    /* dropout at rate alpha (seed k): kind 0 the identity, kind 1 (host training) zeroes and rescales */    \
    X(DROPOUT, 23, dropout, PARAM, 0, 0)                                                                      \
    /* int8 -> int8 Conv2d with integer requantization (see "Full-integer int8 ops" in mct.h) */               \
    X(QCONV2D, 24, qconv2d, QOP, 1, 1)                                                                        \
    /* int8 -> int8 depthwise Conv2d with integer requantization */                                          \
    X(QDWCONV2D, 25, qdwconv2d, QOP, 1, 1)                                                                    \
    /* int8 -> int8 max pooling (the input's quantization) */                                                \
    X(QMAXPOOL2D, 26, qmaxpool2d, QOP, 1, 1)                                                                  \
    /* int8 -> int8 average pooling (the input's quantization) */                                            \
    X(QAVGPOOL2D, 27, qavgpool2d, QOP, 1, 1)                                                                  \
    /* a residual block's projection: after the main body, before the shortcut body, whose input is the       \
     * block's input again (its output aliases its RES_BEGIN's output); k = index of its RES_BEGIN; kind 1:   \
     * an int8 block, as RES_BEGIN's */                                                                       \
    X(RES_SHORTCUT, 28, res_shortcut, NET, 0, 0)                                                              \
    /* int8 -> int8 end of an int8 residual block: RES_END's y = x + skip with each input's and the output's   \
     * own scale and zero point, requantized as TFLite's int8 ADD (see "Full-integer int8 ops" in mct.h) */     \
    X(QRES_END, 29, qres_end, NET, 1, 1)                                                                      \
    /* int8 -> int8 softmax as TensorFlow Lite Micro's int8 kernel (output scale 1/256, zero point -128) */    \
    X(QSOFTMAX, 30, qsoftmax, QOP, 1, 1)

/* Elementwise activations (kind of MCT_OP_ACT, gate of MCT_OP_GLU): X(NAME, value, layer, gate);
 * layer = 1: usable as an ACT layer, gate = 1: usable as a GLU gate. Values stay below 16. */
#define MCT_ACT_LIST(X)                                                                                       \
    X(RELU, 0, 1, 1)                                                                                          \
    X(LEAKY_RELU, 1, 1, 1)                                                                                    \
    X(SIGMOID, 2, 1, 1)                                                                                       \
    X(TANH, 3, 1, 1)                                                                                          \
    X(SILU, 4, 1, 1)                                                                                          \
    X(SOFTPLUS, 5, 1, 1)                                                                                      \
    X(SINE, 6, 1, 0)                                                                                          \
    X(COSINE, 7, 1, 0)                                                                                        \
    X(SWISH, 8, 0, 1) /* learned beta per output */                                                           \
    X(RELU6, 9, 1, 0) /* min(max(x, 0), 6) */

/* Losses (loss.c): X(NAME, value). HUBER takes a parameter (beta). */
#define MCT_LOSS_LIST(X)                                                                                      \
    X(MSE, 0)                                                                                                 \
    X(HUBER, 1)                                                                                               \
    X(BCE, 2)                                                                                                 \
    X(XENT, 3)                                                                                                \
    X(COSINE, 4)

/* Optimizers (optim.c): X(NAME, value, slots), slots = per-parameter state floats (n_params each). */
#define MCT_OPT_LIST(X)                                                                                       \
    X(SGD, 0, 0)                                                                                              \
    X(MOMENTUM, 1, 1)                                                                                         \
    X(RMSPROP, 2, 1)                                                                                          \
    X(RMSPROP_MOMENTUM, 3, 2)                                                                                 \
    X(ADAM, 4, 2)

/* Learning-rate schedules (mct_opt.schedule): X(NAME, value). */
#define MCT_SCHEDULE_LIST(X)                                                                                  \
    X(CONSTANT, 0)                                                                                            \
    X(LINEAR, 1)                                                                                              \
    X(COSINE, 2)

/* Where a layer's parameters live (mct_layer.storage): X(NAME, value); layouts at enum mct_storage. */
#define MCT_STORAGE_LIST(X)                                                                                   \
    X(RAM, 0)                                                                                                 \
    X(F32, 1)                                                                                                 \
    X(I8, 2)                                                                                                  \
    X(Q, 3)

/* Statuses of the checked entry points: X(NAME, value). */
#define MCT_STATUS_LIST(X)                                                                                    \
    X(OK, 0)                                                                                                  \
    X(E_NET, 1)              /* the layer table is inconsistent */                                            \
    X(E_ARG, 2)              /* a bad argument (a batch of 0, scratch too small) */                           \
    X(E_NONFINITE, 3)        /* the loss is not finite */                                                     \
    X(E_UNSUPPORTED, 4)      /* not in this path or build (similarity penalty, fused; MCT_REGULARIZE=0) */    \
    X(E_NONFINITE_GRAD, 5)   /* the loss was finite, a gradient was not */                                    \
    X(E_NONFINITE_INPUT, 6)  /* an input or target is not finite */                                           \
    X(E_NONFINITE_STATE, 7)  /* host: the update left a parameter or optimizer state not finite (undone) */

/* Format versions: X(NAME, value). Each format that crosses a boundary between a host and a device (or
 * between two versions of mcutrain) carries its version, and a reader refuses another one:
 *   PROTOCOL  the frames of docs/protocol.md (byte 1 of every frame; byte 0 and 1 keep their meaning in
 *             every version, so a device answers a frame of another version with status VERSION);
 *   BLOB      the device's state as one blob: RAM parameters, optimizer slots, train state (the saves in the
 *             board's storage and the host's pull/push, whose BLOB frame announces it);
 *   MODEL     the host's model file (.mct), written and read by mcutrain.modelfile. */
#define MCT_FORMAT_LIST(X)                                                                                    \
    X(PROTOCOL, 2)                                                                                            \
    X(BLOB, 1)                                                                                                \
    X(MODEL, 1)

/* Commands of the device protocol (docs/protocol.md): X(NAME, value). */
#define MCT_CMD_LIST(X)                                                                                       \
    X(INFO, 1)                                                                                                \
    X(PREDICT, 2)                                                                                             \
    X(TRAIN, 3)                                                                                               \
    X(READ, 4)                                                                                                \
    X(WRITE, 5)                                                                                               \
    X(SAVE, 6)                                                                                                \
    X(LOAD, 7)                                                                                                \
    X(STATS, 8)                                                                                               \
    X(RESET, 9)                                                                                               \
    X(BLOB, 10)              /* announce the blob a pull or push moves: its version and sizes */              \
    X(PREDICT_RAW, 11)       /* a model with a feature pipeline (MCT_MODEL_FEAT): predict from a raw window */ \
    X(TRAIN_RAW, 12)         /* ... one training step on a raw window and its target */                       \
    X(FEATURES, 13)          /* ... the network input a raw window gives */                                   \
    X(CAPTURE, 14)           /* ... the next raw window of the board's sensor (port_sensor_read) */           \
    X(QUIT, 0x7F)

/* Reply statuses of the device protocol (the status byte of a reply): X(NAME, value). */
#define MCT_REPLY_LIST(X)                                                                                     \
    X(OK, 0)                                                                                                  \
    X(BAD_CRC, 1)                                                                                             \
    X(BAD_LENGTH, 2)                                                                                          \
    X(UNKNOWN, 3)                                                                                             \
    X(BAD_ARG, 4)                                                                                             \
    X(NONFINITE, 5)                                                                                           \
    X(STORE, 6)                                                                                               \
    X(NO_SAVE, 7)                                                                                             \
    X(UNSUPPORTED, 8)                                                                                         \
    X(VERSION, 9)            /* a frame or blob of another format version; the data: the device's version */ \
    X(NO_WINDOW, 10)         /* CAPTURE: the sensor has no window ready (none yet, or its recording ended) */

/* ---- structs the host writes as bytes: X(type, field, numpy kind), in declaration order ---- */
/* One layer of a network (mct_layer). Offsets into the trace arena are per sample: a batch of nb samples
 * keeps the region at off * nb, laid out [nb][width]. */
#define MCT_LAYER_FIELDS(X)                                                                                   \
    X(uint8_t, op, 'u')          /* enum mct_op */                                                            \
    X(uint8_t, kind, 'u')        /* op variant (see MCT_OP_LIST) */                                           \
    X(uint8_t, trainable, 'u')   /* 0: frozen (no parameter update) */                                        \
    X(uint8_t, storage, 'u')     /* enum mct_storage */                                                       \
    X(uint16_t, n_in, 'u')       /* input width per sample */                                                 \
    X(uint16_t, n_out, 'u')      /* output width per sample */                                                \
    X(uint16_t, k, 'u')          /* conv filter size, or the index of a residual partner */                   \
    X(uint16_t, reserved2, 'u')                                                                               \
    X(float, alpha, 'f')         /* leaky slope, softmax temperature or RMSNorm eps */                        \
    X(float, lr_div, 'f')        /* learning rate divisor of enclosing LR wrappers (1 = none) */              \
    X(uint32_t, p_off, 'u')      /* first parameter in params (RAM storage) or byte offset in net->cdata */   \
    X(uint32_t, n_p, 'u')        /* parameter count */                                                        \
    X(uint32_t, n_w, 'u')        /* the first n_w parameters are connection weights (get L1/L2) */            \
    X(uint32_t, in_off, 'u')     /* arena offset of the input */                                              \
    X(uint32_t, out_off, 'u')    /* arena offset of the output */                                             \
    X(uint32_t, aux_off, 'u')    /* arena offset of op-specific trace (GLU pre-activations, RMSNorm rms) */  \
    X(uint16_t, h_in, 'u')       /* spatial ops: input height (1 for 1-D), width, channels (last) */          \
    X(uint16_t, w_in, 'u')                                                                                    \
    X(uint16_t, c_in, 'u')                                                                                    \
    X(uint16_t, h_out, 'u')      /* spatial ops: output height, width, channels */                            \
    X(uint16_t, w_out, 'u')                                                                                   \
    X(uint16_t, c_out, 'u')                                                                                   \
    X(uint16_t, kh, 'u')         /* spatial ops: window (kernel) height and width */                          \
    X(uint16_t, kw, 'u')                                                                                      \
    X(uint8_t, sh, 'u')          /* spatial ops: stride down and across */                                    \
    X(uint8_t, sw, 'u')                                                                                       \
    X(uint8_t, pt, 'u')          /* spatial ops: padding rows above and columns left (below/right follow) */  \
    X(uint8_t, pl, 'u')                                                                                       \
    X(float, beta, 'f')          /* BatchNorm: momentum of the running statistics */

/* Optimizer configuration (mct_opt): TrainParams plus the optimizer's coefficients. */
#define MCT_OPT_FIELDS(X)                                                                                     \
    X(uint8_t, kind, 'u')            /* enum mct_opt_kind */                                                  \
    X(uint8_t, schedule, 'u')        /* enum mct_schedule */                                                  \
    X(uint8_t, scale_by_loss, 'u')   /* 1: scale every step by the loss value (minidx behaviour) */           \
    X(uint8_t, reserved, 'u')                                                                                 \
    X(uint32_t, decay_steps, 'u')    /* steps of the linear or cosine decay from lr to lr_final */            \
    X(uint32_t, warmup_steps, 'u')   /* soft start: lr * (step + 1) / warmup_steps while step < warmup */     \
    X(float, lr, 'f')                                                                                         \
    X(float, lr_final, 'f')                                                                                   \
    X(float, l1, 'f')                /* penalty l1*|w| + l2*w^2 on connection weights, added to the grad */   \
    X(float, l2, 'f')                                                                                         \
    X(float, clip, 'f')              /* clamp each gradient element to [-clip, clip]; 0 = off */              \
    X(float, momentum, 'f')          /* momentum coefficient (MOMENTUM, RMSPROP_MOMENTUM) */                  \
    X(float, beta, 'f')              /* RMSProp decay, Adam beta2 */                                          \
    X(float, beta1, 'f')             /* Adam beta1 */                                                         \
    X(float, eps, 'f')               /* RMSProp: added under the root; Adam: added to the root */             \
    X(float, sim_penalty, 'f')       /* momentum similarity penalty tau; 0 = off */

/* Training progress the optimizer needs besides its per-parameter slots (mct_train_state). */
#define MCT_TRAIN_STATE_FIELDS(X)                                                                             \
    X(uint32_t, step, 'u')           /* updates applied so far */                                             \
    X(float, b1t, 'f')               /* Adam: beta1^step */                                                   \
    X(float, b2t, 'f')               /* Adam: beta2^step */

/* ---- helpers to expand the lists ---- */
/* A struct member from a field entry. */
#define MCT_FIELD_MEMBER(T, NAME, KIND) T NAME;
/* (uint32_t)FLAG << VALUE, for building a bit mask over a list's values. */
#define MCT_BIT(FLAG, VALUE) | ((uint32_t)(FLAG) << (VALUE))

#endif /* MCT_LISTS_H */
