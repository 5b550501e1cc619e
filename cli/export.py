"""`mcutrain export`, `build`, `flash` and `sim`: from a model file to firmware running on a board or
in the simulator that stands in for it."""

from __future__ import annotations

import configparser
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import click
import numpy as np

from mcutrain.errors import McuTrainError
from mcutrain.exporter.folders import MAX_MARKER_BYTES
from mcutrain.exporter.project import CALIBRATION, HOST_MODEL
from mcutrain.inputsteps import host_forward
from mcutrain.modelfile import Checkpoint, load_model
from mcutrain.optim import KINDS
from mcutrain.plaindata import read_json

from .common import CliError, MissingTool, OutputPath, check_output, example, note, table, write_output
from .model import (
    calibration_inputs,
    device_model,
    device_model_options,
    export_choices,
    model_loss,
    model_samples,
    sim_option,
)

OPTIMIZER_CHOICES = list(KINDS)  # the core's optimizer kinds


# ---------------------------------------------------------------- project helpers


def read_project(project: str) -> Dict[str, Any]:
    """The project's mcutrain.json; CliError if the folder is not an exported project."""
    p = Path(project) / "mcutrain.json"
    if not p.is_file():
        raise CliError(f"{project} is not an exported project (no mcutrain.json): run `mcutrain export` first")
    try:
        meta = read_json(p, MAX_MARKER_BYTES, "project marker", McuTrainError)
    except McuTrainError as e:
        raise CliError(f"{e}: export the project again") from None
    if not isinstance(meta, dict):
        raise CliError(f"{p} is damaged (not a JSON object): export the project again")
    if isinstance(meta, dict) and meta.get("kind") == "library":
        raise CliError(
            f"{project} is a library for your own firmware (mcutrain export --library): add it to your sketch or "
            "PlatformIO project (docs/embedding.md), or export a project without --library"
        )
    return meta


def project_envs(project: str) -> List[str]:
    """The env names in the project's platformio.ini."""
    cp = configparser.ConfigParser(interpolation=None, strict=False)
    cp.read(Path(project) / "platformio.ini")
    return [s[4:] for s in cp.sections() if s.startswith("env:")]


def require_pio() -> List[str]:
    """The PlatformIO command; MissingTool when it is not installed."""
    from mcutrain.exporter import pio

    try:
        return pio.pio_command()
    except pio.PioError as e:
        raise MissingTool(str(e)) from None


def require_simulator(board: Any) -> Any:
    """The simulator that stands in for the board, with its tools installed; MissingTool otherwise."""
    from mcutrain.exporter import sim

    try:
        s = sim.simulator_for(board)
        sim.require_tools(*s.tools)
    except sim.SimError as e:
        raise MissingTool(str(e)) from None
    return s


def project_board(meta: Dict[str, Any], name: Optional[str], project: str) -> Any:
    """The board to build/run for: the project's own, or native (every project has env:native)."""
    from mcutrain.exporter.boards import get_board

    b = get_board(name or meta["board"])
    if b.name not in (meta["board"], "native"):
        raise CliError(
            f"{project} was exported for {meta['board']}, not {b.name}: export the model for "
            f"{b.name} first (mcutrain export MODEL --board {b.name})"
        )
    return b


def host_model(project: str, model: Optional[str]) -> Optional[Checkpoint]:
    """The host model of a project: --model, else the copy `mcutrain export` keeps in the project."""
    path = Path(model) if model else Path(project) / HOST_MODEL
    return load_model(path) if (model or path.is_file()) else None


def project_device_model(project: str, meta: Dict[str, Any], ck: Checkpoint, board: Any, model_name: str) -> Any:
    """The device model the project was generated from, rebuilt on the host from ck (None if it cannot
    be: int8-full without the stored calibration inputs). CliError when ck (named model_name) is not
    the model the project was exported from."""
    from mcutrain.exporter.tflite_import import QUANT_KEY

    cal = None
    if meta.get("quant") == "int8-full" and QUANT_KEY not in ck.metadata:  # an imported model keeps its ranges
        p = Path(project) / CALIBRATION
        if not p.is_file():
            return None
        with np.load(p) as z:
            cal = z["x"]
    loss = model_loss(ck, meta.get("loss"))
    m = device_model(
        ck,
        meta.get("quant", "f32"),
        meta.get("trainable", "all"),
        loss,
        board=board,
        calibration=cal,
        optimizer=meta.get("device_optimizer"),
        save=meta.get("save", "all"),
    )
    if m.hash().hex() != meta.get("hash"):
        raise CliError(
            f"{model_name} is not the model exported to {project} (its device model {m.hash().hex()} is "
            f"not {meta.get('hash')}): give the exported model with --model, or export this one"
        )
    return m


# ---------------------------------------------------------------- export


@click.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "--board",
    default=None,
    help="Target board (see `mcutrain boards`) [default: the board a model pulled from a device came from].",
)
@device_model_options
@click.option("--loss", "loss_name", default=None, help="Loss the device trains with [default: the model's].")
@sim_option
@click.option(
    "-o", "--output", type=click.Path(file_okay=False), default=None, help="Project folder [default: MODEL-BOARD]."
)
@click.option(
    "--optimizer",
    type=click.Choice(OPTIMIZER_CHOICES),
    default=None,
    help="Optimizer the device trains with [default: the model's]; sgd keeps no state (least RAM).",
)
@click.option(
    "--save",
    "save",
    type=click.Choice(["params", "all"]),
    default=None,
    help="What a device save keeps: the learned parameters, or the optimizer state too [default: all where "
    "two saves fit the board's storage, else params].",
)
@click.option(
    "--library",
    is_flag=True,
    help="Write an Arduino/PlatformIO library for your own firmware (model-level C API, examples) instead of "
    "a project (docs/embedding.md).",
)
@click.option(
    "--force", is_flag=True, help="Replace an existing project or library folder (only one that mcutrain exported)."
)
@example("""
mcutrain export model.mct --board native -o fw
mcutrain export model.mct --board uno --trainable last:1 --quant int8-full -o fw-uno
mcutrain export model.mct --board uno --trainable biases --optimizer sgd --library -o lib/my_model""")
def export(
    model: str,
    board: Optional[str],
    quant: Optional[str],
    trainable: Optional[str],
    calibration: Optional[str],
    loss_name: Optional[str],
    for_sim: bool,
    output: Optional[str],
    optimizer: Optional[str],
    save: Optional[str],
    library: bool,
    force: bool,
) -> None:
    """Turn a model file into a PlatformIO project for a board: generated C model, firmware, the C core
    as a library and offline platforms for the simulator and the native build. With --library: an
    Arduino/PlatformIO library of the model and the core for your own firmware instead.

    The output folder is checked first, then the memory plan; a model that does not fit exits with code 3
    and says what to change. Quantized exports print how the device model compares with the f32 network.
    The project (with a copy of the model file) replaces the old one in one step, so an interrupt never
    leaves half a project; --force replaces only a folder that mcutrain exported.
    """
    from mcutrain.exporter.boards import get_board
    from mcutrain.exporter.export import export_project
    from mcutrain.exporter.folders import check_folder
    from mcutrain.modelmeta import device_export

    ck = load_model(model)
    rec = device_export(ck.metadata)
    taken = []
    if board is None:
        if "board" not in rec:
            raise CliError("give the board to export to with --board (see `mcutrain boards`)")
        board = rec["board"]
        taken.append(f"--board {board}")
    b = get_board(board)
    out = check_folder(output if output is not None else f"{Path(model).stem}-{b.name}", "project", force)
    quant, trainable, more = export_choices(ck, quant, trainable)
    taken += more
    if optimizer is None and rec.get("optimizer") in OPTIMIZER_CHOICES:
        optimizer = rec["optimizer"]
        taken.append(f"--optimizer {optimizer}")
    if save is None and rec.get("save") in ("params", "all"):
        save = rec["save"]
        taken.append(f"--save {save}")
    if taken:
        note(f"note: exporting {model} as the device it came from runs it ({' '.join(taken)}); give others to change")
    loss = model_loss(ck, loss_name)
    eval_data = model_samples(ck, 1000) if quant != "f32" else None
    if quant == "int8-full":
        cal = calibration_inputs(ck, calibration, eval_data[0] if eval_data else None)
    else:  # the model's own training data, if it records any: the advice of a model that does not fit tries int8-full
        try:
            cal = calibration_inputs(ck, calibration, None)
        except CliError:
            cal = None
    res = export_project(
        model,
        b.name,
        out,
        quant=quant,
        trainable=trainable,
        loss=loss,
        force=force,
        sim=for_sim,
        calibration=cal,
        eval_data=eval_data,
        optimizer=optimizer,
        save=save,
        library=library,
    )
    click.echo(res.plan.table())
    if res.model.input_steps:
        click.echo(f"inputs: {res.model.input_steps} (the device takes raw inputs)")
    if res.quant_report is not None:
        click.echo(res.quant_report.summary())
    elif quant != "f32":
        note("note: no quantization report: the model file does not record data to evaluate on")
    what = "library" if library else ""
    click.echo(
        f"wrote {what + ' ' if what else ''}{res.path} for {b.name} (model hash {res.hash}, {quant}, trainable "
        f"{trainable}, optimizer {res.optimizer}, saves keep {res.model.save})"
    )
    if library:
        click.echo("next: see docs/embedding.md (#include <mcutrain.h>; examples/ in the library)")
        return
    sim_hint = f"mcutrain sim {res.path}" if b.sim_kind else f"mcutrain flash {res.path} --board {b.name}"
    click.echo(f"next: mcutrain build {res.path}   or   {sim_hint}")


# ---------------------------------------------------------------- build and flash


def _resolve_env(project: str, meta: Dict[str, Any], board: Optional[str], env: Optional[str], sim: bool) -> str:
    """The env to build: --env, the simulator's env (--sim), or the board's own."""
    envs = project_envs(project)
    if env:
        if board or sim:
            raise CliError("give --env, or --board/--sim, not both")
        if env not in envs:
            raise CliError(f"{project}/platformio.ini has no env {env!r}; it has {', '.join(envs)}")
        return env
    b = project_board(meta, board, project)
    if sim:
        return require_simulator(b).env_name(b)
    return b.name


def _size_lines(output: str) -> List[str]:
    """PlatformIO's RAM/Flash usage lines."""
    return [ln.strip() for ln in output.splitlines() if ln.strip().startswith(("RAM:", "Flash:"))]


@click.command()
@click.argument("project", type=click.Path(exists=True, file_okay=False))
@click.option("--board", default=None, help="Board env to build [default: the project's board].")
@click.option("--env", "env", default=None, help="Any env of the project's platformio.ini (e.g. native, sim-uno).")
@click.option("--sim", "for_sim", is_flag=True, help="Build the env of the board's simulator.")
@click.option("-v", "--verbose", is_flag=True, help="Show PlatformIO's output.")
@click.option(
    "--arduino-core",
    is_flag=True,
    help="Build the AVR board's own env offline on Debian's genuine Arduino core (apt-get install "
    "arduino-core-avr) with avr-gcc instead of PlatformIO.",
)
@example("""
mcutrain build fw                     # the project's board (real boards need their platform once)
mcutrain build fw-uno --sim           # the simulated stand-in, offline
mcutrain build fw-uno --arduino-core  # env:uno on Debian's Arduino AVR core, offline
mcutrain build fw-uno --env native""")
def build(
    project: str, board: Optional[str], env: Optional[str], for_sim: bool, verbose: bool, arduino_core: bool
) -> None:
    """Build an exported project with PlatformIO (`pio run -e ENV`), or your own PlatformIO project that uses
    a library export in its lib/ (docs/embedding.md): an env for the Uno builds offline on Debian's Arduino
    AVR core, other envs with `pio run -e ENV`."""
    from mcutrain.exporter import pio

    if _build_user_project(project, env, board, for_sim, arduino_core):
        return
    meta = read_project(project)
    if arduino_core:
        _build_on_arduino_core(project, meta, board, env or None, for_sim)
        return
    env_name = _resolve_env(project, meta, board, env, for_sim)
    require_pio()
    r = pio.build(Path(project), env_name, verbose)
    if verbose:
        click.echo(r.stdout)
    for line in _size_lines(r.stdout):
        click.echo(line)
    click.echo(f"built {project} (env {env_name})")


def _user_project(project: str, env: Optional[str]) -> Any:
    """The user's own PlatformIO project with a library export (None for an exported project)."""
    from mcutrain.exporter.user_project import find_user_project

    if (Path(project) / "mcutrain.json").is_file():
        return None
    up = find_user_project(Path(project), env)
    if up is None:
        read_project(project)  # the error for a folder that is no project at all
    return up


def _build_user_project(project: str, env: Optional[str], board: Optional[str], sim: bool, arduino_core: bool) -> bool:
    """`build` of the user's own project; False when project is an exported one."""
    from mcutrain.exporter import arduino_avr
    from mcutrain.exporter.sim_avr import avr_sizes
    from mcutrain.exporter.user_project import build_user_project

    up = _user_project(project, env)
    if up is None:
        return False
    if board or sim:
        raise CliError(f"{project} is your own PlatformIO project: choose its env with --env, not --board or --sim")
    if not up.on_arduino_avr:
        if arduino_core:
            raise CliError(f"--arduino-core builds AVR envs; env:{up.env} of {project} is for {up.platform or '?'}")
        require_pio()
    try:
        elf, how = build_user_project(up)
    except arduino_avr.ArduinoCoreMissing as e:
        raise MissingTool(str(e)) from None
    if up.on_arduino_avr:
        sizes = avr_sizes(elf)
        b = up.board
        click.echo(f"Flash: {sizes['flash']:,} of {b.flash:,} B; RAM (static): {sizes['ram_static']:,} of {b.ram:,} B")
    click.echo(f"built {elf} (env {up.env}, your project with {', '.join(p.name for p in up.libraries)}) {how}")
    return True


def _build_on_arduino_core(
    project: str, meta: Dict[str, Any], board: Optional[str], env: Optional[str], sim: bool
) -> None:
    """`build --arduino-core`: the board's env on the genuine Arduino AVR core (mcutrain.exporter.arduino_avr)."""
    from mcutrain.exporter import arduino_avr
    from mcutrain.exporter.sim_avr import avr_sizes

    b = project_board(meta, board, project)
    if env or sim or b.core != "avr":
        raise CliError(
            f"--arduino-core builds the env of an AVR board (the project's is {b.name}, {b.core}): "
            "leave out --env and --sim"
        )
    try:
        elf = arduino_avr.build_project(Path(project), b.name)
    except arduino_avr.ArduinoCoreMissing as e:
        raise MissingTool(str(e)) from None
    sizes = avr_sizes(elf)
    click.echo(f"Flash: {sizes['flash']:,} of {b.flash:,} B; RAM (static): {sizes['ram_static']:,} of {b.ram:,} B")
    click.echo(f"built {elf} on the Arduino core in {arduino_avr.core_dir()}")


@click.command()
@click.argument("project", type=click.Path(exists=True, file_okay=False))
@click.option("--board", default=None, help="Board to flash [default: the project's board].")
@click.option("--port", default=None, help="Upload port, e.g. /dev/ttyACM0 [default: PlatformIO finds it].")
@click.option("-v", "--verbose", is_flag=True, help="Show PlatformIO's output.")
@example("mcutrain flash fw-uno --board uno --port /dev/ttyACM0")
def flash(project: str, board: Optional[str], port: Optional[str], verbose: bool) -> None:
    """Build and upload the firmware to a connected board (`pio run -e BOARD -t upload`).

    For the native board, "upload" runs the program on this terminal; use `mcutrain sim` instead.
    """
    from mcutrain.exporter import pio

    meta = read_project(project)
    b = project_board(meta, board, project)
    require_pio()
    args = ["run", "-e", b.name, "-t", "upload"] + (["--upload-port", port] if port else [])
    r = pio.run(args, Path(project))
    if r.returncode != 0:
        tail = "\n".join((r.stdout + r.stderr).strip().splitlines()[-20:])
        raise CliError(
            f"pio {' '.join(args)} failed: check the board is connected (and --port), then see "
            f"PlatformIO's output:\n{tail}"
        )
    if verbose:
        click.echo(r.stdout)
    click.echo(f"flashed {project} to {b.name}" + (f" on {port}" if port else ""))


# ---------------------------------------------------------------- sim


def check_samples(ck: Checkpoint, n: int) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """Inputs (and targets, if known) to compare device and host on: the model's own data, else seeded
    random inputs."""
    own = model_samples(ck, max(n, 1))
    if own is None:  # no stored source (or its file is gone): random inputs, no targets
        return np.random.default_rng(0).uniform(-1, 1, (n, ck.net.n_in)).astype(np.float32), None
    return np.ascontiguousarray(own[0][:n], np.float32), np.ascontiguousarray(own[1][:n], np.float32)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(np.asarray(a, "<f4").view("<u4"), np.asarray(b, "<f4").view("<u4"))


def _max_diff(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)))) if a.size else 0.0


def _verdict(same: bool, diff: float, scale: float) -> Tuple[str, bool]:
    """('bit for bit' / 'max difference ...', within tolerance?)."""
    if same:
        return "match bit for bit", True
    ok = diff <= 1e-5 * max(1.0, scale)
    return f"{'match' if ok else 'DIFFER'}: max difference {diff:.3g}", ok


def predict_check(dev: Any, m: Any, ck: Checkpoint, x: np.ndarray) -> Dict[str, Any]:
    """The device's outputs against the host's (the same device model through the host's C core, or the
    f32 network when the quantized device model cannot be rebuilt: int8-full without its calibration)."""
    from mcutrain.exporter.twin import DeviceTwin

    got = dev.predict(x)
    if m is not None:
        want = DeviceTwin(m).predict(x)
        text, ok = _verdict(_same_bits(got, want), _max_diff(got, want), float(np.abs(want).max(initial=0)))
        ref = "host (same C core)"
    else:
        want = host_forward(ck, x)
        diff = _max_diff(got, want)
        ok = diff <= 0.1 * max(1.0, float(np.abs(want).max(initial=0)))
        text, ref = f"max difference {diff:.3g} (quantized device model)", "host f32 network"
    return {"samples": int(len(x)), "reference": ref, "result": text, "ok": ok, "max_diff": _max_diff(got, want)}


def train_check(dev: Any, m: Any, x: np.ndarray, t: np.ndarray) -> Dict[str, Any]:
    """One TRAIN on the device against the same update on the host (from the exported state)."""
    from mcutrain.exporter.twin import DeviceTwin

    twin = DeviceTwin(m)
    try:
        host_loss, refused = twin.train(x, t), False
    except ValueError:
        host_loss, refused = float("nan"), True
    dev_loss, _ = dev.train(x, t)
    got = dev.read_region(0)
    text, ok = _verdict(
        _same_bits(got, twin.params) and np.float32(dev_loss) == np.float32(host_loss),
        _max_diff(got, twin.params),
        float(np.abs(twin.params).max(initial=0)),
    )
    return {"result": text, "ok": ok and not refused, "device_loss": float(dev_loss), "host_loss": float(host_loss)}


def _report_rows(report: Dict[str, Any]) -> List[List[Any]]:
    """The simulator's measurements as (what, value) rows."""
    unit = report.get("unit") or ""
    names = {
        "predict": f"per PREDICT ({unit})" if unit else "per PREDICT",
        "train": f"per TRAIN ({unit})" if unit else "per TRAIN",
        "ram_static": "static RAM (B)",
        "stack_peak": "peak stack (B)",
        "flash": "flash (B)",
    }
    return [
        [names.get(k, k), v]
        for k, v in report.items()
        if k not in ("unit", "check", "board", "simulator") and v is not None
    ]


@click.command()
@click.argument("project", type=click.Path(exists=True, file_okay=False))
@click.option("--board", default=None, help="Board whose simulator runs it [default: the project's board].")
@click.option(
    "--model",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help=f"Host model to compare with [default: the project's {HOST_MODEL}].",
)
@click.option("--samples", type=click.IntRange(1), default=5, show_default=True, help="Samples to compare.")
@click.option(
    "--report",
    "report_path",
    type=OutputPath(dir_okay=False),
    default=None,
    help="Write the measurements and the checks as JSON.",
)
@click.option("--no-build", is_flag=True, help="Run the firmware built before.")
@click.option("--force", is_flag=True, help="Replace an existing --report file.")
@click.option(
    "--seconds",
    type=click.FloatRange(0, 3600, min_open=True),
    default=5.0,
    show_default=True,
    help="Your own project (a library export in lib/): how long to run it, in simulated seconds.",
)
@click.option("--env", "env", default=None, help="Your own project: the env to run [default: its default env].")
@example("""
mcutrain sim fw
mcutrain sim fw-uno --report uno.json
mcutrain sim my_project --seconds 10     # your own Uno project with a library export: its Serial output""")
def sim(
    project: str,
    board: Optional[str],
    model: Optional[str],
    samples: int,
    report_path: Optional[str],
    no_build: bool,
    force: bool,
    seconds: float,
    env: Optional[str],
) -> None:
    """Build the project for the board's simulator (QEMU, simavr, or natively), run it, check that the
    device's predictions (and a training step) match the host's, and report what it measured.

    Your own PlatformIO project that uses a library export (an env for the Uno) is built offline on the
    Arduino AVR core and run in simavr for --seconds of simulated time, with what it prints on Serial shown
    here and its EEPROM kept in the project (a second run starts from its saves)."""
    from mcutrain.exporter import sim as sim_mod

    up = _user_project(project, env)
    if up is not None:
        _sim_user_project(project, up, no_build, seconds)
        return
    if env:
        raise CliError("--env chooses the env of your own project; an exported project runs its board's stand-in")
    meta = read_project(project)
    b = project_board(meta, board, project)
    require_simulator(b)
    if not no_build:
        require_pio()
    for difference in b.stand_in_differences():
        note(f"note: {difference}")
    if report_path:
        check_output(Path(report_path), force, "report")
    ck = host_model(project, model)
    m = project_device_model(project, meta, ck, b, model or f"{project}/{HOST_MODEL}") if ck is not None else None
    checks: Dict[str, Any] = {}
    with sim_mod.start(Path(project), b, measure=True, build=not no_build) as s:
        info = s.device.info()
        if info.hash != meta["hash"]:
            raise CliError(
                f"the firmware runs model {info.hash}, but {project} holds {meta['hash']}: "
                f"build it again (without --no-build)"
            )
        s.device.reset()
        if ck is None:
            note(f"note: {project} has no {HOST_MODEL}: give --model to compare the device with the host")
        else:
            x, y = check_samples(ck, samples)
            checks["predict"] = predict_check(s.device, m, ck, x)
            if m is not None and y is not None and info.n_trainable:
                checks["train"] = train_check(s.device, m, x[0], y[0])
        report = dict(s.report())
    report["check"] = checks
    _print_sim(project, b, info, checks, report)
    if report_path:
        write_output(
            Path(report_path),
            (json.dumps(report, indent=2, sort_keys=True, default=str) + "\n").encode(),
            force,
            "report",
        )
    if not all(c["ok"] for c in checks.values()):
        raise CliError("the device does not match the host: see the check above")


def _sim_user_project(project: str, up: Any, no_build: bool, seconds: float) -> None:
    """`sim` of the user's own project: build it (unless no_build) and show what it prints in simavr."""
    from mcutrain.exporter.user_project import run_user_project

    if not up.on_arduino_avr:
        raise CliError(
            f"env:{up.env} of {project} is not an Uno env: `mcutrain sim` runs your own firmware on the Uno's "
            "stand-in only (simavr)"
        )
    require_simulator(up.board)
    if not no_build:
        _build_user_project(project, up.env, None, False, False)
    out, b = run_user_project(up, seconds)
    click.echo(out, nl=not out.endswith("\n"))
    click.echo(f"ran {project} (env {up.env}) for {seconds:g} s on a simulated {b.name}; its EEPROM is in {project}")


def _print_sim(project: str, b: Any, info: Any, checks: Dict[str, Any], report: Dict[str, Any]) -> None:
    """The checks and the measurement table."""
    click.echo(
        f"{project} on {b.name} ({report.get('simulator', b.sim_kind)}): model {info.hash}, "
        f"{info.n_in} inputs, {info.n_out} outputs, {info.n_trainable:,} trainable parameters"
    )
    if "predict" in checks:
        c = checks["predict"]
        click.echo(f"predictions on {c['samples']} samples: device and {c['reference']} {c['result']}")
    if "train" in checks:
        c = checks["train"]
        click.echo(f"one training step: device and host {c['result']} (loss {c['device_loss']:.6g})")
    rows = _report_rows(report)
    if rows:
        click.echo(table(["measurement", "value"], rows, right=[False, True]))
    else:
        click.echo(f"({report.get('simulator', 'this')} run measures no cycles, RAM or stack; the simulated boards do)")
