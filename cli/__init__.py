"""The `mcutrain` command line (mcutrain.cli), the top layer: it uses mcutrain and mcutrain.exporter, and
nothing imports it. The click group is `main` (mcutrain.cli.commands); the console script is `run`.

This module is light on purpose: `run` is reached before numpy, click or the C core load, so a Ctrl-C at
any moment of the start ends with exit code 130 and one line, never a traceback."""

from __future__ import annotations

import sys
from typing import Any, List, Optional

from mcutrain.errors import McuTrainError

from .exit_codes import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_TERMINATED


def run(argv: Optional[List[str]] = None) -> None:
    """The `mcutrain` console script: the click group with mcutrain's exit codes (see `mcutrain --help`)."""
    try:
        from mcutrain.processes import terminate_like_interrupt

        terminate_like_interrupt()  # SIGTERM and SIGHUP clean up as Ctrl-C does
        try:
            from .commands import main
        except McuTrainError as e:  # a setting read while loading (MCUTRAIN_ISA): one line, as every error
            print(f"error: {e}", file=sys.stderr)
            sys.exit(EXIT_ERROR)
        main.main(args=argv, prog_name="mcutrain")
    except KeyboardInterrupt:  # before the commands' own error policy took over
        from mcutrain.processes import was_terminated

        print("error: interrupted", file=sys.stderr)
        sys.exit(EXIT_TERMINATED if was_terminated() else EXIT_INTERRUPTED)


def __getattr__(name: str) -> Any:
    """`main` (the click group) is loaded on first use."""
    if name == "main":
        from .commands import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
