"""`mcutrain serve`: a simulated board kept running as a serial device for `mcutrain device`."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any, Optional

import click

from .common import CliError, example, note
from .export import project_board, read_project, require_pio, require_simulator


def _stop_on_sigterm(signum: int, frame: Any) -> None:
    """SIGTERM (e.g. `kill` of a backgrounded serve) stops the board as Ctrl-C does."""
    raise KeyboardInterrupt


@click.command()
@click.argument("project", type=click.Path(exists=True, file_okay=False))
@click.option("--board", default=None, help="Board whose stand-in runs it [default: the project's board].")
@click.option(
    "--store",
    type=click.Path(dir_okay=False),
    default=None,
    help="File that holds the board's saves [default: the project's, the one `mcutrain sim` uses].",
)
@click.option("--no-build", is_flag=True, help="Run the firmware built before.")
@click.option(
    "--sensor",
    type=click.Path(exists=True),
    default=None,
    help="A recording the board's sensor plays back, window after window (CAPTURE, `mcutrain collect`): a WAV, a "
    "folder of WAVs, or an .npz / .csv of raw windows (a model trained with --features).",
)
@example("""
mcutrain serve fw          # prints its port, e.g. /dev/pts/3: then `mcutrain device info --port /dev/pts/3`
mcutrain serve fw-uno --store saves.bin
mcutrain serve fw-kws --sensor recordings/alice   # then: mcutrain collect --port /dev/pts/3 ...""")
def serve(project: str, board: Optional[str], store: Optional[str], no_build: bool, sensor: Optional[str]) -> None:
    """Keep the project's firmware running on its simulated board (QEMU, simavr, or natively) as a serial
    device: print its port and serve `mcutrain device` commands, one connection after another, until
    Ctrl-C (or SIGTERM, or a client's QUIT) stops it. Saves the device makes are kept in a file of the
    project and loaded at the next start, as a real board keeps them."""
    from mcutrain.exporter import serve as serve_mod
    from mcutrain.exporter.client import Device, DeviceError

    meta = read_project(project)
    b = project_board(meta, board, project)
    require_simulator(b)
    if not no_build:
        require_pio()
    for difference in b.stand_in_differences():
        note(f"note: {difference}")
    old = signal.signal(signal.SIGTERM, _stop_on_sigterm)
    try:
        played = Path(sensor) if sensor else None
        with serve_mod.serve(Path(project), b, Path(store) if store else None, not no_build, played) as sb:
            try:
                with Device.open(sb.port, timeout=30.0) as dev:  # the firmware runs the project's model
                    dev.check_hash(meta["hash"])
            except DeviceError as e:
                raise CliError(f"{e}: build it again (without --no-build)") from None
            click.echo(f"{project} runs on a simulated {b.name} ({b.sim_kind}) at {sb.port}")
            click.echo(f"  mcutrain device info --port {sb.port} --project {project}")
            click.echo(f"  export MCUTRAIN_PORT={sb.port}    # then the device commands need no --port")
            click.echo(f"saves go to {sb.store}; Ctrl-C stops the board")
            try:
                status = sb.wait()
            except KeyboardInterrupt:
                sb.stop()
                click.echo(f"stopped the simulated {b.name}")
                return
    finally:
        signal.signal(signal.SIGTERM, old)
    if status != 0:
        raise CliError(f"the simulated {b.name} ended with status {status}:\n{sb.log_tail()}")
    click.echo(f"the simulated {b.name} ended (a client sent QUIT)")
