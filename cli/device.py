"""`mcutrain device ...`: the device client on the command line (a board's serial port, the native
firmware's pty, or a simulator's serial line)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import click
import numpy as np

from mcutrain.corefacts import OptKind, by_name, names
from mcutrain.exporter.device_model import Segments, segments_from_host, segments_to_host
from mcutrain.modelfile import Checkpoint, encode_model
from mcutrain.run import StopRequest
from mcutrain.sources import check_widths, load_inputs, open_source

from .common import CliError, Interrupted, Progress, check_output, example, note, table, write_output
from .data_options import data_options, pop_data_options

OPT_KINDS = names(OptKind)  # the core's optimizer names, in enum mct_opt_kind order


SIM_KEY = "mcutrain_device_sim"  # where --sim leaves its project in the click context


def _remember_sim(ctx: click.Context, param: click.Parameter, value: Optional[str]) -> None:
    ctx.meta[SIM_KEY] = value


def port_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--port, --baud, --timeout and --sim."""
    f = click.option(
        "--sim",
        type=click.Path(exists=True, file_okay=False),
        default=None,
        expose_value=False,
        callback=_remember_sim,
        help="Instead of --port: start the exported project's simulated board for this command and stop it after "
        "(its saves are kept; `mcutrain serve` keeps one running).",
    )(f)
    f = click.option("--timeout", type=float, default=5.0, show_default=True, help="Seconds to wait for replies.")(f)
    f = click.option("--baud", type=int, default=115200, show_default=True, help="Serial speed.")(f)
    return click.option(
        "--port",
        default=None,
        envvar="MCUTRAIN_PORT",
        help="Serial port of the device (or a pty), e.g. /dev/ttyACM0; or set MCUTRAIN_PORT.",
    )(f)


def connect(port: Optional[str], baud: int, timeout: float) -> Any:
    """An open Device: on --port, or on the simulated board of --sim PROJECT, started now and stopped when the
    Device is closed."""
    from mcutrain.exporter.client import Device

    project = click.get_current_context().meta.get(SIM_KEY)
    if project:
        return _simulated_device(project, baud, max(timeout, 30.0))
    if not port:
        raise CliError(
            "give the device's port with --port (or set MCUTRAIN_PORT), or a simulated board with --sim PROJECT"
        )
    return Device.open(port, baud, timeout)


def _simulated_device(project: str, baud: int, timeout: float) -> Any:
    """A Device on the project's simulated board, which ends when the Device closes."""
    from mcutrain.exporter import serve as serve_mod
    from mcutrain.exporter.client import Device

    from .export import project_board, read_project, require_pio, require_simulator

    meta = read_project(project)
    board = project_board(meta, None, project)
    require_simulator(board)
    require_pio()
    served = serve_mod.serve(Path(project), board)
    try:
        dev = Device.open(served.port, baud, timeout)
    except BaseException:
        served.stop()
        raise
    dev.process = served.process  # closing the Device ends the simulator
    return dev


def checked_project(dev: Any, project: Optional[str]) -> Optional[Dict[str, Any]]:
    """The project's mcutrain.json after checking that the device runs its model (None without --project)."""
    if not project:
        return None
    from mcutrain.exporter.client import DeviceError

    from .export import read_project

    meta = read_project(project)
    try:
        dev.check_hash(meta["hash"])
    except DeviceError as e:
        raise CliError(f"{e} (mcutrain flash {project}), or give the right --project") from None
    return meta


def project_option(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--project (required): the exported project the device runs."""
    return click.option("--project", type=click.Path(exists=True, file_okay=False), required=True, help=help_text)


def base_model_option(help_text: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """--model: the host model of the project [default: the project's model.mct]."""
    return click.option("--model", "base", type=click.Path(exists=True, dir_okay=False), default=None, help=help_text)


def segments(meta: Dict[str, Any]) -> Segments:
    """(device RAM offset, host offset, count) of each block of RAM parameters."""
    return [(int(r), int(h), int(n)) for r, h, n in meta["segments"]]


@click.group()
def device() -> None:
    """Talk to a device running an exported model: a board on a serial port, the native firmware on a
    pty, or a simulator's serial line.

    \b
    Example:
      mcutrain device info --port /dev/ttyACM0
      mcutrain device train --port /dev/ttyACM0 --data field.csv --classify
      mcutrain device pull --port /dev/ttyACM0 --project fw -o learned.mct
    """


@device.command("info")
@port_options
@click.option(
    "--project",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="Exported project to check the device against.",
)
@example("mcutrain device info --port /dev/ttyACM0 --project fw")
def info_cmd(port: str, baud: int, timeout: float, project: Optional[str]) -> None:
    """The device's model hash, sizes, optimizer, training step and storage."""
    with connect(port, baud, timeout) as dev:
        i = dev.info()
        checked_project(dev, project)
        port = port or getattr(dev.link, "port", "the simulated board")
    rows = [
        ["model hash", i.hash + (f" (matches {project})" if project else "")],
        ["inputs", i.n_in],
        ["outputs", i.n_out],
        ["parameters in RAM", i.n_params],
        ["trainable parameters", i.n_trainable],
        ["optimizer", OPT_KINDS[i.opt_kind] if i.opt_kind < len(OPT_KINDS) else i.opt_kind],
        ["training step", i.step],
        ["can save", i.can_save],
        ["loaded a save at boot", i.loaded_save],
        ["protocol version", i.version],
        ["max payload (B)", i.max_payload],
    ]
    click.echo(table(["", port], rows, right=[False, False]))


@device.command("predict")
@port_options
@click.option(
    "--data",
    "data_path",
    type=click.Path(exists=True, dir_okay=False),
    default=None,
    help="Inputs: CSV (one sample per row), NPZ (array --x-key) or IDX images.",
)
@click.option("--inputs", default=None, help="CSV columns that are the inputs [default: all].")
@click.option("--x-key", default="x", show_default=True, help="NPZ array with the inputs.")
@click.option("--values", default=None, help="One sample inline: comma-separated numbers.")
@click.option("--argmax", is_flag=True, help="Print the index of the largest output (the class) too.")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None, help="Write a CSV [default: stdout].")
@click.option("--force", is_flag=True, help="Replace an existing output file.")
@example("""
mcutrain device predict --port /dev/ttyACM0 --data samples.csv -o predictions.csv
mcutrain device predict --port /dev/ttyACM0 --values 0,1,0,0,1 --argmax""")
def predict_cmd(
    port: str,
    baud: int,
    timeout: float,
    data_path: Optional[str],
    inputs: Optional[str],
    x_key: str,
    values: Optional[str],
    argmax: bool,
    output: Optional[str],
    force: bool,
) -> None:
    """Run the device's model on samples and print (or write) its outputs as CSV."""
    if bool(data_path) == bool(values):
        raise CliError("give the samples either as a file (--data) or inline (--values)")
    if output:
        check_output(Path(output), force, "output")
    with connect(port, baud, timeout) as dev:
        n_in = dev.info().n_in
        x = load_inputs(data_path, n_in, inputs, x_key) if data_path else _inline(values or "", n_in)
        y = dev.predict(x)
    text = _csv(y, argmax)
    if output:
        write_output(Path(output), text.encode(), True)
        click.echo(f"wrote {len(y)} predictions to {output}")
    else:
        click.echo(text, nl=False)


def _inline(values: str, n_in: int) -> np.ndarray:
    """--values as one sample."""
    try:
        x = np.array([float(v) for v in values.split(",")], np.float32)
    except ValueError:
        raise CliError(f"--values must be comma-separated numbers, got {values!r}") from None
    if x.shape[0] != n_in:
        raise CliError(f"--values has {x.shape[0]} numbers, the device's model takes {n_in}")
    return x[None, :]


def _csv(y: np.ndarray, argmax: bool) -> str:
    """Outputs as CSV with a header (y0, y1, ..., [class])."""
    buf = io.StringIO()
    head = [f"y{i}" for i in range(y.shape[1])] + (["class"] if argmax else [])
    buf.write(",".join(head) + "\n")
    for row in y:
        cells = [repr(float(v)) for v in row] + ([str(int(row.argmax()))] if argmax else [])
        buf.write(",".join(cells) + "\n")
    return buf.getvalue()


@device.command("train")
@port_options
@data_options
@click.option(
    "--samples",
    "n_samples",
    type=click.IntRange(1),
    default=None,
    help="Samples to send [default: each row of a file once, 1000 from a problem].",
)
@click.option("--shuffle", is_flag=True, help="Send a file's rows in a seeded random order (default: file order).")
@click.option(
    "--seed", type=click.IntRange(0), default=0, show_default=True, help="Seed of --shuffle and of problem samples."
)
@click.option("--save", "save_after", is_flag=True, help="SAVE on the device afterwards (persist what it learned).")
@click.option(
    "--project",
    type=click.Path(exists=True, file_okay=False),
    default=None,
    help="The exported project the device runs: the rows its model holds out for `mcutrain eval` are not sent, "
    "and `device pull` records what the device trained on.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
@example("""
mcutrain device train --port /dev/ttyACM0 --project fw --data field.csv --classify --save
mcutrain device train --port /dev/pts/5 --problem modadd10 --samples 200""")
def train_cmd(
    port: str,
    baud: int,
    timeout: float,
    n_samples: Optional[int],
    shuffle: bool,
    seed: int,
    save_after: bool,
    project: Optional[str],
    quiet: bool,
    **kw: Any,
) -> None:
    """Stream labelled samples to the device, which trains on each one (TRAIN), with a progress bar.

    With --project, a data file the model was trained on is sent without the rows the model holds out
    (its validation split, on which `mcutrain eval` reports), and the project keeps a record of what was
    sent, so that the model `device pull` writes knows it.
    """
    spec = pop_data_options(kw)
    ck = _project_model(project, spec)
    src = open_source(spec, seed, classes=_classes(ck))
    with connect(port, baud, timeout) as dev:
        i = dev.info()
        meta = checked_project(dev, project)
        check_widths(i.n_in, i.n_out, src, "the device's model", advice="use data that fits the exported model")
        if i.n_trainable == 0:
            raise CliError(
                "the device's model has no trainable layers (exported with --trainable none): export "
                "with --trainable all, last:N or biases to train on the device"
            )
        held = _held_out(ck, spec) if meta is not None else None
        x, y, record = _stream(src, n_samples, shuffle, seed, held)
        if held is not None:
            note(
                f"note: left out the {held['val']:.0%} of {Path(spec.path or '').name} that the model holds out "
                "for evaluation"
            )
        done, losses = _train_stream(dev, x, y, quiet)
        step = dev.info().step
        seq = dev.save() if save_after and done == len(x) else None
    if meta is not None and record is not None and project is not None:
        _log_training(Path(project), {**record, "count": done, "hash": meta["hash"], "step_after": step})
    tail = losses[-min(len(losses), 100) :]
    click.echo(
        f"trained on {done} samples: mean loss {float(np.mean(tail)) if tail else float('nan'):.4g} "
        f"over the last {len(tail)}; device step {step}" + (f"; saved (#{seq})" if seq is not None else "")
    )
    if done < len(x):
        raise Interrupted(
            f"interrupted after {done} of {len(x)} samples; the device keeps what it learned "
            f"(`mcutrain device save` persists it)"
        )


def _project_model(project: Optional[str], spec: Any) -> Optional[Checkpoint]:
    """The project's host model (None without --project or when the project keeps none)."""
    if not project:
        return None
    from .export import host_model

    return host_model(project, None)


def _classes(ck: Optional[Checkpoint]) -> Optional[List[str]]:
    """The model's class names, so that text labels map to its outputs."""
    from mcutrain.modelmeta import class_names

    return class_names(ck.metadata) if ck is not None else None


def _held_out(ck: Optional[Checkpoint], spec: Any) -> Optional[Dict[str, Any]]:
    """{'val', 'seed', 'rows'} of the model's held-out split when spec names the file the model was trained on
    (the same path or the same contents), else None."""
    from mcutrain.sources import DataSettings

    if ck is None or not spec.path:
        return None
    run = ck.metadata.get("train") or {}
    own = DataSettings.from_dict(run.get("data") or {})
    val = float(run.get("val", 0.0) or 0.0)
    if not own.path or val <= 0:
        return None
    same = Path(own.path).resolve() == Path(spec.path).resolve()
    if not same and run.get("data_crc") is None:
        return None
    if not same and DataSettings(path=spec.path, labels=spec.labels).fingerprint() != run.get("data_crc"):
        return None
    return {"val": val, "seed": int(run.get("seed", 0))}


def _stream(
    src: Any, n: Optional[int], shuffle: bool, seed: int, held: Optional[Dict[str, Any]] = None
) -> Tuple[np.ndarray, np.ndarray, Optional[Dict[str, Any]]]:
    """The samples to send and the record of them (None for a problem): a file's rows in order (or shuffled,
    seeded), without the held-out rows, repeated up to n samples; or n samples of a problem."""
    from mcutrain.datasets import split_indices
    from mcutrain.sources import FileSource, stream_rows

    if not isinstance(src, FileSource):
        x, y = src.batch(0, n or 1000)
        return x, y, None
    rows = split_indices(len(src.full), held["val"], held["seed"])[0] if held is not None else None
    order = stream_rows(len(src.full), n, shuffle, seed, rows)
    record = {
        "crc": src.fingerprint,
        "rows": len(src.full),
        "held_out": {"val": held["val"], "seed": held["seed"]} if held is not None else None,
        "shuffle": shuffle,
        "seed": seed,
    }
    return src.full.x[order], src.full.y[order], record


def _log_training(project: Path, record: Dict[str, Any]) -> None:
    """Append a record of what the device trained on to the project's DEVICE_LOG."""
    from mcutrain.exporter.project import DEVICE_LOG

    with open(project / DEVICE_LOG, "a", encoding="utf-8") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")


def _training_records(project: str, hash_: str, step: int) -> List[Dict[str, Any]]:
    """The records of DEVICE_LOG that lead to the device's current step: the newest run of this export that
    ended at or before it, and the runs before it back to a reset (a run that started at step 0)."""
    from mcutrain.exporter.project import DEVICE_LOG

    p = Path(project) / DEVICE_LOG
    if not p.is_file():
        return []
    recs = []
    for line in p.read_text(encoding="utf-8").splitlines():
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if isinstance(r, dict) and r.get("hash") == hash_ and isinstance(r.get("step_after"), int):
            recs.append(r)
    chain: List[Dict[str, Any]] = []
    expect = step
    for r in reversed(recs):
        if r["step_after"] != expect:
            continue
        chain.insert(0, r)
        expect = r["step_after"] - int(r.get("count", 0))
        if expect <= 0:
            break
    return chain


def _train_stream(dev: Any, x: np.ndarray, y: np.ndarray, quiet: bool) -> Tuple[int, List[float]]:
    """TRAIN each sample; stops early (cleanly) on Ctrl-C. Returns (samples done, losses)."""
    losses: List[float] = []
    with StopRequest() as stop, Progress(len(x), "training on the device", not quiet) as bar:
        for xi, yi in zip(x, y):
            loss, _ = dev.train(xi, yi)
            losses.append(loss)
            bar.update(1, f"loss {np.mean(losses[-50:]):.4g}")
            if stop.requested:
                break
    return len(losses), losses


@device.command("pull")
@port_options
@project_option("The exported project the device runs (says which parameters live in RAM).")
@base_model_option("Host model to fill in: the exported one [default: the project's model.mct].")
@click.option("-o", "--output", type=click.Path(dir_okay=False), required=True, help="Model file to write.")
@click.option("--force", is_flag=True, help="Replace an existing model file.")
@example("mcutrain device pull --port /dev/ttyACM0 --project fw -o learned.mct")
def pull_cmd(port: str, baud: int, timeout: float, project: str, base: Optional[str], output: str, force: bool) -> None:
    """Read the device's learned parameters (and optimizer state) back into a model file."""
    out = check_output(Path(output), force, "model file")
    ck = _base_model(project, base)
    with connect(port, baud, timeout) as dev:
        meta = checked_project(dev, project)
        assert meta is not None
        _check_base(ck, meta, project)
        params, state, ts = dev.pull()
        step, opt_kind = dev.cached_info.step, dev.cached_info.opt_kind
    segs = segments(meta)
    ck.net.params = segments_to_host(segs, params, ck.net.params)
    kept_state = _pull_state(ck, segs, state, ts, len(params), opt_kind)
    metadata = {
        **ck.metadata,
        "device": _device_record(meta, step, port, _training_records(project, meta["hash"], step)),
    }
    write_output(out, encode_model(ck.net, ck.optimizer, metadata), True)
    click.echo(
        f"pulled {len(params):,} parameters (device step {step}) into {out}"
        + ("" if kept_state else "; the optimizer state was not pulled (the host model has another optimizer)")
    )
    click.echo(
        f"{out} remembers the export (--board {meta['board']} --quant {meta.get('quant', 'f32')} --trainable "
        f"{meta.get('trainable', 'all')}): `mcutrain eval` and `mcutrain export` use it unless told otherwise"
    )


def _device_record(meta: Dict[str, Any], step: int, port: str, trained_on: List[Dict[str, Any]]) -> Dict[str, Any]:
    """metadata['device'] of a pulled model: the device, its step, the export it runs (mcutrain.modelmeta) and
    what `device train --project` sent it."""
    return {
        "hash": meta["hash"],
        "board": meta["board"],
        "step": step,
        "port": port,
        "quant": meta.get("quant", "f32"),
        "trainable": meta.get("trainable", "all"),
        "optimizer": meta.get("device_optimizer"),
        "save": meta.get("save"),
        "loss": meta.get("loss"),
        "trained_on": [{k: v for k, v in r.items() if k != "hash"} for r in trained_on],
    }


def _base_model(project: str, base: Optional[str]) -> Checkpoint:
    """The host model: --model, else the project's model.mct; CliError when there is neither."""
    from .export import host_model

    ck = host_model(project, base)
    if ck is None:
        raise CliError(
            f"{project} has no model.mct (exported by an older mcutrain?): give the exported model with --model"
        )
    return ck


def _check_base(ck: Checkpoint, meta: Dict[str, Any], project: str) -> None:
    """CliError unless the host model has the network exported to the project (same layers and sizes)."""
    if ck.net.architecture() != meta.get("architecture", ck.net.architecture()):
        raise CliError(
            f"the model's network is not the one exported to {project}: give a model with the same "
            f"layers and sizes (the exported one is the project's model.mct)"
        )


def _same_optimizer(ck: Checkpoint, opt_kind: int) -> bool:
    """Does the host model's optimizer keep the same kind of state as the device's (enum mct_opt_kind)?"""
    return ck.optimizer is not None and by_name(OptKind, ck.optimizer.kind) == opt_kind


def _pull_state(ck: Checkpoint, segs: Segments, state: np.ndarray, ts: np.ndarray, n_ram: int, opt_kind: int) -> bool:
    """Put the device's optimizer slots and train state into the host optimizer when they belong together
    (the same optimizer kind)."""
    opt = ck.optimizer
    if opt is None or not _same_optimizer(ck, opt_kind):
        return False
    slots = opt.state.shape[0]
    if state.size != slots * n_ram:
        return False
    for s in range(slots):
        opt.state[s] = segments_to_host(segs, state[s * n_ram : (s + 1) * n_ram], opt.state[s])
    opt.train_state.view(np.uint8)[...] = np.asarray(ts, np.uint8)[: opt.train_state.nbytes]
    return True


@device.command("push")
@port_options
@project_option("The exported project the device runs.")
@base_model_option("Model whose parameters to send (the exported network) [default: the project's model.mct].")
@click.option("--with-state", is_flag=True, help="Send the optimizer state and step too.")
@example("mcutrain device push --port /dev/ttyACM0 --project fw --model retrained.mct")
def push_cmd(port: str, baud: int, timeout: float, project: str, base: Optional[str], with_state: bool) -> None:
    """Write a host model's parameters into the device's RAM (SAVE persists them)."""
    ck = _base_model(project, base)
    with connect(port, baud, timeout) as dev:
        meta = checked_project(dev, project)
        assert meta is not None
        _check_base(ck, meta, project)
        info = dev.cached_info
        n_ram = info.n_params
        segs = segments(meta)
        state, ts = _push_state(ck, segs, n_ram, info.slots, info.opt_kind) if with_state else (None, None)
        dev.push(segments_from_host(segs, ck.net.params, n_ram), state, ts)
    click.echo(
        f"pushed {n_ram:,} parameters"
        + (" and the optimizer state" if state is not None else "")
        + " to the device; `mcutrain device save` persists them"
    )


def _push_state(
    ck: Checkpoint, segs: Segments, n_ram: int, slots: int, opt_kind: int
) -> Tuple[Optional[np.ndarray], Any]:
    """The device's view of the host optimizer state (None when the optimizers do not match)."""
    opt = ck.optimizer
    if opt is None or not _same_optimizer(ck, opt_kind) or opt.state.shape[0] != slots:
        note("note: the optimizer state was not sent: the model's optimizer is not the device's")
        return None, None
    flat = np.concatenate([segments_from_host(segs, opt.state[s], n_ram) for s in range(slots)]) if slots else None
    return flat, opt.train_state.view(np.uint8).copy()


@device.command("save")
@port_options
@example("mcutrain device save --port /dev/ttyACM0")
def save_cmd(port: str, baud: int, timeout: float) -> None:
    """Persist the device's parameters and optimizer state in its storage (double-buffered)."""
    with connect(port, baud, timeout) as dev:
        seq = dev.save()
    click.echo(f"saved on the device (save #{seq})")
