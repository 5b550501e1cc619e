"""Device cost (issues 4 and 11): guest instructions per inference and per SGD training step on the Cortex-M4F
(QEMU mps2-an386, counted by mcutrain's TCG plugin between the firmware's marker functions), exact cycles on the
ATmega328P (simavr, the harness's markers), code size split into the core / the application and protocol / the
C library and startup / the weights (from the ELF's symbols and the objects that define them), static RAM and
stack, each row with the published reference beside it.

N1 = 20-35 (sigmoid)-10 (softmax), N2 = 64-32 (ReLU)-10 (softmax), digits = issue 21's digits CNN (8x8x1: conv 3x3
1->8, max pool 2, conv 3x3 8->16, max pool 2, dense 64->10); cross-entropy, plain SGD, one sample. f32
rows train every layer (AVR: the last layer, or only the biases); 'frozen' rows keep every layer in flash;
int8 = int8 weights (per output scale, `--quant int8`), int8-full = full-integer (`--quant int8-full`,
calibrated on 200 random inputs). Per call = the mean over the calls made (inputs drawn at random); the QEMU
figures include one empty marker pair ('marker', a few instructions).

    python bench/device_cost.py [--calls 20] [--json device_cost.json] [--only m4f|avr] [--case NAME ...]

Needs qemu-system-arm, gcc-arm-none-eabi, libnewlib-arm-none-eabi, simavr, libsimavr-dev, gcc-avr, avr-libc, gcc
and PlatformIO (offline is fine).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcutrain import Checkpoint, Sequential, TrainParams, losses  # noqa: E402
from mcutrain import layers as L  # noqa: E402
from mcutrain.exporter import sim  # noqa: E402
from mcutrain.exporter.boards import get_board  # noqa: E402
from mcutrain.exporter.export import export_project  # noqa: E402
from mcutrain.exporter.sim_qemu import set_env_option  # noqa: E402
from mcutrain.module import Module  # noqa: E402
from mcutrain.tiny_models import digits_cnn  # noqa: E402

NETS = {
    "N1": lambda: Sequential(L.Linear(20, 35), L.Sigmoid(), L.Linear(35, 10), L.Softmax()),
    "N2": lambda: Sequential(L.Linear(64, 32), L.Relu(), L.Linear(32, 10), L.Softmax()),
    "digits": digits_cnn,  # issue 21's digits CNN (8x8x1, 23,680 MACs)
}
M4F_BOARD, AVR_BOARD = "nano33ble", "uno"
NM = {"cortex-m4f": "arm-none-eabi-nm", "avr": "avr-nm"}
NM_OBJ = {"avr": "avr-gcc-nm"}  # the AVR build uses LTO: its objects need gcc's nm (the plugin)


@dataclass(frozen=True)
class Case:
    """One exported firmware measured in its simulator."""

    name: str
    board: str
    net: str
    quant: str = "f32"
    trainable: str = "all"
    level: str = "Os"
    loss: str = "cross_entropy"  # the mcutrain.losses function the export is given


CASES = [
    Case("m4f-N1-Os", M4F_BOARD, "N1"),
    Case("m4f-N1-O2", M4F_BOARD, "N1", level="O2"),
    Case("m4f-N2-Os", M4F_BOARD, "N2"),
    Case("m4f-N2-O2", M4F_BOARD, "N2", level="O2"),
    Case("m4f-N2-frozen", M4F_BOARD, "N2", trainable="none"),
    Case("m4f-N2-int8", M4F_BOARD, "N2", quant="int8", trainable="none"),
    Case("m4f-N2-int8full", M4F_BOARD, "N2", quant="int8-full", trainable="none"),
    Case("avr-N1-frozen", AVR_BOARD, "N1", trainable="none"),
    Case("avr-N1-last1", AVR_BOARD, "N1", trainable="last:1"),
    Case("avr-N1-biases", AVR_BOARD, "N1", trainable="biases"),
    Case("avr-N2-int8full", AVR_BOARD, "N2", quant="int8-full", trainable="none"),
    Case("m4f-digits-frozen", M4F_BOARD, "digits", trainable="none"),
    Case("m4f-digits-int8full", M4F_BOARD, "digits", quant="int8-full", trainable="none"),
    Case("avr-digits-int8full", AVR_BOARD, "digits", quant="int8-full", trainable="none"),
]

# The table: (row, case, what, published reference (same measure, same simulator), target). what is
# 'predict' / 'train' (per call) or 'size:<part>' (bytes of flash). A target None: report only.
ROWS: List[Tuple[str, str, str, str, Optional[str]]] = [
    ("M4F N1 inference (insns)", "m4f-N1-Os", "predict", "AIfES f32 15,837; CMSIS-NN int8 10,747", "<= 5,000"),
    (
        "M4F N2 (64-32relu-10) inference",
        "m4f-N2-Os",
        "predict",
        "AIfES 25,595; emlearn 19,480; CMSIS-NN int8 14,019",
        "<= 7,000",
    ),
    ("M4F N1 SGD step", "m4f-N1-Os", "train", "AIfES 202,819", "<= 15,000"),
    ("M4F N2 SGD step", "m4f-N2-Os", "train", "AIfES 424,916", "<= 25,000"),
    ("M4F N1 inference -O2", "m4f-N1-O2", "predict", "", None),
    ("M4F N1 SGD step -O2", "m4f-N1-O2", "train", "", None),
    ("M4F N2 inference -O2", "m4f-N2-O2", "predict", "", None),
    ("M4F N2 SGD step -O2", "m4f-N2-O2", "train", "", None),
    ("M4F f32 frozen 64-32-10 inference", "m4f-N2-frozen", "predict", "", None),
    ("M4F int8 weights frozen 64-32-10 inference", "m4f-N2-int8", "predict", "", "<= f32 frozen"),
    ("M4F int8-full N2 inference", "m4f-N2-int8full", "predict", "CMSIS-NN int8 14,019", "<= 7,000"),
    ("ATmega328P int8-full 64-32-10 inference (cycles)", "avr-N2-int8full", "predict", "AIfES q7 373,817", "<= 60,000"),
    (
        "ATmega328P f32 N1 inference (cycles)",
        "avr-N1-frozen",
        "predict",
        "AIfES f32 465,417; emlearn N2 787,617",
        "<= 250,000",
    ),
    (
        "ATmega328P f32 SGD step, N1 last layer trainable",
        "avr-N1-last1",
        "train",
        "AIfES cannot train N1 in 2 KB (needs ~15.5 KB)",
        None,
    ),
    ("ATmega328P f32 SGD step, N1 biases trainable", "avr-N1-biases", "train", "", None),
    (
        "M4F code of the core alone, N1 + SGD, -Os (B)",
        "m4f-N1-Os",
        "size:core",
        "AIfES 6.6 KB; CMSIS-NN int8 inference 4.7 KB",
        "<= 5,120",
    ),
    ("M4F application + protocol, N1, -Os (B)", "m4f-N1-Os", "size:app", "", None),
    ("M4F C library + startup, N1, -Os (B)", "m4f-N1-Os", "size:libc", "", None),
    ("M4F weights and model tables, N1 (B)", "m4f-N1-Os", "size:weights", "", None),
    ("M4F whole firmware, N1, -Os (B)", "m4f-N1-Os", "size:flash", "16.7 KB with 4.4 KB of weights (issue 11)", None),
    ("M4F digits CNN f32 frozen inference", "m4f-digits-frozen", "predict", "", None),
    (
        "M4F digits CNN int8-full inference",
        "m4f-digits-int8full",
        "predict",
        "CMSIS-NN int8 166,333 (issue 21, measured)",
        "<= 166,333",
    ),
    ("ATmega328P digits CNN int8-full inference (cycles)", "avr-digits-int8full", "predict", "", None),
    ("ATmega328P whole firmware, digits CNN int8-full (B)", "avr-digits-int8full", "size:flash", "", None),
    ("ATmega328P code of the core, N1 biases trainable (B)", "avr-N1-biases", "size:core", "", None),
    ("ATmega328P whole firmware, N1 biases trainable (B)", "avr-N1-biases", "size:flash", "", None),
]


def defined_symbols(nm: str, path: Path) -> Dict[str, int]:
    """{symbol: size} of the symbols that path (an object, archive or ELF) defines in code, constants or
    initialised data (size 0 where nm gives none, as for LTO objects); names without a compiler suffix
    (mct_forward.constprop.0 -> mct_forward)."""
    out = subprocess.run([nm, "-S", "--defined-only", str(path)], capture_output=True, text=True, check=True).stdout
    syms: Dict[str, int] = {}
    for line in out.splitlines():
        parts = line.split()
        if len(parts) in (3, 4) and parts[-2].lower() in ("t", "r", "d"):
            name = parts[-1].split(".")[0]
            syms[name] = syms.get(name, 0) + (int(parts[1], 16) if len(parts) == 4 else 0)
    return syms


def size_split(nm: str, nm_obj: str, elf: Path, flash: int) -> Dict[str, int]:
    """Flash bytes of the firmware by origin: 'core' (lib/mcutrain_core), 'weights' (src/model.c: parameters,
    layer table, optimizer config), 'app' (the rest of src/: application, protocol, CRC, port), 'libc' (the
    remainder: C library, libgcc, startup, vector table, alignment) and 'flash' (the whole). Symbols are
    attributed by the object files of the build that define them (code a compiler inlined into a function of
    another file counts there)."""
    owner: Dict[str, str] = {}
    for obj in sorted(elf.parent.rglob("*.o")):
        rel = str(obj.relative_to(elf.parent))
        part = "core" if "mcutrain_core" in rel else ("weights" if rel.endswith("model.o") else None)
        if part is None and rel.startswith("src"):
            part = "app"
        if part is None:
            continue
        for s in defined_symbols(nm_obj, obj):
            owner.setdefault(s, part)
    split = {"core": 0, "app": 0, "weights": 0}
    for s, size in defined_symbols(nm, elf).items():
        part = owner.get(s)
        if part:
            split[part] += size
    split["libc"] = flash - split["core"] - split["app"] - split["weights"]
    split["flash"] = flash
    return split


def measure(case: Case, calls: int, workdir: Path) -> Dict[str, Any]:
    """Export, build and run one case in its board's simulator; returns the simulator's report plus sizes."""
    net: Module = NETS[case.net]().rand_params(seed=1)
    ck = Checkpoint(net, net.new_sgd(TrainParams(lr=0.01)))
    rng = np.random.default_rng(0)
    n_in = net.program.n_in
    calib = rng.random((200, n_in), dtype=np.float32) if case.quant == "int8-full" else None
    r = export_project(
        ck,
        case.board,
        workdir / case.name,
        quant=case.quant,
        trainable=case.trainable,
        loss=getattr(losses, case.loss),
        sim=True,
        force=True,
        calibration=calib,
    )
    board = get_board(case.board)
    if board.core != "avr":
        set_env_option(r.path, f"sim-{case.board}", "custom_opt_level", case.level)
    n_out = r.model.program.n_out
    with sim.start(r.path, r.board, measure=True) as s:
        for _ in range(calls):
            s.device.predict(rng.random(n_in, dtype=np.float32))
        if case.trainable != "none":
            for k in range(calls):
                s.device.train(rng.random(n_in, dtype=np.float32), np.eye(n_out, dtype=np.float32)[k % n_out])
        rep = s.report()
    elf = sim.simulator_for(r.board).firmware_path(r.path, r.board)
    nm = NM.get(board.core, "arm-none-eabi-nm")
    rep["size"] = size_split(nm, NM_OBJ.get(board.core, nm), elf, int(rep["flash"]))
    rep.update(case=asdict(case), n_params=r.model.program.n_params, plan_ram=r.plan.ram, plan_flash=r.plan.flash)
    return rep


def fmt(v: Optional[float]) -> str:
    """A count with thousands separators, or '-'."""
    return "-" if v is None else f"{v:,.0f}"


def value(results: Dict[str, Dict[str, Any]], case: str, what: str) -> Optional[float]:
    """The figure of a row, or None when its case did not run (or failed: then 'error')."""
    rep = results.get(case)
    if rep is None or "error" in rep:
        return None
    if what.startswith("size:"):
        return rep["size"][what[5:]]
    return rep.get(what)


def table(results: Dict[str, Dict[str, Any]]) -> str:
    """The issue's table: every row's figure next to its reference and target."""
    w = max(len(r[0]) for r in ROWS)
    head = f"{'work':{w}} | {'mcutrain':>10} | {'reference (published, same measure)':50} | target"
    lines = [head, "-" * len(head)]
    for name, case, what, ref, target in ROWS:
        if case not in results:
            continue
        v = value(results, case, what)
        shown = fmt(v) if v is not None else ("error" if "error" in results[case] else "-")
        if target == "<= f32 frozen":
            target = f"<= {fmt(value(results, 'm4f-N2-frozen', 'predict'))} (f32 frozen, this run)"
        lines.append(f"{name:{w}} | {shown:>10} | {ref:50} | {target or 'report'}")
    return "\n".join(lines)


def details(results: Dict[str, Dict[str, Any]]) -> str:
    """Per case: calls, marker overhead, text, static RAM, stack peak."""
    head = (
        f"{'case':16} {'unit':12} {'predict':>9} {'train':>9} {'marker':>6} {'flash B':>8} {'RAM B':>6} {'stack B':>7}"
    )
    lines = [head, "-" * len(head)]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"{name:16} error: {r['error']}")
            continue
        lines.append(
            f"{name:16} {r['unit']:12} {fmt(r.get('predict')):>9} {fmt(r.get('train')):>9} "
            f"{fmt(r.get('marker_overhead')):>6} {fmt(r['flash']):>8} {fmt(r['ram_static']):>6} "
            f"{fmt(r.get('stack_peak')):>7}"
        )
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=20, help="PREDICT and TRAIN calls measured per build")
    ap.add_argument("--json", default="device_cost.json", help="where to write the results")
    ap.add_argument("--workdir", default=None, help="folder for the exported projects (default: a temporary one)")
    ap.add_argument("--only", choices=["m4f", "avr"], default=None, help="run only the cases of one target")
    ap.add_argument("--case", action="append", default=None, help="run only this case (repeatable), e.g. m4f-N1-Os")
    args = ap.parse_args(argv)
    results: Dict[str, Dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="mcutrain-device-cost-") as tmp:
        work = Path(args.workdir or tmp)
        if "PLATFORMIO_CORE_DIR" not in os.environ:
            os.environ["PLATFORMIO_CORE_DIR"] = str(work / "pio-core")  # its own, so platform names cannot clash
        for case in CASES:
            if (args.only and not case.name.startswith(args.only)) or (args.case and case.name not in args.case):
                continue
            try:
                results[case.name] = measure(case, args.calls, work)
            except Exception as e:  # a case that cannot run (e.g. over a board's budget) is reported, not fatal
                results[case.name] = {"case": asdict(case), "error": str(e).splitlines()[0][:200]}
    print(
        f"Cortex-M4F: QEMU mps2-an386 ({M4F_BOARD}), instructions per call; ATmega328P: simavr ({AVR_BOARD}, "
        "16 MHz), cycles per call; one sample; -Os unless marked; code sizes in bytes of flash"
    )
    print(table(results))
    print()
    print(details(results))
    out = {"unit": {"m4f": "instructions", "avr": "cycles"}, "results": results, "rows": ROWS}
    Path(args.json).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    print(f"written {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
