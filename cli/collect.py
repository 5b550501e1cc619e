"""`mcutrain collect`: record labelled raw windows from a device's sensor (CAPTURE) into a dataset folder."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path
from typing import Any, Dict, List, Optional

import click
import numpy as np

from mcutrain.run import StopRequest

from .common import CliError, Interrupted, Progress, example, note

NO_WINDOW_POLL = 0.05  # seconds between CAPTUREs while the sensor has no window ready


@click.command("collect")
@click.argument("out_folder", type=click.Path(file_okay=False))
@click.option("--label", required=True, help="The label of the windows recorded now (a folder name for audio).")
@click.option("--count", type=click.IntRange(1, 100_000), required=True, help="How many windows to record.")
@click.option(
    "--project",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="The exported project the device runs (its model's feature pipeline says what a window is).",
)
@click.option("--port", default=None, envvar="MCUTRAIN_PORT", help="Serial port of the device (or MCUTRAIN_PORT).")
@click.option(
    "--sim",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="Instead of --port: start this exported project's simulated board for the recording (needs --sensor).",
)
@click.option(
    "--sensor",
    type=click.Path(exists=True),
    default=None,
    help="With --sim: what the simulated sensor plays back (a WAV, a folder of WAVs, an .npz / .csv of windows).",
)
@click.option("--baud", type=int, default=115200, show_default=True, help="Serial speed.")
@click.option("--timeout", type=float, default=5.0, show_default=True, help="Seconds to wait for replies.")
@click.option(
    "--wait",
    type=click.FloatRange(0),
    default=10.0,
    show_default=True,
    help="Seconds to wait for the sensor's next window before stopping.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@example("""
mcutrain collect --port /dev/ttyACM0 --project fw --label yes --count 50 words/
mcutrain collect --sim fw --sensor alice/ --label yes --count 20 words/   # a simulated board plays alice/ back""")
def collect(
    out_folder: str,
    label: str,
    count: int,
    project: Optional[str],
    port: Optional[str],
    sim: Optional[str],
    sensor: Optional[str],
    baud: int,
    timeout: float,
    wait: float,
    quiet: bool,
) -> None:
    """Record COUNT raw windows labelled LABEL from the device's sensor (the firmware of a model trained with
    --features answers CAPTURE with its sensor's next window) into OUT_FOLDER, in the layout `mcutrain train
    --features` reads: a WAV file per window in OUT_FOLDER/LABEL/ for audio, OUT_FOLDER/windows.npz for motion
    windows. Prints a count per label of the whole folder afterwards. Ctrl-C keeps the windows recorded so far."""
    from mcutrain.exporter.client import Device, DeviceError
    from mcutrain.featdata import check_label, write_captured

    from .device import checked_project
    from .export import host_model
    from .model import model_frontend

    check_label(label)
    if sim and port:
        raise CliError("give either --port (a device) or --sim PROJECT (a simulated board), not both")
    if sensor and not sim:
        raise CliError("--sensor is the recording a simulated board plays back: give it with --sim PROJECT")
    if sim and not sensor:
        raise CliError("a simulated board needs a recording for its sensor: give --sensor FILE_OR_FOLDER")
    if sim and project and Path(sim).resolve() != Path(project).resolve():
        raise CliError("--sim runs the project it names: leave out --project or give the same folder")
    project = project or sim
    if not project:
        raise CliError("give the exported project the device runs with --project (it says what a window is)")
    if not port and not sim:
        raise CliError("give the device's port with --port (or set MCUTRAIN_PORT), or a simulated board with --sim")
    ck = host_model(project, None)
    fe = model_frontend(ck) if ck is not None else None
    if fe is None or fe.spec is None:
        raise CliError(
            f"{project}'s model takes no raw windows, so its firmware captures none: train it with --features "
            "and export it again"
        )
    spec = fe.spec
    dev = _simulated(sim, Path(sensor), baud, timeout) if sim and sensor else Device.open(str(port), baud, timeout)
    windows: List[np.ndarray] = []
    with dev:
        checked_project(dev, project)
        try:
            with StopRequest() as stop, Progress(count, f"recording {label!r}", not quiet) as bar:
                while len(windows) < count and not stop.requested:
                    w = _next_window(dev, spec, wait, stop)
                    if w is None:
                        break
                    windows.append(w)
                    bar.update(1, f"{len(windows)} of {count}")
        except DeviceError as e:
            _keep(out_folder, label, windows, spec, write_captured)
            raise CliError(str(e)) from None
    _keep(out_folder, label, windows, spec, write_captured)
    click.echo(f"recorded {len(windows)} windows labelled {label!r} into {out_folder}")
    counts = label_counts(Path(out_folder), spec)
    click.echo(
        f"{out_folder}: "
        + ", ".join(f"{k} {v}" for k, v in counts.items())
        + f" ({len(counts)} labels, {sum(counts.values())} windows)"
    )
    if len(windows) < count:
        done = f"after {len(windows)} of {count} windows; the ones recorded are kept"
        if stop.requested:
            raise Interrupted(f"interrupted {done}")
        raise CliError(
            f"the sensor had no window for {wait:g} s {done} (a simulated board's recording may hold no more; "
            "--wait waits longer)"
        )


def _simulated(project: str, sensor: Path, baud: int, timeout: float) -> Any:
    """A Device on the project's simulated board, its sensor playing `sensor`; it ends when the Device closes."""
    from mcutrain.exporter import serve as serve_mod
    from mcutrain.exporter.client import Device

    from .export import project_board, read_project, require_pio, require_simulator

    meta = read_project(project)
    board = project_board(meta, None, project)
    require_simulator(board)
    require_pio()
    served = serve_mod.serve(Path(project), board, sensor=sensor)
    try:
        dev = Device.open(served.port, baud, max(timeout, 30.0))
    except BaseException:
        served.stop()
        raise
    dev.process = served.process  # closing the Device ends the simulator
    return dev


def _next_window(dev: Any, spec: Any, wait: float, stop: Any) -> Optional[np.ndarray]:
    """The sensor's next window, asking again while it has none ready; None after `wait` seconds without one."""
    deadline = time.monotonic() + wait
    while True:
        w = dev.capture(spec)
        if w is not None:
            return w
        if time.monotonic() >= deadline or stop.requested:
            return None
        time.sleep(NO_WINDOW_POLL)


def _keep(out_folder: str, label: str, windows: List[np.ndarray], spec: Any, write: Any) -> None:
    """Write the recorded windows (if any) into the dataset folder."""
    if windows:
        write(Path(out_folder), label, np.stack(windows), spec)
    else:
        note("nothing was recorded")


def label_counts(folder: Path, spec: Any) -> Dict[str, int]:
    """Windows per label in a dataset folder of `collect` (WAV label folders, or windows.npz for motion)."""
    from mcutrain.featdata import raw_windows

    if spec.kind != "motion":
        subs = sorted(p for p in folder.iterdir() if p.is_dir() and not p.name.startswith("."))
        return {p.name: sum(1 for f in p.iterdir() if f.suffix.lower() == ".wav") for p in subs}
    f = folder / "windows.npz"
    if not f.is_file():
        return {}
    _, y, names = raw_windows(f, spec)
    c = Counter(int(v) for v in y)
    return {names[i]: c.get(i, 0) for i in range(len(names))}
