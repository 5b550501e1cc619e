"""Sizes from the command line are bounded like sizes from files: before a run starts, what it will allocate
for a size the user gave (a batch, a number of samples) is computed and compared with the memory this process
can take; a size that does not fit is a ConfigError naming the option, the memory it needs and the largest
value that fits, instead of a MemoryError (or the system's out-of-memory killer) after the work began."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Optional

from .errors import ConfigError
from .module import Module

try:
    import resource
except ImportError:  # pragma: no cover - not on Windows
    resource = None  # type: ignore[assignment]

FALLBACK_BUDGET = 4 << 30  # where the system says nothing about its memory
SHARE = 0.5  # of the memory available: the rest stays for the program, its data and everything else running
# the value a refusal suggests fits this share of the budget: the next run's budget differs a little (the
# process's own size moves), and a suggestion at the very edge would be refused in turn
HINT_HEADROOM = 0.95


def available_memory() -> int:
    """Bytes this process can still allocate: the system's available memory (MemAvailable, else all of it),
    and under an address-space limit (RLIMIT_AS) what is left of it."""
    avail: Optional[int] = None
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                avail = int(line.split()[1]) * 1024
                break
    except (OSError, ValueError, IndexError):
        pass
    if avail is None:
        try:
            avail = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            avail = FALLBACK_BUDGET
    soft, _ = resource.getrlimit(resource.RLIMIT_AS) if resource is not None else (-1, -1)
    if resource is not None and soft != resource.RLIM_INFINITY:
        used = 0
        try:
            for line in Path("/proc/self/status").read_text().splitlines():
                if line.startswith("VmSize:"):
                    used = int(line.split()[1]) * 1024
        except (OSError, ValueError, IndexError):
            pass
        avail = min(avail, max(0, soft - used))
    return avail


def memory_budget() -> int:
    """Bytes one size given on the command line may cost: SHARE of available_memory()."""
    return int(available_memory() * SHARE)


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB" if n >= 2**28 else f"{n / 2**20:.1f} MiB"


def check_size(option: str, value: int, need: Callable[[int], int], budget: Optional[int] = None) -> None:
    """ConfigError unless need(value) bytes fit the budget (memory_budget() by default); the message names
    the option, what the value needs and the largest value that fits HINT_HEADROOM of the budget (need must
    grow with the value)."""
    budget = memory_budget() if budget is None else budget
    cost = need(value)
    if cost <= budget:
        return
    room = int(budget * HINT_HEADROOM)
    lo, hi = 0, value  # need(lo) fits the room (or lo == 0), need(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if need(mid) <= room else (lo, mid)
    hint = f"use {option} {lo:,} or less" if lo >= 1 else "free some memory or use a smaller network"
    raise ConfigError(
        f"{option} {value:,} needs about {_gib(cost)} of memory; this process can spare about {_gib(budget)}: {hint}"
    )


def step_bytes(net: Module, batch: int, threads: int = 1, drawn: bool = True) -> int:
    """Bytes a training step of `batch` samples allocates: the trace arena, scratch and gradients of each part
    of the batch (Module.fit's work buffer), the kept copy of the parameters and optimizer state, and the
    samples themselves (drawn: a problem draws each batch, in chunks copied once; a file's samples are loaded
    already, and fit copies a shuffled batch)."""
    core = net._corenet()
    n_in, n_out = int(net.n_in or 0), int(net.n_out or 0)
    parts = max(1, min(threads, batch))
    per = -(-batch // parts)
    work = parts * (core.arena * per + core.scratch_size(min(per, 2**32 - 1), 1) + max(1, net.param_count()))
    samples = batch * (n_in + n_out) * (2 if drawn else 1)
    return 4 * (work + samples + 4 * net.param_count())


def samples_bytes(net: Module, n: int) -> int:
    """Bytes n samples cost when drawn and run through the network at once (eval, a device's stream): inputs,
    targets, the forward pass's arena and outputs."""
    core = net._corenet()
    return 4 * n * (2 * (int(net.n_in or 0) + int(net.n_out or 0)) + core.arena)
