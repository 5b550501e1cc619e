"""The device's version of a network: which layers keep training, which move to flash, and how the
device's RAM parameters map back to the host network's.

Trainable modes: 'all'; 'none' (the device only predicts); 'last:N' (the last N layers that have
parameters); 'biases' (every Linear and convolution with a bias splits into its frozen weights and a
trainable bias, Bias1d layers train, all other parameters are frozen; with quant='int8-full' only the last
layer with parameters splits, so the whole body before its bias runs in integers: the cheap head-only
transfer learning that fits a CNN on an Uno). Frozen Dense/Linear layers and convolutions are stored in the
const blob (flash), as f32 or, with quant='int8', as int8 weights with a scale per output channel; with
quant='int8-full' the frozen Dense/Linear layers and activations before the first trainable layer
run in integers (QUANT/QDENSE/QLUT/DEQUANT, calibrated on sample inputs; see mcutrain.exporter.quantize).
Every other parameter stays in RAM. The host runs the same layer table through the same C kernels,
so it can predict and train exactly as the device does (`DeviceModel.core()`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from mcutrain.corefacts import OPT_DTYPE, RESIDUAL_OPS, Op, Storage, layer_size_of, opt_slots
from mcutrain.losses import Loss
from mcutrain.modelfile import Checkpoint
from mcutrain.optim import Optimizer, TrainParams
from mcutrain.program import LayerDesc, Program

from ..errors import McuTrainError
from .boards import Board
from .device_model import DeviceModel, int8_boundary
from .protocol import MAX_FRAME_PAYLOAD
from .quantize import QUANT_MODES, QuantError, full_integer_layers, pad4, quantize_weights
from .tflite_import import QUANT_KEY

TRAINABLE_HELP = "all, none, last:N (the last N layers with parameters) or biases"
SAVE_MODES = ("params", "all")  # what a device save keeps: the parameters only, or the optimizer state too


class DeviceSpecError(McuTrainError, ValueError):
    """A trainable or quantization choice that cannot be made for this network."""


def _splits_bias(d: LayerDesc) -> bool:
    """Does --trainable biases split this layer (a Linear, or a convolution with a bias)?"""
    return d.kind == 1 and d.op in (Op.DENSE, Op.CONV2D, Op.DWCONV2D)


def _split_biases(layers: List[LayerDesc]) -> List[LayerDesc]:
    """Every Linear becomes Dense + Bias1d, every convolution with a bias the convolution + a per-channel Bias1d
    (same math and bits: the bias is added after the full sum)."""
    out: List[LayerDesc] = []
    for d in layers:
        if _splits_bias(d):
            n_b = d.n_out if d.op == Op.DENSE else int(d.geometry["c_out"])
            n_w = d.n_p - n_b
            out.append(replace(d, kind=0, n_p=n_w, n_w=n_w, name=d.name + " weights", geometry=dict(d.geometry)))
            out.append(
                LayerDesc(
                    op=Op.BIAS,
                    kind=0,
                    n_in=d.n_out,
                    n_out=d.n_out,
                    lr_div=d.lr_div,
                    p_off=d.p_off + n_w,
                    n_p=n_b,
                    n_w=0,
                    name=d.name + " bias",
                    # one bias per channel: h_in positions of c_in channels
                    geometry={} if d.op == Op.DENSE else {"c_in": n_b, "h_in": d.n_out // n_b},
                )
            )
        else:
            out.append(replace(d))
    return out


def _head_index(layers: List[LayerDesc]) -> int:
    """Index of the last layer with parameters (the head whose biases train over a full-integer body)."""
    with_params = [i for i, d in enumerate(layers) if d.n_p]
    if not with_params:
        raise DeviceSpecError("--trainable biases: the network has no layer with parameters")
    return with_params[-1]


def trainable_flags(layers: List[LayerDesc], trainable: str) -> List[bool]:
    """Per-layer trainable flags for a trainable mode."""
    t = trainable.strip().lower()
    with_params = [i for i, d in enumerate(layers) if d.n_p]
    if t == "all":
        return [True] * len(layers)
    if t == "none":
        return [False] * len(layers)
    if t == "biases":
        return [d.op == Op.BIAS for d in layers]
    if t.startswith("last:") and t[5:].isdigit():
        n = int(t[5:])
        if n > len(with_params):
            raise DeviceSpecError(
                f"--trainable {trainable}: the network has only {len(with_params)} layers with parameters"
            )
        first = with_params[len(with_params) - n] if n else len(layers)
        return [i >= first for i in range(len(layers))]
    raise DeviceSpecError(f"--trainable must be {TRAINABLE_HELP}; got {trainable!r}")


def _frozen_regions(layers: List[LayerDesc], n_in: int, stop: int) -> Tuple[Dict[int, int], int]:
    """Arena regions of the outputs of frozen layers 0 .. stop-2 when residual blocks are among them (the end of a
    block reads its start's input, or its main body's output, again): each output lives from the layer that writes
    it to the last layer that reads it (the next layer, an end op's skip tensor, a shortcut body's first layer); the
    widest first, each takes the lowest offset where it overlaps no output alive at the same time (its width the
    core's), the network's input included (alive until its last reader). Returns ({layer index: out_off}, the end
    of the regions). RES_BEGIN and RES_SHORTCUT write nothing (their outputs alias)."""
    src: List[int] = []  # per layer, the index of the layer that wrote its input (-1: the network's input)
    last: Dict[int, int] = {}  # writer -> the last layer reading its output
    cur = -1
    for i, d in enumerate(layers):
        src.append(cur)
        last[cur] = i
        if d.op in (Op.RES_END, Op.QRES_END):
            last[src[d.k]] = i  # the skip tensor: the input of its partner
        if d.op == Op.RES_SHORTCUT:
            cur = src[d.k]  # the shortcut body reads the block's input
        elif d.op != Op.RES_BEGIN:
            cur = i
    outs = [(layer_size_of(d).out, i) for i, d in enumerate(layers[: max(stop - 1, 0)])]
    outs = [(n, i) for n, i in outs if layers[i].op not in (Op.RES_BEGIN, Op.RES_SHORTCUT)]
    # (offset, size, first, last) of the outputs placed so far: the network's input first, alive until its last reader
    placed: List[Tuple[int, int, int, int]] = [(0, n_in, -1, last.get(-1, 0))]
    where: Dict[int, int] = {}
    top = n_in
    for size, i in sorted(outs, key=lambda t: (-t[0], t[1])):  # the widest first (TFLite's greedy-by-size plan)
        end, off = last.get(i, i), 0
        for o, n, _, _ in sorted(r for r in placed if r[2] <= end and i <= r[3]):  # alive at the same time
            if o - off >= size:
                break
            off = max(off, o + n)
        where[i] = off
        placed.append((off, size, i, end))
        top = max(top, off + size)
    return where, top


def _relayout(layers: List[LayerDesc], n_in: int) -> Tuple[List[LayerDesc], int, int, int]:
    """Give the layers fresh arena regions (the table changed), each as large as the core says (an int8 output takes
    mct_i8_floats of its width, the aux trace what the op's code asks for); returns (layers, arena, in_off, out_off).

    Training on the device keeps what its backward pass reads: every region from the input of the first trainable
    layer with parameters on (mct_backward stops there). Each frozen layer before it reads only the output of the
    layer before it, so their outputs share one buffer, each written at the end of it that its input does not use
    (the network's input at the low end, read only by layer 0; the last frozen output stays for the trainable layer,
    as nothing after it writes there): the buffer is as large as the largest input and output of one layer
    together, which is what a frozen CNN backbone needs at its peak (as CMSIS-NN's ping-pong buffers), not all its
    activations. With residual blocks among them (whose end reads its start's input again) each output takes a
    region only while it is read (_frozen_regions). A network the device runs from QUANT's output to DEQUANT's input
    (int8_boundary) starts the buffer with QUANT's output instead, and its f32 input (in_off) and output lie above
    the buffer: the firmware allocates the buffer alone."""
    boundary = int8_boundary(layers)
    stop = next((i for i, d in enumerate(layers) if d.trainable and d.n_p), len(layers))
    residual = any(d.op in RESIDUAL_OPS for d in layers[:stop])
    shared = len(layers) - 1 if boundary else 0 if residual else stop  # the layers whose outputs share the buffer
    outs = [layer_size_of(d).out for d in layers[:shared]]
    # what the buffer's low end holds first: the network's input, or QUANT's output (the input lies above, at in_off)
    first = 1 if boundary else 0
    head = [outs[0] if boundary else n_in]
    buf = max(head + [a + b for a, b in zip(head + outs[first:], outs[first:])])  # floats of the shared buffer
    in_off = buf if boundary else 0
    where, top = _frozen_regions(layers, n_in, stop) if residual else ({}, buf + (n_in if boundary else 0))
    cur, low = in_off, True  # low: the current input sits at the shared buffer's low end
    for i, d in enumerate(layers):
        size = layer_size_of(d)
        d.in_off = cur
        if d.op == Op.RES_BEGIN:
            d.out_off = cur
        elif d.op == Op.RES_SHORTCUT:
            d.out_off = layers[d.k].out_off  # the block's input again, where the shortcut body starts
        elif i < first:
            d.out_off = 0  # QUANT's output: the low end, where the network's input would be
        elif i < shared:
            d.out_off = buf - outs[i] if low else 0  # the end of the buffer its input does not use
            low = not low
        elif i in where:
            d.out_off = where[i]
        else:
            d.out_off = top
            top += size.out
        d.aux_off = top
        top += size.aux
        d.aux = size.aux
        cur = d.out_off
    return layers, top, in_off, cur


def _fix_residual_links(layers: List[LayerDesc], old_index: List[int]) -> None:
    """Residual partners point at table indices; re-point them after layers were split."""
    new_of = {old: new for new, old in enumerate(old_index)}
    for d in layers:
        if d.op in RESIDUAL_OPS:
            d.k = new_of[d.k]


def const_blob_entry(d: LayerDesc, w: np.ndarray, b: Optional[np.ndarray], quant: str) -> Tuple[bytes, int]:
    """Bytes of a frozen Dense/Linear, Conv2d or depthwise Conv2d (w: its weights, b: its bias or None) in the const
    blob and its storage mode (see enum mct_storage): int8 weights with a scale per output channel for the quantized
    modes, else f32."""
    if quant in ("int8", "int8-full"):
        n_out = d.n_out if d.op == Op.DENSE else int(d.geometry["c_out"])
        q, scale = quantize_weights(w, w.size // n_out, n_out)
        parts = [scale.astype("<f4").tobytes()] + ([b.astype("<f4").tobytes()] if b is not None else [])
        # Dense: W int8 [n_out][n_in] (rows for integer dot products); a convolution: its f32 layout, out innermost
        blob = b"".join(parts) + np.ascontiguousarray(q.T if d.op == Op.DENSE else q).tobytes()
        return pad4(blob), int(Storage.I8)
    parts = [w.astype("<f4").tobytes()] + ([b.astype("<f4").tobytes()] if b is not None else [])
    return b"".join(parts), int(Storage.F32)


def device_optimizer(ck: Checkpoint, kind: Optional[str]) -> Optional[Optimizer]:
    """The optimizer the device trains with: the model's (kind None or the model's own kind), else a fresh one of
    that kind with the model's TrainParams (learning rate, schedule, L1/L2, clipping) and the kind's usual
    coefficients (the model's own where it has them: momentum 0.9, RMSProp beta 0.9, Adam 0.9/0.999/1e-8)."""
    own = ck.optimizer
    if kind is None or (own is not None and own.kind == kind) or (own is None and kind == "sgd"):
        return own
    from mcutrain.optim import KINDS

    if kind not in KINDS:
        raise DeviceSpecError(f"--optimizer must be one of {', '.join(KINDS)}; got {kind!r}")
    tp = own.params if own is not None else TrainParams()
    c = own.coeffs if own is not None else {}
    n = ck.net.param_count()
    if kind == "adam":
        return Optimizer("adam", tp, n, beta1=0.9, beta=0.999, eps=1e-8)
    momentum = c.get("momentum") or 0.9
    beta = c.get("beta") if own is not None and own.kind.startswith("rmsprop") else 0.9
    return Optimizer(kind, tp, n, momentum=momentum, beta=beta)


def _class_names(ck: Checkpoint, n_out: int) -> Optional[List[str]]:
    """The model's class names when there is one per output."""
    from mcutrain.modelmeta import class_names

    names = class_names(ck.metadata)
    return names if names is not None and len(names) == n_out else None


def _input_steps(
    ck: Checkpoint, layers: List[LayerDesc], old_index: List[int], full: np.ndarray, fold: bool
) -> Tuple[np.ndarray, set, str]:
    """Put the model's input steps (mcutrain.inputsteps) into the device's layer table, so the device takes raw
    inputs. With fold (f32 weights), a standardisation is folded into a first Linear layer that stays frozen on
    the device: the same function (W' = s W, b' = b - (m s) W, rounded once to float32), the step's cost gone.
    Otherwise it runs as two frozen layers in front, Bias1d(-mean) and Diag(scale), which compute
    (x - mean) * scale exactly as the host does: a trainable first layer then learns on standardised inputs as
    on the host, and int8 weights are quantized where the inputs are standardised (folded, an input's weights
    would take its raw scale and quantize badly). Returns (the parameters the table's offsets refer
    to, the ids of the layers that hold the steps' constants, what was done in words). layers and old_index
    are changed in place."""
    from mcutrain.inputsteps import step_arrays
    from mcutrain.modelmeta import input_steps

    n = ck.net.program.n_in
    steps = input_steps(ck.metadata, n)
    if not steps:
        return full, set(), ""
    first = layers[0]
    if (
        fold
        and len(steps) == 1
        and first.op == Op.DENSE
        and first.kind == 1
        and not first.trainable
        and first.n_in == n
    ):
        mean, scale = (a.astype(np.float64) for a in step_arrays(steps[0]))
        full = np.array(full, np.float32, copy=True)
        io = n * first.n_out
        w = full[first.p_off : first.p_off + io].astype(np.float64).reshape(n, first.n_out)
        b = full[first.p_off + io : first.p_off + io + first.n_out].astype(np.float64)
        full[first.p_off : first.p_off + io] = (w * scale[:, None]).astype(np.float32).ravel()
        full[first.p_off + io : first.p_off + io + first.n_out] = (b - (mean * scale) @ w).astype(np.float32)
        return full, set(), "standardisation folded into the first layer"
    extra: List[np.ndarray] = []
    front: List[LayerDesc] = []
    at = full.shape[0]
    for step in steps:
        mean, scale = step_arrays(step)
        for op, values, what in ((Op.BIAS, -mean, "mean"), (Op.DIAG, scale, "scale")):
            front.append(
                LayerDesc(op=op, kind=0, n_in=n, n_out=n, p_off=at, n_p=n, n_w=0, trainable=False, name=f"input {what}")
            )
            extra.append(values.astype(np.float32))
            at += n
    layers[:0] = front
    old_index[:0] = [-1 - i for i in range(len(front))]
    full = np.concatenate([np.asarray(full, np.float32)] + extra)
    return full, {id(d) for d in front}, f"standardisation applied by the firmware ({2 * n * len(steps)} floats of RAM)"


def _imported_quant(
    ck: Checkpoint, layers: List[LayerDesc], old_index: List[int]
) -> Optional[List[Optional[Dict[str, Any]]]]:
    """The imported model's own int8 quantization (metadata QUANT_KEY, one record per host layer, see
    tflite_import) for each device layer, or None for a model without one."""
    meta = ck.metadata.get(QUANT_KEY)
    if not isinstance(meta, dict) or not isinstance(meta.get("layers"), list):
        return None
    recs, host = meta["layers"], ck.net.program.layers
    if len(recs) != len(host):
        raise DeviceSpecError(
            f"the model's imported quantization has {len(recs)} layers but its network {len(host)}: import it again"
        )
    out: List[Optional[Dict[str, Any]]] = []
    for i, d in enumerate(layers):
        o = old_index[i] if i < len(old_index) else -1
        out.append(recs[o] if 0 <= o < len(host) and host[o].op == d.op and isinstance(recs[o], dict) else None)
    return out


def build_device_model(
    ck: Checkpoint,
    trainable: str = "all",
    quant: str = "f32",
    loss: Optional[Loss] = None,
    optimizer: Optional[Optimizer] = None,
    board: Optional[Board] = None,
    source: str = "model",
    calibration: Any = None,
    save: str = "all",
    fold_inputs: Optional[bool] = None,
    biases_from: Optional[int] = None,
) -> DeviceModel:
    """The firmware's view of a checkpoint (see the module docstring). quant='int8-full' needs calibration:
    sample inputs (n, n_in) of the network. For the quantized modes the model's `baseline` is the f32
    export with the same trainable layers (the memory plan reports the savings against it). optimizer: the
    one the device trains with (default: the model's, see device_optimizer); save: what a device save keeps
    ('all': parameters and optimizer slots, 'params': the parameters only). fold_inputs: fold the model's input
    standardisation into a frozen first Linear layer when it can (default: for f32 weights only; see
    _input_steps). biases_from: with trainable='biases', the biases of host layers from this index on train and
    the layers before it stay frozen whole (default: every layer's; with int8-full, the last layer with
    parameters', so the body before it runs in integers)."""
    if save not in SAVE_MODES:
        raise DeviceSpecError(f"--save must be one of {', '.join(SAVE_MODES)}; got {save!r}")
    if quant not in QUANT_MODES:
        raise DeviceSpecError(f"--quant must be one of {', '.join(QUANT_MODES)}; got {quant!r}")
    if quant == "int8-full" and calibration is None and QUANT_KEY not in ck.metadata:
        raise DeviceSpecError(
            "--quant int8-full needs calibration inputs: sample inputs of the network "
            f"(shape (n, {ck.net.program.n_in})) that set the int8 ranges of the activations; "
            "pass calibration=... (a few hundred typical inputs), or use --quant int8 or f32"
        )
    net = ck.net
    host = net.program
    full = net.params
    mode = trainable.strip().lower()
    if mode == "biases" and biases_from is None:  # over a full-integer body only the head's biases train
        biases_from = _head_index(host.layers) if quant == "int8-full" else 0
    if mode == "biases":
        front = [replace(d, trainable=False) for d in host.layers[:biases_from]]
        layers = front + _split_biases(host.layers[biases_from:])
        flags = [False] * len(front) + trainable_flags(layers[len(front) :], trainable)
    else:
        layers = [replace(d) for d in host.layers]
        flags = trainable_flags(layers, trainable)
    old_index = []
    for i, d in enumerate(host.layers):
        old_index += [i, i] if (mode == "biases" and i >= (biases_from or 0) and _splits_bias(d)) else [i]
    for d, tr in zip(layers, flags):
        d.trainable = tr
    full, fixed, steps_text = _input_steps(
        ck, layers, old_index, full, fold=quant == "f32" if fold_inputs is None else fold_inputs
    )
    _fix_residual_links(layers, old_index)
    baseline: Optional[DeviceModel] = None
    qblobs: Dict[int, bytes] = {}
    if quant != "f32":
        baseline = build_device_model(
            ck, trainable, "f32", loss, optimizer, board, source, save=save, fold_inputs=False, biases_from=biases_from
        )
    if quant == "int8-full":
        assert baseline is not None
        try:
            layers, qblobs = full_integer_layers(
                layers, full, baseline.program, baseline.params, calibration, _imported_quant(ck, layers, old_index)
            )
        except QuantError as e:
            raise DeviceSpecError(str(e)) from None
    # parameters: trainable layers and small frozen ones in RAM, frozen Dense/Linear in the blob
    ram: List[np.ndarray] = []
    blob = b""
    segments: List[Tuple[int, int, int]] = []  # (ram offset, host offset, count)
    n_ram = 0
    for d in layers:
        tr = d.trainable
        src = d.p_off
        if id(d) in qblobs:  # full-integer op: its constants go to the blob
            d.storage, d.p_off = int(Storage.Q), len(blob)
            blob += qblobs[id(d)]
            continue
        if d.n_p == 0:
            d.p_off = n_ram
            continue
        if id(d) in fixed:  # an input step's constants: in RAM, not a parameter of the host network
            d.p_off = n_ram
            ram.append(full[src : src + d.n_p])
            n_ram += d.n_p
            continue
        if not tr and d.op in (Op.DENSE, Op.CONV2D, Op.DWCONV2D):  # frozen Dense/Linear and convolutions: flash
            n_b = (d.n_out if d.op == Op.DENSE else int(d.geometry["c_out"])) if d.kind == 1 else 0
            io = d.n_p - n_b
            w = full[src : src + io]
            b = full[src + io : src + io + n_b] if n_b else None
            data, d.storage = const_blob_entry(d, w, b, quant)
            d.p_off = len(blob)
            blob += data
            continue
        d.p_off = n_ram
        ram.append(full[src : src + d.n_p])
        segments.append((n_ram, src, d.n_p))
        n_ram += d.n_p
    layers, arena, in_off, out_off = _relayout(layers, host.n_in)
    prog = Program(layers, host.n_in, host.n_out, n_ram, arena, in_off, out_off, cdata=blob)
    opt = optimizer or ck.optimizer or TrainParams()
    if isinstance(opt, TrainParams):  # a bare TrainParams trains as plain SGD
        opt = Optimizer("sgd", opt, net.param_count())
    if opt.coeffs.get("sim_penalty", 0.0) > 0 and opt.kind in ("momentum", "rmsprop_momentum"):
        raise DeviceSpecError(
            "the momentum similarity penalty needs every gradient before the update, which "
            "the device does not keep; export with a copy of the optimizer without it"
        )
    if loss is None:
        from mcutrain import losses as losses_mod

        name = ck.metadata.get("loss")
        loss = losses_mod.by_name(name) if name else losses_mod.mse
    params = np.concatenate(ram).astype(np.float32) if ram else np.zeros(0, np.float32)
    rx_floats = 16 if board is not None and board.core == "avr" else 64
    m = DeviceModel(
        program=prog,
        params=params,
        opt_cfg=opt._cfg.view(OPT_DTYPE).copy(),
        opt_slots=opt_slots(opt.kind),
        loss_kind=loss.kind,
        loss_param=loss.param,
        scratch=0,
        rx_max=5 + 4 * rx_floats,
        source=source,
        segments=segments,
        quant=quant,
        save=save,
        baseline=baseline,
        input_steps=steps_text,
        class_names=_class_names(ck, host.n_out),
    )
    if ck.metadata.get("frontend"):
        from mcutrain.featdata import FrontEnd

        m.frontend = FrontEnd.from_dict(ck.metadata["frontend"], prog.n_in)
        if m.feat is not None and m.feat.spec.sizes().n_out != prog.n_in:
            raise DeviceSpecError(
                f"the model's feature pipeline makes {m.feat.spec.sizes().n_out} values, its network takes {prog.n_in}"
            )
        if m.feat is not None:  # TRAIN_RAW carries the raw window and the target in one frame (u16 length)
            z = m.feat.spec.sizes()
            payload = z.n_in * (4 if m.feat.spec.kind == "motion" else 2) + 4 * prog.n_out
            if payload > MAX_FRAME_PAYLOAD:
                raise DeviceSpecError(
                    f"a raw window of {z.n_in} values does not fit a protocol frame ({payload:,} of "
                    f"{MAX_FRAME_PAYLOAD:,} bytes): "
                    "use shorter windows (length= in --features)"
                )
    m.scratch = 0 if m.int8_io else int(m.core().scratch_size(1, 0))  # an int8_io model trains nothing
    return m
