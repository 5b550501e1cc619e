"""Memory plan of an export on a board: flash (code estimate + constants) and RAM (parameters,
optimizer state, trace arena, scratch, I/O buffers, stack margin), checked before anything is built.
A quantized export also shows what it saves against the f32 export with the same trainable layers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Sequence, Tuple

from mcutrain.corefacts import (
    LAYER_DTYPE,
    QUANT_OPS,
    WRITES_I8,
    Op,
    OptKind,
    Storage,
    layer_size_of,
    save_slot_bytes,
)

from ..errors import McuTrainError
from .boards import Board
from .device_model import DeviceModel

APP_FIXED_RAM = 120  # app bookkeeping, mct_net, mct_opt, hash, train state
# RAM the platform's runtime takes besides our buffers (serial buffers, libc, Arduino core) on the
# real board; the simulated stand-ins run mcutrain's bare-metal ports, which need none of it
RUNTIME_RAM = {"avr": 190, "host": 0}
RUNTIME_RAM_DEFAULT = 2048
# Code an AVR firmware needs beyond the board's code_estimate (which covers the protocol, Dense/Linear,
# Bias1d, the common activations, Softmax and SGD), per op and optimizer compiled in;
# measured with avr-gcc -Os. Other cores take these times their board file's op_code_scale (measured on
# the stand-ins with a network of all of them: Cortex-M4F/M7/M33 0.75, M3 1.0, M0 1.1, rv32imc 1.15).
AVR_OP_CODE = {
    Op.GLU: 5000,
    Op.RMSNORM: 2500,
    Op.DYT: 2500,
    Op.SWISH: 2000,
    Op.CONV1D: 1500,
    Op.DIAG: 1000,
    Op.SCALE: 800,
    Op.RES_END: 300,
    Op.RES_SHORTCUT: 550,  # its kernels and dispatch, avr-gcc 5.4 -Os (the block check is counted with the base code)
    Op.QDENSE: 2700,
    # the spatial ops (forward, backward, check; measured with avr-gcc 5.4 -Os), and their shared geometry check
    Op.CONV2D: 7800,
    Op.DWCONV2D: 6450,
    Op.MAXPOOL2D: 3300,
    Op.AVGPOOL2D: 3250,
    Op.BATCHNORM: 5600,
    # the full-integer spatial ops (forward, check, size; avr-gcc 5.4 -Os); they share QDENSE's requantization
    Op.QCONV2D: 2100,
    Op.QDWCONV2D: 2100,
    Op.QMAXPOOL2D: 1150,
    Op.QAVGPOOL2D: 1650,
    Op.QSOFTMAX: 3700,  # forward, check, size and the 64-bit multiply it links (3,734 B alone, avr-gcc 5.4 -Os)
    Op.QRES_END: 2950,  # forward, check, size in 64-bit integers (layer_qadd.o 2,932 B, avr-gcc 5.4 -Os)
}
AVR_SPATIAL_CHECK_CODE = 1150  # mct_spatial_check, once for all spatial ops
AVR_SPATIAL_STACK = 260  # stack beyond the board's margin that the spatial kernels need on AVR (see _spatial_stack)
SPATIAL_OPS = (Op.CONV2D, Op.DWCONV2D, Op.MAXPOOL2D, Op.AVGPOOL2D)
Q_SPATIAL_OPS = (Op.QCONV2D, Op.QDWCONV2D, Op.QMAXPOOL2D, Op.QAVGPOOL2D)  # also call mct_spatial_check
AVR_Q_SPATIAL_STACK = 50  # the int8 ones need less: the int8-full digits CNN training its head biases peaked at
# 469 B on the genuine Arduino core in simavr (447 B on the stand-in)
# and per optimizer (its square roots and divisions are soft-float library code on AVR; a board counts these
# times its opt_code_scale: about 0.2 where an FPU does them)
AVR_OPT_CODE = {OptKind.MOMENTUM: 2000, OptKind.RMSPROP: 3600, OptKind.RMSPROP_MOMENTUM: 4300, OptKind.ADAM: 4600}
# frozen layers with int8 weights (quant="int8": the input quantized in soft float); 900 B left the Uno's
# relu-sgd-int8-biases firmware of tests/test_sim_avr.py 18 B under its plan (21,462 B built) once the app read
# and wrote its input and output through functions
AVR_I8_WEIGHTS_CODE = 1100
# the const-blob kernels of frozen convolutions (mct_*_const_forward / _const_backward, avr-gcc 5.4 -Os: Conv2d
# 1,856 + 1,734 B, depthwise 1,934 + 2,772 B), per op with a layer in flash; a tiny 1-D CNN frozen in f32 overflowed
# the Uno's flash by 1,324 B while the plan, without them, left 2,280 B
AVR_CONST_CONV_CODE = {Op.CONV2D: 3600, Op.DWCONV2D: 4700}
# and their int8-weight variants, per op with such a layer (layer_*.o with and without MCT_I8_WEIGHTS_BIT: Conv2d
# +792 B, depthwise +724 B; arm-none-eabi-gcc -Os for the M4F: +948 B and +1,258 B)
AVR_I8_CONV_CODE = {Op.CONV2D: 800, Op.DWCONV2D: 750}
# The feature front end (every pipeline kind is linked in: the kind is data), with PREDICT_RAW, TRAIN_RAW, FEATURES,
# CAPTURE and the port's sensor read, times the board's op_code_scale. Measured (a 32 x 3 motion pipeline with
# 2 FFT bands against the same network without one, SGD): Uno (simavr) 13,448 B, Cortex-M3 13,492, Cortex-M4F
# 10,572 (0.79).
AVR_FEAT_CODE = 13600
# what a pipeline without the FFT leaves out (motion statistics only, no bands): a stats-only 32 x 3 pipeline built
# 29,792 B against 30,792 B with 2 bands (Uno, simavr); on the genuine Arduino core a 32 x 1 stats-only pipeline's
# example sketch built 28,912 B against 16,620 B without the pipeline (+12,292 B)
AVR_FEAT_NO_FFT = 1000


class MemoryPlanError(McuTrainError, ValueError):
    """The model does not fit the board; the message says by how much and what to change."""


@dataclass
class MemoryPlan:
    """Rows of (what, RAM bytes, flash bytes) and the board's budgets."""

    board: Board
    rows: List[Tuple[str, int, int]] = field(default_factory=list)
    ram_budget: int = 0
    flash_budget: int = 0
    save_bytes: int = 0  # storage two save slots need (docs/protocol.md; with --save params no optimizer slots)
    save: str = "all"  # what a device save keeps
    quant: str = "f32"
    baseline_ram: Optional[int] = None  # the f32 export's totals (quantized exports only)
    baseline_flash: Optional[int] = None

    @property
    def ram(self) -> int:
        """RAM needed, bytes."""
        return sum(r for _, r, _ in self.rows)

    @property
    def flash(self) -> int:
        """Flash needed, bytes."""
        return sum(f for _, _, f in self.rows)

    @property
    def ram_saved(self) -> int:
        """RAM bytes the quantization saves against the f32 export (0 for f32)."""
        return 0 if self.baseline_ram is None else self.baseline_ram - self.ram

    @property
    def flash_saved(self) -> int:
        """Flash bytes the quantization saves against the f32 export (0 for f32)."""
        return 0 if self.baseline_flash is None else self.baseline_flash - self.flash

    @property
    def ram_left(self) -> int:
        """RAM bytes the board has beyond the plan (negative: over the budget)."""
        return self.ram_budget - self.ram

    @property
    def flash_left(self) -> int:
        """Flash bytes the board has beyond the plan (negative: over the budget)."""
        return self.flash_budget - self.flash

    def fits(self) -> bool:
        """Does it fit both budgets?"""
        return self.ram <= self.ram_budget and self.flash <= self.flash_budget

    def table(self) -> str:
        """The plan as a text table."""
        w = max(len(n) for n, _, _ in self.rows + [("total", 0, 0)])
        lines = [
            f"memory plan for {self.board.name} ({self.board.title})",
            f"  {'':{w}}  {'RAM B':>10}  {'flash B':>10}",
        ]
        for n, r, f in self.rows:
            lines.append(f"  {n:{w}}  {r:>10,}  {f:>10,}")
        lines.append(f"  {'total':{w}}  {self.ram:>10,}  {self.flash:>10,}")
        lines.append(f"  {'board has':{w}}  {self.ram_budget:>10,}  {self.flash_budget:>10,}")
        lines.append(f"  {'left':{w}}  {self.ram_left:>10,}  {self.flash_left:>10,}")
        if self.baseline_ram is not None and self.baseline_flash is not None:
            lines.append(f"  {'f32 export':{w}}  {self.baseline_ram:>10,}  {self.baseline_flash:>10,}")
            lines.append(f"  {self.quant + ' saves':{w}}  {self.ram_saved:>10,}  {self.flash_saved:>10,}")
        kept = "the parameters" if self.save == "params" else "the parameters and the optimizer state"
        if self.board.storage == 0:
            lines.append(
                f"  {self.board.name} has no storage for saves: SAVE will answer 'not supported' (what the device "
                f"learns lasts until it is reset; `mcutrain device pull` keeps it on the host)"
            )
        elif self.board.storage >= self.save_bytes:
            lines.append(
                f"  device saves ({kept}) use {self.save_bytes:,} B of the board's {self.board.storage:,} B of storage"
            )
        else:
            ram = {n: r for n, r, _ in self.rows}
            hints = ["save the parameters only with --save params"] if self.save != "params" else []
            hints.append("train fewer layers")
            if self.save != "params" and ram.get("optimizer state", 0):
                hints.append("use an optimizer without state: --optimizer sgd")
            lines.append(
                f"  device saves ({kept}) need {self.save_bytes:,} B of storage, {self.board.name} has "
                f"{self.board.storage:,} B: SAVE will answer 'not supported' ({', or '.join(hints)})"
            )
        return "\n".join(lines)


def extra_code(m: DeviceModel, board: Board) -> int:
    """Code beyond the board's estimate for the heavier ops, the flash kernels of frozen convolutions and the
    optimizers (AVR_OP_CODE, AVR_CONST_CONV_CODE, AVR_I8_CONV_CODE and AVR_OPT_CODE times the board's op_code_scale
    and opt_code_scale)."""
    ops = {d.op for d in m.program.layers}
    kind = m.opt_kind
    i8 = any(d.storage == Storage.I8 for d in m.program.layers)
    avr_ops = sum(AVR_OP_CODE.get(op, 0) for op in ops) + (AVR_I8_WEIGHTS_CODE if i8 else 0)
    in_flash = [d for d in m.program.layers if d.storage in (Storage.F32, Storage.I8)]
    avr_ops += sum(AVR_CONST_CONV_CODE.get(op, 0) for op in {d.op for d in in_flash})
    avr_ops += sum(AVR_I8_CONV_CODE.get(op, 0) for op in {d.op for d in in_flash if d.storage == Storage.I8})
    avr_ops += AVR_SPATIAL_CHECK_CODE if any(op in SPATIAL_OPS + Q_SPATIAL_OPS for op in ops) else 0
    return round(avr_ops * board.op_code_scale + AVR_OPT_CODE.get(kind, 0) * board.opt_code_scale)


def _spatial_stack(m: DeviceModel, board: Board) -> int:
    """Stack the convolution and pooling kernels need beyond the board's margin: on AVR their loops keep more 32-bit
    counters on the stack (a 1-D CNN peaked at 588 B in simavr, against 300-340 B for dense networks)."""
    if board.core != "avr":
        return 0
    if any(d.op in SPATIAL_OPS for d in m.program.layers):
        return AVR_SPATIAL_STACK
    return AVR_Q_SPATIAL_STACK if any(d.op in Q_SPATIAL_OPS for d in m.program.layers) else 0


def _covered(regions: Sequence[Tuple[int, int]]) -> int:
    """Arena floats that the (offset, length) regions cover together (int8 outputs that take turns share one)."""
    total, end = 0, 0
    for off, n in sorted(regions):
        total += max(0, off + n - max(off, end))
        end = max(end, off + n)
    return total


def plan(m: DeviceModel, board: Board, sim: bool = False) -> MemoryPlan:
    """The memory plan of a device model on a board (sim: against the simulated stand-in's RAM)."""
    p = m.program
    table_bytes = LAYER_DTYPE.itemsize * len(p.layers) + 32  # sizeof(mct_layer) each, + mct_net
    sizes = [layer_size_of(d) for d in p.layers]  # what the core says each layer needs
    q_bytes = sum(s.consts for d, s in zip(p.layers, sizes) if d.op in QUANT_OPS)
    i8_arena = _covered([(d.out_off, s.out) for d, s in zip(p.layers, sizes) if d.op in WRITES_I8])
    rows = [
        ("parameters (f32, RAM)", 4 * p.n_params, 4 * p.n_params),
        ("optimizer state", 4 * p.n_params * m.opt_slots, 0),
        ("trace arena", 4 * (m.app_arena - i8_arena), 0),
        ("backward scratch", 4 * m.scratch, 0),
        ("target + frame buffer", 4 * m.app_target + m.rx_max, 0),
        ("frozen layers (flash)", 0, len(bytes(p.cdata)) - q_bytes),
        ("layer table", 0, table_bytes),
        ("runtime + bookkeeping", (0 if sim else RUNTIME_RAM.get(board.core, RUNTIME_RAM_DEFAULT)) + APP_FIXED_RAM, 0),
        ("stack margin", board.stack_margin + _spatial_stack(m, board), 0),
        ("code (estimate)", 0, board.code_estimate + extra_code(m, board)),
    ]
    if board.framework_code and not sim:  # the real board's Arduino build; its stand-in runs a bare-metal port
        rows.append(("Arduino framework (estimate)", 0, board.framework_code))
    if q_bytes:  # full-integer int8: its constants and its int8 activations
        rows[6:6] = [("full-integer layers (flash)", 0, q_bytes)]
        rows[3:3] = [("int8 activations (arena)", 4 * i8_arena, 0)]
    fe = m.feat
    if fe is not None:  # the front end: the raw window, the pipeline's tables (RAM, computed at boot), its scratch
        z = fe.spec.sizes()
        raw = z.n_in * (2 if fe.spec.kind != "motion" else 4)
        norm = 0 if fe.mean is None else 8 * p.n_in
        rows[-3:-3] = [("front end: raw window + tables + scratch", raw + 4 * (z.tables + z.scratch), norm)]
        fft = fe.spec.kind != "motion" or fe.spec.n_bands > 0
        code = AVR_FEAT_CODE - (0 if fft else AVR_FEAT_NO_FFT)
        rows.append(("front end code (estimate)", 0, round(code * board.op_code_scale)))
    # two save slots of: a header, the RAM parameters, the optimizer slots, the train state (the core's layout)
    save = 2 * save_slot_bytes(p.n_params, m.save_slots)
    mp = MemoryPlan(board, rows, board.sim_ram if sim else board.ram, board.flash, save, quant=m.quant, save=m.save)
    if m.baseline is not None:
        base = plan(m.baseline, board, sim)
        mp.baseline_ram, mp.baseline_flash = base.ram, base.flash
    return mp


def check_fits(mp: MemoryPlan, advice: Optional[str] = None) -> None:
    """Raise MemoryPlanError with the numbers and what to change when the plan does not fit."""
    if mp.fits():
        return
    b = mp.board
    parts = []
    if mp.ram > mp.ram_budget:
        parts.append(f"needs {mp.ram:,} B RAM, {b.name} has {mp.ram_budget:,} B")
    if mp.flash > mp.flash_budget:
        parts.append(f"needs {mp.flash:,} B flash, {b.name} has {mp.flash_budget:,} B")
    msg = "the model does not fit: " + " and ".join(parts)
    raise MemoryPlanError(msg + (f": {advice}" if advice else "") + "\n" + mp.table())
