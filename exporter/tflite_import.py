"""Import a full-integer int8 `.tflite` file (TensorFlow Lite's converter with int8 weights and activations) as an
mcutrain network that keeps the file's quantization.

The network holds the dequantized weights (W = q * scale, in f32; the bias b = q_b * s_in * s_w), and the model's
metadata "int8_quant" records, for every layer of its table, the int8 scale and zero point of its input and
output tensors and the per-channel weight scales, exactly as the file gives them. `export --quant int8-full`
builds its QUANT -> QCONV2D / QDWCONV2D / QMAXPOOL2D / QAVGPOOL2D / QDENSE (-> QSOFTMAX) -> DEQUANT run from these
(quantize.full_integer_layers) instead of calibrating, so the device computes the int8 tensors the file's
interpreter computes (see tests/test_tflite_import.py for the oracle, TensorFlow Lite Micro).

Operators: CONV_2D, DEPTHWISE_CONV_2D (any depth multiplier), MAX_POOL_2D, AVERAGE_POOL_2D, FULLY_CONNECTED,
RESHAPE (moves no values), SOFTMAX (the last operator, over one row), a QUANTIZE of a float input first and a
DEQUANTIZE last. An int8 SOFTMAX (output scale 1/256, zero point -128, as TFLite fixes it) is a Softmax layer whose
record is {"in", "out", "softmax": "tflite", "beta"}: with every layer frozen it becomes QSOFTMAX, TFLite Micro's
int8 softmax bit for bit, and the device returns its codes q as (q + 128) / 256; after a trainable layer (or over
more values than QSOFTMAX takes, 511) it runs in f32 on the dequantized logits. A fused ReLU / ReLU6 imports when its
clamp is the int8 range. The graph must be a chain (each operator reads the previous one's output). Anything else is an
ImportModelError naming the operator. The flatbuffer is read with the schema module of ai-edge-litert (extra
`tflite`); sizes are checked before any weights are read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from mcutrain import layers as L
from mcutrain.corefacts import Op, layer_size
from mcutrain.errors import ImportModelError
from mcutrain.extras import require
from mcutrain.files import read_bounded
from mcutrain.modelfile import Checkpoint
from mcutrain.module import Module

from .interop import MAX_IMPORT_BYTES, MAX_PARAMS, check_width, dense, sequential
from .quantize import SOFTMAX_QPARAMS

SUPPORTED = (
    "CONV_2D, DEPTHWISE_CONV_2D, MAX_POOL_2D, AVERAGE_POOL_2D, FULLY_CONNECTED, RESHAPE, SOFTMAX (last), QUANTIZE "
    "(first) and DEQUANTIZE (last), with int8 activations, int8 weights and int32 biases (TFLiteConverter with "
    "optimizations=[DEFAULT], a representative_dataset and TFLITE_BUILTINS_INT8)"
)
QUANT_KEY = "int8_quant"  # the model metadata holding the imported quantization (read by exporter.device)


def _schema() -> Any:
    return require("ai_edge_litert.schema_py_generated", "tflite")


class _Reader:
    """The tensors and buffers of subgraph 0 of a parsed model, with checked access."""

    def __init__(self, model: Any, source: str) -> None:
        self.model, self.source = model, source
        if not model.subgraphs:
            raise ImportModelError(f"{source}: the file has no subgraph")
        self.g = model.subgraphs[0]
        self.tensors = self.g.tensors or []
        self.buffers = model.buffers or []
        self.int8 = _schema().TensorType.INT8
        self.int32 = _schema().TensorType.INT32

    def tensor(self, i: int, where: str) -> Any:
        if not 0 <= int(i) < len(self.tensors):
            raise ImportModelError(f"{where}: tensor index {i} outside the file's {len(self.tensors)} tensors")
        return self.tensors[int(i)]

    def shape(self, t: Any, where: str) -> Tuple[int, ...]:
        shape = tuple(int(d) for d in (t.shape if t.shape is not None else []))
        if len(shape) > 4:
            raise ImportModelError(f"{where}: a tensor of rank {len(shape)}; mcutrain imports up to 4 dimensions")
        for d in shape[1:] if shape else ():
            check_width(d, where)
        return shape

    def qparams(self, t: Any, where: str, per_channel: bool = False) -> Tuple[np.ndarray, np.ndarray]:
        """(scales float32, zero points int64) of an int8 tensor."""
        if t.type != self.int8:
            name = _enum_name(_schema().TensorType, t.type)
            raise ImportModelError(
                f"{where}: tensor {_name(t)!r} is {name}, not int8; mcutrain imports full-integer int8 models "
                f"({SUPPORTED})"
            )
        q = t.quantization
        if q is None or q.scale is None or len(q.scale) == 0:
            raise ImportModelError(f"{where}: tensor {_name(t)!r} has no quantization parameters")
        s = np.asarray(q.scale, np.float32)
        z = np.asarray(q.zeroPoint if q.zeroPoint is not None else np.zeros(len(s)), np.int64)
        if not np.all(np.isfinite(s)) or np.any(s <= 0) or len(z) != len(s) or np.any(np.abs(z) > 128):
            raise ImportModelError(f"{where}: tensor {_name(t)!r} has unusable scales or zero points")
        if not per_channel and len(s) != 1:
            raise ImportModelError(f"{where}: tensor {_name(t)!r} is quantized per channel; expected one scale")
        return s, z

    def act(self, t: Any, where: str) -> List[float]:
        """[scale, zero point] of an activation tensor (per tensor)."""
        s, z = self.qparams(t, where)
        return [float(s[0]), int(z[0])]

    def const(self, i: int, kind: Any, shape: Sequence[int], where: str) -> np.ndarray:
        """The constant data of tensor i, of dtype int8 or int32, checked against `shape` before reading it."""
        t = self.tensor(i, where)
        want = self.int8 if kind == np.int8 else self.int32
        if t.type != want:
            raise ImportModelError(
                f"{where}: constant {_name(t)!r} is {_enum_name(_schema().TensorType, t.type)}, expected "
                f"{'INT8' if kind == np.int8 else 'INT32'}"
            )
        n = int(np.prod(shape))
        if n > MAX_PARAMS:
            raise ImportModelError(f"{where}: {n:,} weights; mcutrain imports at most {MAX_PARAMS:,}")
        if tuple(self.shape(t, where)) != tuple(shape) and int(np.prod(self.shape(t, where))) != n:
            raise ImportModelError(
                f"{where}: constant {_name(t)!r} has shape {tuple(t.shape)}, expected {tuple(shape)}"
            )
        if not 0 <= t.buffer < len(self.buffers) or self.buffers[t.buffer].data is None:
            raise ImportModelError(f"{where}: constant {_name(t)!r} has no data in the file")
        raw = np.asarray(self.buffers[t.buffer].data, np.uint8)
        if raw.size != n * np.dtype(kind).itemsize:
            raise ImportModelError(f"{where}: constant {_name(t)!r} holds {raw.size} bytes, expected {n} values")
        return raw.view("<i4" if kind == np.int32 else np.int8).astype(kind).reshape(shape)


def _name(t: Any) -> str:
    n = t.name
    return n.decode("utf-8", "replace") if isinstance(n, bytes) else str(n)


def _enum_name(enum: Any, value: int) -> str:
    for k, v in vars(enum).items():
        if not k.startswith("_") and v == value:
            return k
    return str(value)


def parse(data: bytes, source: str) -> Any:
    """The ModelT object of a .tflite file's bytes; ImportModelError when it is not one."""
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise ImportModelError(f"{source}: not a TensorFlow Lite flatbuffer (no 'TFL3' identifier at bytes 4..7)")
    fb = _schema()
    try:
        return fb.ModelT.InitFromPackedBuf(bytearray(data), 0)
    except Exception as e:  # a damaged flatbuffer fails anywhere inside the generated reader
        raise ImportModelError(f"{source}: the flatbuffer cannot be read ({type(e).__name__}: {e})") from None


def from_tflite(path: Union[str, Path]) -> Checkpoint:
    """The mcutrain model of a full-integer int8 .tflite file: the network with the dequantized weights and the
    file's quantization in metadata[QUANT_KEY] (see the module docstring)."""
    p = Path(path)
    return from_tflite_bytes(read_bounded(p, MAX_IMPORT_BYTES, "TFLite file", ImportModelError), str(p))


def _padding(fb: Any, pad: int, where: str) -> str:
    if pad == fb.Padding.SAME:
        return "same"
    if pad == fb.Padding.VALID:
        return "valid"
    raise ImportModelError(f"{where}: padding {pad}; mcutrain imports SAME and VALID")


def _fused(fb: Any, act: int, out: List[float], n: int, where: str) -> List[Module]:
    """The layer of a fused activation, checked to clamp no further than int8 saturation does (as the device's
    int8 kernels apply it: saturation at -128 / 127)."""
    A = fb.ActivationFunctionType
    if act == A.NONE:
        return []
    s, z = out
    if act == A.RELU:
        lo, hi = z, 127
    elif act == A.RELU6:
        lo, hi = z, min(127, z + int(np.round(6.0 / s)))
    else:
        raise ImportModelError(
            f"{where}: fused activation {_enum_name(A, act)}; mcutrain imports NONE, RELU and RELU6. "
            f"mcutrain imports: {SUPPORTED}"
        )
    if lo != -128 or hi != 127:
        raise ImportModelError(
            f"{where}: its fused {_enum_name(A, act)} clamps to [{lo}, {hi}], inside the int8 range (output zero "
            f"point {z}, scale {s}); mcutrain's int8 kernels clamp only by saturating to [-128, 127]"
        )
    return [L.Relu(n) if act == A.RELU else L.Relu6(n)]


def from_tflite_bytes(data: bytes, source: str = "TFLite model") -> Checkpoint:
    """from_tflite on the bytes of a file (source names it in messages)."""
    fb = _schema()
    r = _Reader(parse(data, source), source)
    ops = r.g.operators or []
    codes = r.model.operatorCodes or []
    if not ops:
        raise ImportModelError(f"{source}: the model has no operators")
    B = fb.BuiltinOperator
    layers: List[Module] = []
    records: List[Optional[Dict[str, Any]]] = []
    shape: Optional[Tuple[int, ...]] = None  # (H, W, C) or (n,) of the current value
    input_shape: Optional[Tuple[int, ...]] = None
    cur = -1  # the tensor the chain is at
    q: Optional[List[float]] = None  # [scale, zp] of the current int8 value

    def add(mod: Module, rec: Optional[Dict[str, Any]]) -> None:
        layers.append(mod)
        records.append(rec)

    for k, op in enumerate(ops):
        if not 0 <= op.opcodeIndex < len(codes):
            raise ImportModelError(f"{source}: operator {k} names opcode {op.opcodeIndex}, outside the table")
        oc = codes[op.opcodeIndex]
        code = max(int(oc.builtinCode), int(oc.deprecatedBuiltinCode))
        name = _enum_name(B, code)
        where = f"{source}: operator {k} ({name})"
        ins = [int(i) for i in (op.inputs if op.inputs is not None else [])]
        outs = [int(i) for i in (op.outputs if op.outputs is not None else [])]
        if not ins or len(outs) != 1:
            raise ImportModelError(f"{where}: {len(ins)} inputs and {len(outs)} outputs")
        if cur < 0:
            t_in = r.tensor(ins[0], where)
            s_in = r.shape(t_in, where)
            if len(s_in) not in (2, 4) or s_in[0] not in (1, -1):
                raise ImportModelError(f"{where}: model input of shape {s_in}; mcutrain imports (1, n) or (1, H, W, C)")
            shape = s_in[1:]
            input_shape = shape
            if code != B.QUANTIZE:
                q = r.act(t_in, f"{where}: model input")
        elif ins[0] != cur:
            raise ImportModelError(
                f"{where}: reads tensor {ins[0]}, not the previous operator's output {cur}; mcutrain imports "
                "chains of operators"
            )
        assert shape is not None
        t_out = r.tensor(outs[0], where)
        out_shape = r.shape(t_out, where)
        opts = op.builtinOptions
        if code == B.QUANTIZE:
            if k != 0 or r.tensor(ins[0], where).type != fb.TensorType.FLOAT32:
                raise ImportModelError(
                    f"{where}: only a QUANTIZE of the float model input (the first operator) is supported"
                )
            q = r.act(t_out, where)
        elif code == B.DEQUANTIZE:
            if k != len(ops) - 1:
                raise ImportModelError(
                    f"{where}: only a DEQUANTIZE of the model output (the last operator) is supported"
                )
        elif code in (B.CONV_2D, B.DEPTHWISE_CONV_2D):
            assert q is not None
            if len(shape) != 3:
                raise ImportModelError(f"{where}: input of shape {shape}, expected (H, W, C)")
            if int(getattr(opts, "dilationHFactor", 1)) != 1 or int(getattr(opts, "dilationWFactor", 1)) != 1:
                raise ImportModelError(f"{where}: dilated windows are not supported. mcutrain imports: {SUPPORTED}")
            wt = r.tensor(ins[1], where)
            ws = r.shape(wt, where)
            if len(ws) != 4:
                raise ImportModelError(f"{where}: weights of shape {ws}, expected 4 dimensions")
            c_in = shape[2]
            if code == B.CONV_2D:
                c_out, kh, kw, wc = ws
                if wc != c_in:
                    raise ImportModelError(f"{where}: weights for {wc} input channels after {c_in}")
            else:
                one, kh, kw, c_out = ws
                mult = int(getattr(opts, "depthMultiplier", 1)) or 1
                if one != 1 or c_out != c_in * mult:
                    raise ImportModelError(f"{where}: depthwise weights {ws} for {c_in} channels, multiplier {mult}")
            check_width(c_out, where)
            sw, zw = r.qparams(wt, f"{where}: weights", per_channel=True)
            if len(sw) == 1:
                sw = np.repeat(sw, c_out)
            if len(sw) != c_out or np.any(zw != 0):
                raise ImportModelError(f"{where}: weights must be symmetric (zero point 0) per output channel")
            w = r.const(ins[1], np.int8, ws, where)
            bq = r.const(ins[2], np.int32, (c_out,), where) if len(ins) > 2 and ins[2] >= 0 else None
            stride = (int(opts.strideH), int(opts.strideW))
            pad = _padding(fb, int(opts.padding), where)
            out_q = r.act(t_out, where)
            acc = np.float64(q[0]) * sw.astype(np.float64)
            wf = w.astype(np.float32) * (sw.reshape(-1, 1, 1, 1) if code == B.CONV_2D else sw.reshape(1, 1, 1, -1))
            if code == B.CONV_2D:
                conv: Module = L.Conv2d(c_in, c_out, (kh, kw), stride, pad, bias=bq is not None, input_shape=shape)
                parts = [wf.reshape(c_out, kh, kw, c_in).transpose(1, 2, 3, 0).ravel()]  # OHWI -> [kh][kw][in][out]
            else:
                conv = L.DepthwiseConv2d(c_in, (kh, kw), stride, pad, mult, bias=bq is not None, input_shape=shape)
                parts = [wf.reshape(kh, kw, c_out).ravel()]  # [1][kh][kw][in*mult], channel in*mult+m: mcutrain's
            if bq is not None:
                parts.append((bq.astype(np.float64) * acc).astype(np.float32))
            conv.params = np.concatenate(parts).astype(np.float32)
            rec = {"in": q, "out": out_q, "w_scale": [float(v) for v in sw], "rounding": "tflite"}
            add(conv, rec)
            shape = conv.out_shape
            assert shape is not None
            if tuple(out_shape[1:]) != tuple(shape):
                raise ImportModelError(f"{where}: output of shape {out_shape}, mcutrain computes {shape}")
            for act in _fused(fb, int(opts.fusedActivationFunction), out_q, int(np.prod(shape)), where):
                add(act, {"in": out_q, "out": out_q})
            q = out_q
        elif code in (B.MAX_POOL_2D, B.AVERAGE_POOL_2D):
            assert q is not None
            if len(shape) != 3:
                raise ImportModelError(f"{where}: input of shape {shape}, expected (H, W, C)")
            out_q = r.act(t_out, where)
            if out_q != q:
                raise ImportModelError(f"{where}: output quantization {out_q} differs from the input's {q}")
            cls = L.MaxPool2d if code == B.MAX_POOL_2D else L.AvgPool2d
            pool = cls(
                (int(opts.filterHeight), int(opts.filterWidth)),
                (int(opts.strideH), int(opts.strideW)),
                _padding(fb, int(opts.padding), where),
                input_shape=shape,
            )
            add(pool, {"in": q, "out": q})
            shape = pool.out_shape
            assert shape is not None
            if tuple(out_shape[1:]) != tuple(shape):
                raise ImportModelError(f"{where}: output of shape {out_shape}, mcutrain computes {shape}")
            _fused(fb, int(opts.fusedActivationFunction), q, 1, where)  # only checked: pooling keeps the range
        elif code == B.RESHAPE:
            n = int(np.prod(shape))
            if int(np.prod([d for d in out_shape if d > 0])) != n or (out_shape and out_shape[0] not in (1, -1)):
                raise ImportModelError(f"{where}: reshapes {shape} to {out_shape}; mcutrain imports a flatten")
            if r.act(t_out, where) != q:
                raise ImportModelError(f"{where}: changes the quantization")
            shape = tuple(out_shape[1:]) if len(out_shape) > 1 else (n,)
        elif code == B.FULLY_CONNECTED:
            assert q is not None
            wt = r.tensor(ins[1], where)
            ws = r.shape(wt, where)
            n_in = int(np.prod(shape))
            if len(ws) != 2 or ws[1] != n_in:
                raise ImportModelError(f"{where}: weights of shape {ws} after {n_in} values")
            n_out = check_width(ws[0], where)
            sw, zw = r.qparams(wt, f"{where}: weights", per_channel=True)
            if len(sw) == 1:
                sw = np.repeat(sw, n_out)
            if len(sw) != n_out or np.any(zw != 0):
                raise ImportModelError(f"{where}: weights must be symmetric (zero point 0) per output channel")
            w = r.const(ins[1], np.int8, ws, where)
            bq = r.const(ins[2], np.int32, (n_out,), where) if len(ins) > 2 and ins[2] >= 0 else None
            acc = np.float64(q[0]) * sw.astype(np.float64)
            wf = (w.astype(np.float32) * sw.reshape(-1, 1)).T  # [O][I] -> W [n_in][n_out]
            b = None if bq is None else (bq.astype(np.float64) * acc).astype(np.float32)
            out_q = r.act(t_out, where)
            add(dense(wf, b, where), {"in": q, "out": out_q, "w_scale": [float(v) for v in sw], "rounding": "tflite"})
            shape = (n_out,)
            for act in _fused(fb, int(opts.fusedActivationFunction), out_q, n_out, where):
                add(act, {"in": out_q, "out": out_q})
            q = out_q
        elif code == B.SOFTMAX:
            if k != len(ops) - 1 and not (k == len(ops) - 2 and _is_dequantize(r, ops[k + 1], codes)):
                raise ImportModelError(f"{where}: a SOFTMAX is imported only as the last operator")
            beta = float(getattr(opts, "beta", 1.0))
            if not beta > 0:
                raise ImportModelError(f"{where}: beta {beta}; mcutrain imports a softmax with a positive beta")
            n = int(np.prod(shape))
            if n != shape[-1]:
                raise ImportModelError(
                    f"{where}: a softmax over the last axis of shape {shape}; mcutrain imports one over a single row "
                    "(flatten first)"
                )
            rec = None
            if q is not None and t_out.type == r.int8:  # TFLite's int8 softmax: output scale 1/256, zero point -128
                out_q = r.act(t_out, where)
                if out_q != [float(SOFTMAX_QPARAMS.scale), SOFTMAX_QPARAMS.zero_point]:
                    raise ImportModelError(
                        f"{where}: int8 output quantization {out_q}; TFLite's int8 softmax has scale 1/256 and zero "
                        "point -128"
                    )
                if layer_size(Op.QSOFTMAX, n, n).valid:  # else (too wide for the int8 kernel) it runs in f32
                    rec = {"in": q, "out": out_q, "softmax": "tflite", "beta": beta}
            add(L.Softmax(1.0 / beta, n), rec)  # exp(beta x): temperature 1 / beta
            shape = (n,)
        else:
            raise ImportModelError(f"{where}: this operator is not supported. mcutrain imports: {SUPPORTED}")
        cur = outs[0]
    if not layers:
        raise ImportModelError(f"{source}: the model has no layers mcutrain can run")
    net = sequential(layers, source, input_shape if input_shape is not None and len(input_shape) > 1 else None)
    if len(net.program.layers) != len(records):
        raise AssertionError("internal: the imported layers and their quantization records do not line up")
    return Checkpoint(net, metadata={QUANT_KEY: {"source": "tflite", "layers": records}})


def _is_dequantize(r: _Reader, op: Any, codes: List[Any]) -> bool:
    oc = codes[op.opcodeIndex] if 0 <= op.opcodeIndex < len(codes) else None
    B = _schema().BuiltinOperator
    return oc is not None and max(int(oc.builtinCode), int(oc.deprecatedBuiltinCode)) == B.DEQUANTIZE


__all__ = ["from_tflite", "from_tflite_bytes", "parse", "QUANT_KEY", "SUPPORTED"]
