"""The MLPerf Tiny models on the device (issue 21, item 4): DS-CNN keyword spotting, the FC autoencoder, the digits
CNN, ResNet-8 and MobileNetV1 0.25, built from mcutrain.tiny_models with seeded random weights (BatchNorm folded
at export), exported full-integer int8 (`--quant int8-full`, calibrated on 200 random inputs, every layer frozen)
and f32 (every layer frozen, where it fits the board) for the nucleo_f401re (Cortex-M4F, QEMU mps2-an386) and the
teensy41 (Cortex-M7, QEMU mps2-an500), and run in QEMU: instructions per inference beside the CMSIS-NN figures of
issue 21 (measured the same way on the M4F), RAM planned against RAM measured (static RAM + the stack's peak), and
flash, and how far the int8-full outputs are from the f32 network's on the calibration inputs. A network the
int8-full path cannot convert whole (a layer left f32 inside the int8 body) is reported as not supported instead of
measured.

The measurement is bench/device_cost.py's (its `measure`: export, build with PlatformIO, run with the
instruction-counting plugin between the firmware's markers); the QEMU plugin counts whole calls, so no per-layer
split is reported.

    python bench/tiny_models.py [--calls 3] [--json tiny_models.json] [--net ds_cnn ...] [--board nucleo_f401re]

Needs qemu-system-arm, gcc-arm-none-eabi, libnewlib-arm-none-eabi and PlatformIO (offline is fine).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, List, Optional

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/device_cost.py, whose machinery this reuses
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import device_cost  # noqa: E402

from mcutrain import Checkpoint, Sequential, TrainParams  # noqa: E402
from mcutrain import layers as L  # noqa: E402
from mcutrain.corefacts import QUANT_OPS, RESIDUAL_OPS, WRITES_I8, layer_size_of  # noqa: E402
from mcutrain.exporter.boards import get_board  # noqa: E402
from mcutrain.exporter.export import board_device_model  # noqa: E402
from mcutrain.exporter.memplan import plan  # noqa: E402
from mcutrain.module import Module  # noqa: E402
from mcutrain.tiny_models import ARCHITECTURES  # noqa: E402

# network -> (MACs, CMSIS-NN int8 instructions per inference on the M4F; issue 21's table, None: not measured)
REFERENCE = {
    "ds_cnn": (2_656_768, 9_218_979),
    "fc_autoencoder": (264_192, 840_821),
    "digits_cnn": (23_680, 166_333),
    "resnet8": (12_501_632, 41_070_976),
    "mobilenet_v1_025": (None, None),
}
# network -> CMSIS-NN's peak activation RAM, its int8 tensors + its kernels' scratch (B; issue 21's table)
REFERENCE_ACTIVATIONS = {
    "ds_cnn": (16_000, 256),
    "fc_autoencoder": (768, 0),
    "digits_cnn": (640, 288),
    "resnet8": (49_152, 2_304),
}
LOSS = {"fc_autoencoder": "mse"}  # the others classify (Softmax last)
BOARDS = {"nucleo_f401re": "M4F", "teensy41": "M7"}
for _name, _make in ARCHITECTURES.items():  # device_cost.measure builds the network it is named by a Case
    device_cost.NETS.setdefault(_name, _make)


def ds_cnn_prefix(n: int) -> Sequential:
    """The first n of DS-CNN's convolutions (conv 10x4, depthwise 3x3, pointwise 1x1; each with its ReLU, no
    BatchNorm), then the 25x5 average pool, so every prefix answers 64 values: the differences of their
    instruction counts are the cost of one depthwise and of one pointwise layer (the four blocks have one shape)."""
    mods: List[Module] = [L.Conv2d(1, 64, (10, 4), stride=2, padding="same"), L.Relu()]
    mods += [L.DepthwiseConv2d(64, 3, padding="same"), L.Relu()][: 2 * (n > 1)]
    mods += [L.Conv2d(64, 64, 1), L.Relu()][: 2 * (n > 2)]
    return Sequential(*mods, L.AvgPool2d((25, 5)), L.Flatten(), L.Linear(64, 12), L.Softmax(), input_shape=(49, 10, 1))


SPLIT = {f"ds_cnn_first{n}": (lambda n=n: ds_cnn_prefix(n)) for n in (1, 2, 3)}
device_cost.NETS.update(SPLIT)


def split(calls: int, work: Path) -> List[str]:
    """DS-CNN's int8-full cost per layer on the M4F, from its prefixes (see ds_cnn_prefix), beside the DS-CNN's MACs
    per layer: the first convolution (with the pool and the head), one depthwise layer and one pointwise layer."""
    got = {}
    for name in SPLIT:
        case = device_cost.Case(f"{name}-split", "nucleo_f401re", name, quant="int8-full", trainable="none")
        got[name] = device_cost.measure(case, calls, work)["predict"]
    a, b, c = (got[n] for n in SPLIT)
    dw_macs, pw_macs, conv_macs = 25 * 5 * 64 * 9, 25 * 5 * 64 * 64, 25 * 5 * 64 * 40
    rows = [
        ("conv 10x4 1->64 (+ pool and head)", a, conv_macs, 1),
        ("one depthwise 3x3", b - a, dw_macs, 4),
        ("one pointwise 1x1 64->64", c - b, pw_macs, 4),
    ]
    lines = [
        "| DS-CNN layer (M4F, int8-full, -Os) | instructions | MACs | per MAC | x in DS-CNN |",
        "|---|---|---|---|---|",
    ]
    for what, ins, macs, times in rows:
        lines.append(f"| {what} | {ins:,.0f} | {macs:,} | {ins / macs:.2f} | {times} |")
    return lines


def int8_export(net: str, board: str) -> Any:
    """(the f32 checkpoint, the int8-full device model, the random calibration inputs) of net for board."""
    model = ARCHITECTURES[net]().rand_params(seed=1)
    ck = Checkpoint(model, model.new_sgd(TrainParams(lr=0.01)))
    cal = np.random.default_rng(0).random((20, model.program.n_in), dtype=np.float32)
    return ck, board_device_model(ck, get_board(board), "none", "int8-full", calibration=cal), cal


def activations(net: str, board: str) -> str:
    """The int8-full model's activation RAM beside CMSIS-NN's: the int8 tensors at their peak (the largest input and
    output of one int8 layer together, which the shared buffer holds; with residual blocks, the arena the int8
    tensors cover), and all of the arena and scratch the firmware allocates (a model that takes int8 at the
    firmware's boundary, DeviceModel.int8_io, has the int8 buffer alone; the others also hold the f32 input the
    protocol sends and the f32 outputs it answers with)."""
    ref = REFERENCE_ACTIVATIONS.get(net)
    _, m, _ = int8_export(net, board)
    layers = m.program.layers
    sizes = [layer_size_of(d) for d in layers]
    if any(d.op in RESIDUAL_OPS for d in layers):
        peak = len({j for d, z in zip(layers, sizes) if d.op in WRITES_I8 for j in range(d.out_off, d.out_off + z.out)})
    else:
        i8 = [d.op in WRITES_I8 for d in layers]
        peak = max([sizes[i - 1].out + sizes[i].out for i in range(1, len(sizes)) if i8[i - 1] and i8[i]], default=0)
    ours = f"{4 * peak:,} int8 at peak; {4 * (m.app_arena + m.scratch):,} arena + scratch"
    return ours + (f" | {ref[0]:,} + {ref[1]:,} scratch" if ref else " | -")


def int8_gap(net: str, board: str) -> Optional[str]:
    """Why the int8-full export of net is not full-integer (the f32 ops it leaves between its QUANT and its last
    DEQUANT, for want of an int8 kernel), or None when the whole body is int8 (residual blocks included: their
    RES_BEGIN and RES_SHORTCUT of kind 1 carry int8)."""
    _, m, _ = int8_export(net, board)
    layers = m.program.layers
    names = [d.op.name for d in layers]
    if "QUANT" not in names:
        return "nothing converted to int8"
    last = len(names) - 1 - names[::-1].index("DEQUANT")
    f32 = sorted(
        {
            d.op.name
            for d in layers[names.index("QUANT") : last]
            if d.op not in QUANT_OPS and not (d.op in RESIDUAL_OPS and d.kind == 1)
        }
    )
    return f"int8-full leaves {', '.join(f32)} in f32 (no int8 kernel)" if f32 else None


def int8_tracking(net: str, board: str) -> Dict[str, float]:
    """How closely the int8-full model (run on the host through the C core, the device's twin) tracks the f32
    network on its random calibration inputs: the largest output difference and how often the argmax agrees."""
    ck, m, cal = int8_export(net, board)
    y8 = m.core().forward(np.ascontiguousarray(m.params, np.float32), cal)
    y32 = np.asarray(ck.net.forward(cal), np.float32)
    return {"max_diff": float(np.abs(y8 - y32).max()), "argmax_agree": float(np.mean(y8.argmax(1) == y32.argmax(1)))}


def f32_fits(net: str, board: str) -> bool:
    """Does the f32 export (every layer frozen) fit the board's simulated stand-in?"""
    make = ARCHITECTURES[net]().rand_params(seed=1)
    ck = Checkpoint(make, make.new_sgd(TrainParams(lr=0.01)))
    b = get_board(board)
    return plan(board_device_model(ck, b, "none", sim=True), b, True).fits()


def row(net: str, board: str, quant: str, rep: Dict[str, Any]) -> str:
    """One table row: instructions (and against CMSIS-NN), RAM planned / measured, flash."""
    macs, ref = REFERENCE[net]
    if "error" in rep:
        return f"| {net} | {BOARDS[board]} | {quant} | {rep['error']} | | | | | | |"
    ins = rep["predict"]
    ratio = f"{ins / ref:.2f}x of {ref:,}" if ref and BOARDS[board] == "M4F" and quant == "int8-full" else "-"
    per_mac = f"{ins / macs:.2f}" if macs else "-"
    used = rep["ram_static"] + rep["stack_peak"]
    acts = activations(net, board) if quant == "int8-full" else "- | -"
    return (
        f"| {net} | {BOARDS[board]} | {quant} | {ins:,.0f} | {per_mac} | {ratio} | "
        f"{rep['plan_ram']:,} / {used:,} | {acts} | {rep['flash']:,} |"
    )


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=3, help="PREDICT calls measured per build")
    ap.add_argument("--json", default="tiny_models.json", help="where to write the results")
    ap.add_argument("--workdir", default=None, help="folder for the exported projects (default: a temporary one)")
    ap.add_argument("--net", action="append", choices=list(REFERENCE), default=None, help="only this network")
    ap.add_argument("--board", action="append", choices=list(BOARDS), default=None, help="only this board")
    ap.add_argument("--quant", action="append", choices=["int8-full", "f32"], default=None, help="only this export")
    ap.add_argument("--split", action="store_true", help="also DS-CNN's cost per layer on the M4F (3 more builds)")
    args = ap.parse_args(argv)
    results: Dict[str, Dict[str, Any]] = {}
    lines = [
        "| network | core | export | instructions / inference | per MAC | against CMSIS-NN (M4F) | "
        "RAM planned / measured (B) | activations (B) | CMSIS-NN activations (B) | flash (B) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    with tempfile.TemporaryDirectory(prefix="mcutrain-tiny-models-") as tmp:
        work = Path(args.workdir or tmp)
        if "PLATFORMIO_CORE_DIR" not in os.environ:
            os.environ["PLATFORMIO_CORE_DIR"] = str(work / "pio-core")
        for net in args.net or list(REFERENCE):
            for board in args.board or list(BOARDS):
                for quant in args.quant or ["int8-full", "f32"]:
                    key = f"{net}-{board}-{quant}"
                    loss = LOSS.get(net, "cross_entropy")
                    case = device_cost.Case(key, board, net, quant=quant, trainable="none", loss=loss)
                    try:
                        why = int8_gap(net, board) if quant == "int8-full" else None
                        if why is None and quant == "f32" and not f32_fits(net, board):
                            why = "does not fit the board in f32"
                        if why is not None:
                            results[key] = {"case": asdict(case), "error": f"not supported: {why}"}
                        else:
                            results[key] = device_cost.measure(case, args.calls, work)
                            if quant == "int8-full":
                                results[key]["int8_vs_f32"] = t = int8_tracking(net, board)
                                diff, agree = t["max_diff"], t["argmax_agree"]
                                print(f"{key}: int8 vs f32 on the calibration inputs: max |diff| {diff:.3g}, "
                                      f"argmax agrees {agree:.0%}", flush=True)  # fmt: skip
                    except Exception as e:  # a case that cannot be exported or run is reported, not fatal
                        results[key] = {"case": asdict(case), "error": str(e).splitlines()[0][:200]}
                    lines.append(row(net, board, quant, results[key]))
                    print(lines[-1], flush=True)
        split_lines = split(args.calls, work) if args.split else []
    print()
    print(
        "QEMU (M4F: mps2-an386, M7: mps2-an500), instructions per inference (mean of the calls), -Os, weights random "
        "(seed 1), every layer frozen; RAM planned = the memory plan against the stand-in, measured = static RAM + "
        "stack peak"
    )
    print("\n".join(lines))
    if split_lines:
        print()
        print("\n".join(split_lines))
    Path(args.json).write_text(json.dumps({"results": results, "reference": REFERENCE}, indent=2, sort_keys=True))
    print(f"written {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
