"""`mcutrain eval`, `info`, `plot` and `boards`: look at models, logs and targets."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

import click
import numpy as np

from mcutrain import losses as losses_mod
from mcutrain.datasets import DataError
from mcutrain.featdata import FrontEnd
from mcutrain.features import FeatureSpec
from mcutrain.inputsteps import host_forward
from mcutrain.losses import Loss
from mcutrain.modelfile import MAGIC, Checkpoint, load_model
from mcutrain.modelmeta import class_names, device_export, input_steps
from mcutrain.optim import TrainParams
from mcutrain.sources import (
    DataSettings,
    FileSource,
    ProblemSource,
    Source,
    check_widths,
    load_inputs,
    metrics,
    open_source,
)
from mcutrain.tiny_models import ARCHITECTURES
from mcutrain.tiny_models import build as build_architecture

from .common import CliError, MissingTool, OutputPath, example, note, table, write_output
from .data_options import data_options, pop_data_options

QUANT_CHOICES = ["f32", "int8", "int8-full"]


# ---------------------------------------------------------------- eval


def model_loss(ck: Checkpoint, name: Optional[str]) -> Loss:
    """--loss if given, else the loss the model was trained with, else mse."""
    return losses_mod.by_name(name or ck.metadata.get("loss") or "mse")


def stored_source(ck: Checkpoint, missing_ok: bool = False) -> Optional[Source]:
    """The data source the model file records, opened with the run's seed and validation split (None
    when it records none; with missing_ok, also None when its data file is gone)."""
    stored = ck.metadata.get("train") or {}
    spec = DataSettings.from_dict(stored.get("data") or {})
    if not spec.given or (missing_ok and spec.path and not Path(spec.path).exists()):
        return None
    val = float(stored.get("val", 0.0)) if spec.path else 0.0
    return open_source(spec, int(stored.get("seed", 0)), val, classes=class_names(ck.metadata))


def eval_source(ck: Checkpoint, spec: DataSettings, samples: int) -> Tuple[Source, np.ndarray, np.ndarray, str]:
    """(source, x, y, what) to evaluate on: the given data (all of it), else the model's own data source
    (its held-out split, or fresh samples of its problem)."""
    stored = ck.metadata.get("train") or {}
    frontend = model_frontend(ck)
    if spec.given and frontend is not None and frontend.spec is not None:
        # raw windows through the model's own pipeline and normalisation
        if spec.features and FeatureSpec.parse(spec.features) != frontend.spec:
            raise CliError("--features differs from the pipeline the model was trained with: leave it out")
        spec = replace(spec, features=frontend.spec.text())
    if spec.given:
        src = open_source(
            spec,
            int(stored.get("seed", 0)),
            classes=class_names(ck.metadata),
            frontend=frontend if spec.features else None,
        )
        x, y = src.evaluation(samples)
        return src, x, y, f"{src.name} ({len(x)} samples)"
    own = stored_source(ck)
    if own is None:
        raise CliError("the model file does not say what it was trained on: give --data FILE or --problem NAME")
    if isinstance(own, FileSource) and own.val is not None:
        val = float(stored.get("val", 0.0))
        return own, own.val.x, own.val.y, f"{own.name}, the held-out {val:.0%} ({len(own.val)} samples)"
    x, y = own.evaluation(samples)
    what = "fresh samples" if isinstance(own, ProblemSource) else "all samples: no split was held out"
    return own, x, y, f"{own.name} ({len(x)} {what})"


def model_frontend(ck: Checkpoint) -> Optional[FrontEnd]:
    """The front end (feature pipeline and normalisation) a model file keeps, or None."""
    d = ck.metadata.get("frontend")
    return None if d is None else FrontEnd.from_dict(d, ck.net.n_in)


def device_overlap(ck: Checkpoint, src: Source) -> Tuple[int, int]:
    """(how many of the evaluation rows the device trained on, how many rows are evaluated) for a model pulled
    from a device that `device train --project` trained on rows of the same file; (0, n) otherwise."""
    from mcutrain.modelmeta import device_trained_on
    from mcutrain.sources import device_rows

    if not isinstance(src, FileSource):
        return 0, 0
    n = len(src.full)
    rows = src.val_rows if src.val_rows is not None and src.val is not None and src.spec is not None else None
    evaluated = rows if rows is not None else np.arange(n)
    records = [r for r in device_trained_on(ck.metadata) if r.get("rows") == n]
    if not records:
        return 0, len(evaluated)
    crc = src.fingerprint
    seen = np.zeros(n, bool)
    for r in records:
        if r.get("crc") == crc:
            seen[device_rows(r, n)] = True
    return int(seen[evaluated].sum()), len(evaluated)


def export_choices(ck: Checkpoint, quant: Optional[str], trainable: Optional[str]) -> Tuple[str, str, List[str]]:
    """--quant and --trainable as eval, info and export take them: as given, else as the export a pulled model
    came from (mcutrain.modelmeta.device_export), else f32 and all. Also returns the options taken from the
    model's record, e.g. ['--quant int8', '--trainable last:1']."""
    rec = device_export(ck.metadata)
    taken = []
    if quant is None and "quant" in rec:
        quant = rec["quant"]
        taken.append(f"--quant {quant}")
    if trainable is None and "trainable" in rec:
        trainable = rec["trainable"]
        taken.append(f"--trainable {trainable}")
    quant, trainable = quant or "f32", trainable or "all"
    if quant != "f32" and trainable.strip().lower() == "all":
        note(
            f"note: --quant {quant} quantizes only frozen layers and --trainable all freezes none, so nothing is "
            "quantized: add --trainable last:1, biases or none"
        )
    return quant, trainable, taken


def model_samples(ck: Checkpoint, n: int) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """The samples (x, y) `mcutrain eval MODEL` uses (n of them from a problem; a file's held-out part),
    or None when the model file records no data source or its data cannot be read."""
    try:
        _, x, y, _ = eval_source(ck, DataSettings(), n)
    except (DataError, CliError, OSError):
        return None
    return x, y


def calibration_inputs(ck: Checkpoint, path: Optional[str], x_eval: Optional[np.ndarray]) -> Optional[np.ndarray]:
    """Inputs that set the int8 ranges: --calibration FILE (laid out like the training data, target
    columns allowed), else None for an imported int8 model that keeps its own ranges, else the model's training
    data, else the evaluation inputs (if any)."""
    n_in = ck.net.n_in
    assert n_in is not None
    from mcutrain.exporter.tflite_import import QUANT_KEY

    if path is None and QUANT_KEY in ck.metadata:
        return None  # an imported int8 model (e.g. a .tflite) keeps its own ranges
    stored = (ck.metadata.get("train") or {}).get("data") or {}
    if path:
        return load_inputs(path, n_in, layout=DataSettings.from_dict(stored))
    src = stored_source(ck, missing_ok=True)
    if src is not None:
        return src.train.x[:1000] if isinstance(src, FileSource) else src.batch(0, 512)[0]
    if x_eval is None:
        raise CliError(
            "--quant int8-full needs calibration inputs to choose the int8 ranges, and the model file "
            "does not record its training data: give --calibration FILE (a few hundred typical inputs)"
        )
    note("note: calibrating the int8 ranges on the evaluation inputs (give --calibration FILE for others)")
    return x_eval


def device_model(
    ck: Checkpoint,
    quant: str,
    trainable: str,
    loss: Loss,
    board: Optional[Any] = None,
    calibration: Optional[np.ndarray] = None,
    optimizer: Optional[str] = None,
    save: str = "all",
) -> Any:
    """The device's model of a checkpoint (int8-full needs calibration inputs), trained with the optimizer
    kind given (default: the model's) and saving what save says."""
    from mcutrain.exporter.device import build_device_model, device_optimizer

    opt = device_optimizer(ck, optimizer)
    return build_device_model(ck, trainable, quant, loss, opt, board=board, calibration=calibration, save=save)


TRAINABLE_HELP = (
    "Layers that keep training (f32, in RAM) on the device: all, none, last:N or biases. Only frozen "
    "layers are quantized, so --quant needs some: with 'all' it changes nothing. With --quant int8-full, "
    "biases trains the last layer's biases only, over a full-integer body."
)
TRAINABLE_DEFAULT = " [default: as the model was exported, for a model pulled from a device; else all]"


def device_model_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--quant, --trainable and --calibration: the device model to build (the defaults: export_choices)."""
    opts = [
        click.option(
            "--quant",
            type=click.Choice(QUANT_CHOICES),
            default=None,
            help="f32; int8: int8 weights in frozen layers (float math); int8-full: frozen layers "
            "run in integers (for boards without an FPU) [default: as the model was exported, for a model "
            "pulled from a device; else f32].",
        ),
        click.option("--trainable", default=None, help=TRAINABLE_HELP + TRAINABLE_DEFAULT),
        click.option(
            "--calibration",
            type=click.Path(dir_okay=False, exists=True),
            default=None,
            help="Inputs (CSV/NPZ/IDX, laid out like the training data) that set int8-full's "
            "activation ranges [default: the training data].",
        ),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def sim_option(f: Callable[..., Any]) -> Callable[..., Any]:
    """--sim: plan the memory against the board's simulated stand-in."""
    return click.option(
        "--sim", "for_sim", is_flag=True, help="Check the memory plan against the board's simulated stand-in."
    )(f)


def confusion(outputs: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Counts [true class][predicted class]."""
    k = targets.shape[1]
    m = np.zeros((k, k), np.int64)
    np.add.at(m, (targets.argmax(axis=1), outputs.argmax(axis=1)), 1)
    return m


def confusion_text(m: np.ndarray, limit: int = 20, names: Optional[List[str]] = None) -> str:
    """The confusion matrix as a table (the classes with most samples when there are many), the classes
    shown by name when they have names."""
    k = m.shape[0]
    show = np.arange(k) if k <= limit else np.sort(np.argsort(-m.sum(axis=1))[:limit])
    label = (lambda c: names[c]) if names is not None and len(names) == k else str
    headers = ["true \\ predicted"] + [label(c) for c in show]
    rows = [[label(r)] + [int(m[r, c]) for c in show] for r in show]
    head = "confusion matrix (rows: true class, columns: predicted class)"
    if k > limit:
        head += f"; the {limit} most frequent of {k} classes"
    return head + "\n" + table(headers, rows)


@click.command("eval")
@click.argument("model", type=click.Path(exists=True, dir_okay=False))
@data_options
@click.option("--loss", "loss_name", default=None, help="Loss to report [default: the one it was trained with].")
@device_model_options
@click.option(
    "--samples", type=click.IntRange(1), default=1000, show_default=True, help="Samples to draw from a problem."
)
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON.")
@example("""
mcutrain eval model.mct                       # on the data it was trained on (its held-out part)
mcutrain eval model.mct --problem modadd10 --quant int8
mcutrain eval iris.mct --data iris_test.csv --classify --json""")
def eval_cmd(
    model: str,
    loss_name: Optional[str],
    quant: str,
    trainable: str,
    calibration: Optional[str],
    samples: int,
    as_json: bool,
    **kw: Any,
) -> None:
    """Loss and accuracy of a model file, with a confusion matrix for classifiers (one-hot targets).

    With --quant, the model the device would run (int8 weights, or full-integer int8) is evaluated
    on this computer through the firmware's own C kernels and compared with the f32 network.
    """
    from mcutrain.budget import check_size, samples_bytes

    ck = load_model(model)
    quant, trainable, taken = export_choices(ck, quant, trainable)
    spec = pop_data_options(kw)
    if not spec.path:  # samples drawn from a problem (a file's are all there are)
        check_size("--samples", samples, lambda n: samples_bytes(ck.net, n))
    src, x, y, what = eval_source(ck, spec, samples)
    check_widths(ck.net.n_in, ck.net.n_out, src, f"the network in {model}")
    loss = model_loss(ck, loss_name)
    result: Dict[str, Any] = {"model": model, "data": what, "samples": int(len(x)), "loss_name": str(loss)}
    result.update({"quant": quant, "trainable": trainable})
    seen, evaluated = device_overlap(ck, src)
    if seen:
        result["trained_on_by_device"] = seen
        note(
            f"note: the device trained on {seen} of these {evaluated} samples (`device train` sent them), so "
            "they are not held out: evaluate on data the device has not seen"
        )
    if quant == "f32":
        outputs = host_forward(ck, x)
    else:
        from mcutrain.exporter.quantize import evaluate
        from mcutrain.exporter.twin import DeviceTwin

        cal = calibration_inputs(ck, calibration, x) if quant == "int8-full" else None
        dm = device_model(ck, quant, trainable, loss, calibration=cal)
        report = evaluate(ck, dm, x, y, loss, trainable)
        result["quantization"] = report.to_dict()
        outputs = DeviceTwin(dm).predict(x)
    classifier = src.classification
    result.update(metrics(outputs, y, loss, classifier))
    if classifier:
        result["confusion"] = confusion(outputs, y).tolist()
    names = class_names(ck.metadata)
    if names is not None:
        result["classes"] = names
    if as_json:
        click.echo(json.dumps(result, indent=2))
        return
    as_exported = f", as exported to {device_export(ck.metadata).get('board')} ({' '.join(taken)})" if taken else ""
    click.echo(f"{model} ({'f32' if quant == 'f32' else quant + ' device model'}{as_exported}) on {what}")
    click.echo(f"  {loss} loss  {result['loss']:.6g}")
    if classifier:
        click.echo(f"  accuracy  {result['accuracy']:.2%}")
    if quant != "f32":
        click.echo(report.summary())
    if classifier:
        click.echo(confusion_text(np.asarray(result["confusion"]), names=names))


# ---------------------------------------------------------------- info


def layer_rows(ck: Checkpoint) -> Tuple[List[List[Any]], int, int]:
    """Rows of the layer table and the totals of parameters and MACs."""
    rows = [[i, r["layer"], r["op"], r["in"], r["out"], r["params"], r["macs"]] for i, r in enumerate(ck.net.summary())]
    return rows, sum(r[5] for r in rows), sum(r[6] for r in rows)


def describe_training(ck: Checkpoint) -> List[str]:
    """Lines about the optimizer and the run stored in the model file."""
    lines = []
    if ck.optimizer is not None:
        tp = ck.optimizer.params
        sched = tp.schedule if tp.schedule == "constant" else f"{tp.schedule} to {tp.lr_final:g} over {tp.decay_steps}"
        lines.append(f"optimizer   {ck.optimizer.kind}, lr {tp.lr:g} ({sched}), step {ck.optimizer.step}")
    if ck.metadata.get("loss"):
        lines.append(f"loss        {ck.metadata['loss']}")
    run = ck.metadata.get("train")
    dev = ck.metadata.get("device") if isinstance(ck.metadata.get("device"), dict) else None
    if run:
        data = DataSettings.from_dict(run.get("data") or {})
        lines.append(
            f"trained on  {data.describe()}: {run.get('batches', '?')} of {run.get('steps', '?')} steps on the host, "
            f"batch {run.get('batch')}, seed {run.get('seed')}"
        )
    if dev is not None:
        rec = device_export(ck.metadata)
        lines.append(
            f"then        {dev.get('step', '?')} steps on the device ({rec.get('board', '?')}, exported with --quant "
            f"{rec.get('quant', 'f32')} --trainable {rec.get('trainable', 'all')}), pulled into this file"
        )
    if ck.optimizer is not None and lines and lines[0].startswith("optimizer"):
        own = "the device's" if dev is not None else "the host's"
        lines[0] += f" ({own} count)"
    names = class_names(ck.metadata)
    if names is not None:
        lines.append(f"classes     {', '.join(names)}")
    for step in input_steps(ck.metadata, ck.net.n_in):
        lines.append(
            f"inputs      standardised first: (x - mean) * scale per input, from the {step.get('source', 'data')} "
            "(the device does it too)"
        )
    return lines


@click.command()
@click.argument("model", type=click.Path(exists=True, dir_okay=False), required=False)
@click.option(
    "--arch",
    type=click.Choice(sorted(ARCHITECTURES)),
    default=None,
    help="Show a reference architecture (untrained, seeded) instead of a model file.",
)
@click.option("--board", default=None, help="Show the memory plan on this board (see `mcutrain boards`).")
@click.option(
    "--quant",
    type=click.Choice(["f32", "int8"]),
    default=None,
    help="Quantization assumed by the memory plan [default: as the model was exported, for a model pulled from "
    "a device; else f32].",
)
@click.option("--trainable", default=None, help=TRAINABLE_HELP + TRAINABLE_DEFAULT)
@click.option("--optimizer", default=None, help="Optimizer the device trains with [default: the model's].")
@click.option("--save", "save", type=click.Choice(["params", "all"]), default=None, help="What a device save keeps.")
@sim_option
@example("""
mcutrain info model.mct
mcutrain info model.mct --board uno --trainable last:1
mcutrain info model.mct --board uno --optimizer sgd --save params
mcutrain info --arch ds_cnn --board nucleo_f401re --trainable last:1""")
def info(
    model: Optional[str],
    arch: Optional[str],
    board: Optional[str],
    quant: Optional[str],
    trainable: Optional[str],
    optimizer: Optional[str],
    save: Optional[str],
    for_sim: bool,
) -> None:
    """Layers (sizes, parameters, multiply-accumulates), what the file records about its training, and
    the memory plan on a board."""
    if (model is None) == (arch is None):
        raise CliError("give a model file or --arch NAME (one of them)")
    if arch is not None:
        net = build_architecture(arch).rand_params(seed=0)
        ck = Checkpoint(net, net.new_sgd(TrainParams()))
        model = f"--arch {arch}"
    else:
        ck = load_model(model)
    training = describe_training(ck)  # first: what it finds wrong is said before anything is printed
    rows, params, macs = layer_rows(ck)
    shape = "x".join(str(d) for d in ck.net.in_shape or ())
    click.echo(f"{model}: {ck.net.describe()}")
    if ck.net.in_shape is not None and len(ck.net.in_shape) > 1:
        click.echo(f"input shape {shape} (channels last)")
    click.echo(f"{ck.net.n_in} inputs, {ck.net.n_out} outputs, {params:,} parameters, {macs:,} MACs per sample")
    click.echo(
        table(
            ["#", "layer", "op", "in", "out", "params", "MACs"],
            rows + [["", "total", "", "", "", params, macs]],
            right=[True, False, False, True, True, True, True],
        )
    )
    for line in training:
        click.echo(line)
    fe = model_frontend(ck)
    if fe is not None and fe.spec is not None:
        z = fe.spec.sizes()
        click.echo(
            f"front end   {fe.spec.text()}: raw windows of {z.n_in} values -> {z.n_frames} x {z.n_per_frame} "
            f"features{', normalised' if fe.mean is not None else ''}"
            + (f"; labels {', '.join(fe.labels)}" if fe.labels else "")
        )
    if board:
        from mcutrain.exporter.boards import get_board
        from mcutrain.exporter.export import board_device_model
        from mcutrain.exporter.memplan import plan

        b = get_board(board)
        quant, trainable, _ = export_choices(ck, quant, trainable)
        m = board_device_model(ck, b, trainable, quant, model_loss(ck, None), optimizer, save, for_sim)
        mp = plan(m, b, for_sim)
        click.echo("")
        click.echo(mp.table())
        click.echo(
            f"fits {b.name}: {'yes' if mp.fits() else 'NO'} ({mp.ram:,} of {mp.ram_budget:,} B RAM, "
            f"{mp.flash:,} of {mp.flash_budget:,} B flash)"
        )


# ---------------------------------------------------------------- plot


def is_model_file(path: str) -> bool:
    """Does the file start with the model file marker?"""
    with open(path, "rb") as f:
        return f.read(len(MAGIC)) == MAGIC


@click.command()
@click.argument("source", type=click.Path(exists=True, dir_okay=False))
@click.option(
    "-o", "--output", type=OutputPath(dir_okay=False), default=None, help="PNG to write [default: SOURCE with .png]."
)
@click.option("--weights", is_flag=True, help="Weight heat maps of a model file (the default for model files).")
@click.option("--force", is_flag=True, help="Replace an existing PNG.")
@example("""
mcutrain plot run.jsonl -o loss.png           # loss, validation metric and learning rate
mcutrain plot model.mct --weights -o w.png    # one heat map per layer""")
def plot(source: str, output: Optional[str], weights: bool, force: bool) -> None:
    """Plot a training log (from `mcutrain train --log`) or a model file's weights as a PNG."""
    from mcutrain import plot as plots
    from mcutrain.recorder import read_log

    out = Path(output or Path(source).with_suffix(".png"))
    if is_model_file(source):
        ck = load_model(source)
        png = plots.plot_weights(ck.net, f"{Path(source).name}: {ck.net.describe()}")
    elif weights:
        raise CliError(f"{source} is not a model file: --weights plots the weights of a .mct file")
    else:
        records = read_log(source)
        if not any(r.get("event") == "step" for r in records):
            raise CliError(f"{source} has no training steps: is it a log written by `mcutrain train --log`?")
        png = plots.plot_log(records, Path(source).name)
    write_output(out, png, force, "PNG")
    click.echo(f"wrote {out}")


# ---------------------------------------------------------------- boards


def simulator_status(board: Any) -> Tuple[str, str]:
    """(simulator kind, 'ready' or what is missing) for a board."""
    import shutil

    from mcutrain.exporter import sim

    if board.sim_kind is None:
        return "-", "no simulator"
    try:
        s = sim.simulator_for(board)
    except sim.SimError:
        return board.sim_kind, "not in this mcutrain"
    missing = [t for t in s.tools if shutil.which(t) is None]
    return board.sim_kind, ("missing " + ", ".join(missing)) if missing else "ready"


def _kib(n: int) -> str:
    return f"{n / 1024:,.0f} KiB" if n < 1 << 30 else "host"


@click.command()
@click.option("--json", "as_json", is_flag=True, help="Print the boards as JSON.")
@example("mcutrain boards")
def boards(as_json: bool) -> None:
    """The boards mcutrain can export to: RAM, flash, storage for saves, FPU, and the simulator that stands in
    for each."""
    from mcutrain.exporter.boards import all_boards

    bs = all_boards()
    if not bs:
        raise MissingTool("no board files found: reinstall mcutrain")
    rows = []
    for b in bs:
        kind, status = simulator_status(b)
        rows.append(
            {
                "name": b.name,
                "title": b.title,
                "core": b.core,
                "ram": b.ram,
                "flash": b.flash,
                "storage": b.storage,
                "fpu": b.fpu,
                "simulator": kind,
                "sim_ram": b.sim_ram,
                "simulator_status": status,
            }
        )
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(
        table(
            ["board", "title", "core", "RAM", "flash", "storage", "FPU", "simulator", "status"],
            [
                [
                    r["name"],
                    r["title"],
                    r["core"],
                    _kib(r["ram"]),
                    _kib(r["flash"]),
                    f"{r['storage']:,} B" if r["storage"] else "none",
                    r["fpu"],
                    r["simulator"] + (f" ({_kib(r['sim_ram'])} RAM)" if r["sim_ram"] != r["ram"] else "")
                    if r["simulator"]
                    else None,
                    r["simulator_status"],
                ]
                for r in rows
            ],
            right=[False, False, False, True, True, True, False, False, False],
        )
    )
    note(
        "storage: what device saves can use (none: SAVE answers 'not supported'); the simulated stand-ins have the "
        "board's RAM and storage, except where the simulator column gives the stand-in's RAM"
    )
