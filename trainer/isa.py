"""Which copy of the host's C core runs: the extension holds the whole core compiled for the baseline
instruction set and once more for each wider one (trainer/host_build.py), and picks the widest the CPU runs at
import. MCUTRAIN_ISA=<name> in the environment, or select(name), picks another; every variant computes the same
bits (the same summation order, -ffp-contract=off), only the speed differs. A switch is safe while other threads
train: each call of the core runs wholly in the copy that was chosen when it started."""

from __future__ import annotations

from typing import Dict, Optional

from . import _core
from .errors import ConfigError

ENV = "MCUTRAIN_ISA"

__all__ = ["ENV", "variants", "runnable", "active", "select"]


def variants() -> Dict[str, bool]:
    """{name: this CPU runs it} of the variants built into this installation, the baseline first."""
    return dict(_core.isa_variants())


def runnable() -> list:
    """The names of the variants this CPU runs, the baseline first."""
    return [name for name, runs in _core.isa_variants() if runs]


def active() -> str:
    """The variant that runs now."""
    return str(_core.isa_active())


def select(name: Optional[str] = None) -> str:
    """Run the named variant (None: the widest this CPU runs); returns its name. ConfigError naming the
    choices when it is not built in or this CPU cannot run it."""
    if not _core.isa_select(name):
        known = variants()
        why = "is not built into this mcutrain" if name not in known else "needs instructions this CPU lacks"
        raise ConfigError(f"kernel variant {name!r} {why}: choose one of {', '.join(runnable())}")
    return active()
