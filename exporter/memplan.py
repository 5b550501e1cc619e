"""Memory plan of an export on a board: flash (code estimate + constants) and RAM (parameters,
optimizer state, trace arena, scratch, I/O buffers, stack margin), checked before anything is built."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional, Tuple

from .boards import Board
from .cgen import DeviceModel

LAYER_BYTES = 48          # sizeof(mct_layer)
APP_FIXED_RAM = 120       # app bookkeeping, mct_net, mct_opt, hash, train state
# RAM the platform's runtime takes besides our buffers (serial buffers, libc, Arduino core)
RUNTIME_RAM = {"avr": 190, "host": 0}
RUNTIME_RAM_DEFAULT = 2048


class MemoryPlanError(ValueError):
    """The model does not fit the board; the message says by how much and what to change."""


@dataclass
class MemoryPlan:
    """Rows of (what, RAM bytes, flash bytes) and the board's budgets."""
    board: Board
    rows: List[Tuple[str, int, int]] = field(default_factory=list)
    ram_budget: int = 0
    flash_budget: int = 0

    @property
    def ram(self) -> int:
        """RAM needed, bytes."""
        return sum(r for _, r, _ in self.rows)

    @property
    def flash(self) -> int:
        """Flash needed, bytes."""
        return sum(f for _, _, f in self.rows)

    def fits(self) -> bool:
        """Does it fit both budgets?"""
        return self.ram <= self.ram_budget and self.flash <= self.flash_budget

    def table(self) -> str:
        """The plan as a text table."""
        w = max(len(n) for n, _, _ in self.rows + [("total", 0, 0)])
        lines = [f"memory plan for {self.board.name} ({self.board.title})",
                 f"  {'':{w}}  {'RAM B':>10}  {'flash B':>10}"]
        for n, r, f in self.rows:
            lines.append(f"  {n:{w}}  {r:>10,}  {f:>10,}")
        lines.append(f"  {'total':{w}}  {self.ram:>10,}  {self.flash:>10,}")
        lines.append(f"  {'board has':{w}}  {self.ram_budget:>10,}  {self.flash_budget:>10,}")
        return "\n".join(lines)


def plan(m: DeviceModel, board: Board, sim: bool = False) -> MemoryPlan:
    """The memory plan of a device model on a board (sim: against the simulated stand-in's RAM)."""
    p = m.program
    table_bytes = LAYER_BYTES * len(p.layers) + 32
    rows = [
        ("parameters (f32, RAM)", 4 * p.n_params, 4 * p.n_params),
        ("optimizer state", 4 * p.n_params * m.opt_slots, 0),
        ("trace arena", 4 * p.arena, 0),
        ("backward scratch", 4 * m.scratch, 0),
        ("target + frame buffer", 4 * p.n_out + m.rx_max, 0),
        ("frozen layers (flash)", 0, len(bytes(p.cdata))),
        ("layer table", 0, table_bytes),
        ("runtime + bookkeeping", RUNTIME_RAM.get(board.core, RUNTIME_RAM_DEFAULT) + APP_FIXED_RAM, 0),
        ("stack margin", board.stack_margin, 0),
        ("code (estimate)", 0, board.code_estimate),
    ]
    return MemoryPlan(board, rows, board.sim_ram if sim else board.ram, board.flash)


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
