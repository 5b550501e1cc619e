"""`mcutrain train`: build or resume a network, check it against the data, train it, save it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Set, Tuple

import click
from click.core import ParameterSource

from mcutrain import layers as L
from mcutrain import losses as losses_mod
from mcutrain.architecture import load_architecture_file, parse_inline, parse_shape
from mcutrain.losses import Loss
from mcutrain.modelfile import load_model
from mcutrain.modelmeta import class_names, input_steps
from mcutrain.module import Module
from mcutrain.optim import KINDS, SCHEDULES, Optimizer, TrainParams
from mcutrain.recorder import Recorder
from mcutrain.run import RunSettings, TrainingRun
from mcutrain.sources import FileSource, Source, check_widths, open_source
from mcutrain.tiny_models import ARCHITECTURES
from mcutrain.tiny_models import build as build_architecture

from .common import CliError, Interrupted, OutputPath, Progress, check_output, example, note
from .data_options import DATA_KEYS, data_options, pop_data_options

DEFAULT_NET = "linear:20x35,sigmoid,linear:35x10,softmax"
DEFAULT_PROBLEM = "modadd10"
DEFAULT_STEPS = 3000
DEFAULT_OUTPUT = "model.mct"

TP_OPTIONS = {
    "lr": "lr",
    "schedule": "schedule",
    "lr_final": "lr_final",
    "decay_steps": "decay_steps",
    "warmup": "warmup_steps",
    "l1": "l1",
    "l2": "l2",
    "clip": "clip",
    "scale_by_loss": "scale_by_loss",
}
COEFF_OPTIONS = ("momentum", "beta", "beta1", "beta2", "eps", "similarity_penalty")
RUN_OPTIONS = ("batch", "threads", "seed", "val", "eval_every", "log_every")
DATA_FIELDS = {
    "data_path": "path",
    "problem": "problem",
    "inputs": "inputs",
    "targets": "targets",
    "labels": "labels",
    "x_key": "x_key",
    "y_key": "y_key",
    "classify": "classify",
    "features": "features",
}  # option -> DataSettings
# how a resumed run names a change of its data source's settings, and the DataSettings fields behind each
DATA_CHANGES = [
    ("--data/--problem", ("problem", "path")),
    ("--labels", ("labels",)),
    ("--inputs", ("inputs",)),
    ("--targets", ("targets",)),
    ("--x-key", ("x_key",)),
    ("--y-key", ("y_key",)),
    ("--classify", ("classify",)),
    ("--features", ("features",)),
]


def _options(f: Any) -> Any:
    """Every option of `mcutrain train` (kept apart from the function for readability)."""
    opts = [
        click.option(
            "--net",
            "net_text",
            default=None,
            help=f"Inline network, e.g. '{DEFAULT_NET}' (the default with the default problem); "
            "`mcutrain layers` lists the layer names and their sizes.",
        ),
        click.option(
            "--arch",
            "arch",
            type=click.Choice(sorted(ARCHITECTURES)),
            default=None,
            help="A reference architecture instead of --net: the MLPerf Tiny models (ds_cnn, fc_autoencoder, "
            "mobilenet_v1_025, resnet8) or the digits CNN (`mcutrain info --arch NAME` shows its layers).",
        ),
        click.option(
            "--input-shape",
            "input_shape",
            default=None,
            metavar="HxWxC",
            help="Shape of one input sample for networks that start with a spatial layer: HxWxC for images "
            "(e.g. 8x8x1), TxC for series; data files give flat rows in that order (channels last).",
        ),
        click.option(
            "--net-file",
            "net_file",
            type=click.Path(dir_okay=False),
            default=None,
            help="Network architecture file instead of --net: TOML ([[layers]] tables) or JSON (a list of layers), "
            "each {type = NAME, ARGUMENT = VALUE}; `mcutrain layers` shows the arguments and an example.",
        ),
        data_options,
        click.option(
            "--normalize",
            is_flag=True,
            help="Standardise each input column of the data file (subtract its mean, divide by its spread, measured "
            "on the training split); the model file keeps the statistics, and exports apply them on the device.",
        ),
        click.option(
            "--val",
            type=click.FloatRange(0, 1, max_open=True),
            default=0.1,
            show_default=True,
            help="Fraction of a data file held out for validation (problems draw fresh samples).",
        ),
        click.option(
            "--loss",
            "loss_name",
            default="auto",
            show_default=True,
            help="mse, huber[:BETA], logit_bce, cross_entropy, cosine; auto = cross_entropy after softmax, else mse.",
        ),
        click.option(
            "--opt", "opt_kind", type=click.Choice(list(KINDS)), default="adam", show_default=True, help="Optimizer."
        ),
        click.option("--lr", type=float, default=0.01, show_default=True, help="Learning rate."),
        click.option(
            "--schedule",
            type=click.Choice(list(SCHEDULES)),
            default="constant",
            show_default=True,
            help="Learning-rate decay to --lr-final over --decay-steps.",
        ),
        click.option("--lr-final", type=float, default=0.0, show_default=True, help="Final learning rate."),
        click.option(
            "--decay-steps", type=click.IntRange(0), default=0, help="Steps of the decay [default: the run's steps]."
        ),
        click.option(
            "--warmup", type=click.IntRange(0), default=0, show_default=True, help="Warm-up steps (soft start)."
        ),
        click.option(
            "--l1",
            type=float,
            default=0.0,
            show_default=True,
            help="L1 penalty l1*|w| on connection weights (not biases).",
        ),
        click.option(
            "--l2",
            type=float,
            default=0.0,
            show_default=True,
            help=(
                "L2 penalty l2*w^2 on connection weights, added to the gradient as 2*l2*w "
                "(PyTorch weight_decay = 2*l2; coupled, not AdamW)."
            ),
        ),
        click.option(
            "--clip",
            type=float,
            default=0.0,
            show_default=True,
            help="Clamp each element of the raw gradient to [-clip, clip], before L1/L2 (0 = off).",
        ),
        click.option(
            "--scale-by-loss",
            is_flag=True,
            help="Multiply each step's learning rate by the loss (minidx scales the gradient instead).",
        ),
        click.option(
            "--momentum",
            type=float,
            default=0.9,
            show_default=True,
            help="Momentum coefficient (momentum, rmsprop_momentum).",
        ),
        click.option(
            "--beta",
            type=float,
            default=0.9,
            show_default=True,
            help="RMSProp decay of the mean square (PyTorch's alpha).",
        ),
        click.option("--beta1", type=float, default=0.9, show_default=True, help="Adam beta1."),
        click.option("--beta2", type=float, default=0.999, show_default=True, help="Adam beta2."),
        click.option(
            "--eps",
            type=float,
            default=None,
            help="Optimizer epsilon [default: 1e-8 Adam, added to the root; 1e-20 RMSProp, under the root].",
        ),
        click.option(
            "--similarity-penalty",
            type=float,
            default=0.0,
            show_default=True,
            help="Momentum's cosine-similarity penalty (0 = off).",
        ),
        click.option(
            "--steps",
            type=click.IntRange(1),
            default=None,
            help=f"Total training steps, counting those before a --resume [default: {DEFAULT_STEPS}].",
        ),
        click.option(
            "--epochs", type=click.IntRange(1), default=None, help="Total passes over a data file, instead of --steps."
        ),
        click.option("--batch", type=click.IntRange(1), default=32, show_default=True, help="Batch size."),
        click.option(
            "--threads",
            type=click.IntRange(1),
            default=1,
            show_default=True,
            help="Threads per batch (results then differ in the last bits from 1 thread).",
        ),
        click.option(
            "--seed",
            type=click.IntRange(0),
            default=0,
            show_default=True,
            help="Seed of the initial weights and of the data order.",
        ),
        click.option("--init-scale", type=float, default=1.0, show_default=True, help="Initial weight scale."),
        click.option(
            "-o",
            "--output",
            type=click.Path(dir_okay=False),
            default=None,
            help=f"Model file to write [default: {DEFAULT_OUTPUT}, or the --resume file].",
        ),
        click.option("--force", is_flag=True, help="Replace existing output files."),
        click.option(
            "--log",
            "log_path",
            type=OutputPath(dir_okay=False),
            default=None,
            help="JSON-lines training log (appended to when resuming).",
        ),
        click.option(
            "--log-every", type=click.IntRange(1), default=10, show_default=True, help="Log the loss every N steps."
        ),
        click.option(
            "--eval-every",
            type=click.IntRange(0),
            default=0,
            help="Validate every N steps [default: 20 times per run].",
        ),
        click.option(
            "--checkpoint-every",
            type=click.IntRange(0),
            default=0,
            show_default=True,
            help="Also save the model file every N steps (0 = only at the end).",
        ),
        click.option(
            "--resume",
            type=click.Path(dir_okay=False, exists=True),
            default=None,
            help="Continue the run saved in this model file exactly where it stopped.",
        ),
        click.option("-q", "--quiet", is_flag=True, help="No progress bar."),
        click.option(
            "--stop-after",
            type=click.IntRange(0),
            default=0,
            hidden=True,
            help="Testing: behave as if Ctrl-C came after N steps of this invocation.",
        ),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


@click.command()
@_options
@click.pass_context
@example(f"""
mcutrain train                     # the built-in example: {DEFAULT_PROBLEM}, {DEFAULT_STEPS} steps -> model.mct
mcutrain train --net "linear:8x16,tanh,linear:16x2,softmax" --problem parity8 --steps 5000 -o parity.mct
mcutrain train --net-file net.toml --data iris.csv --classify --epochs 50 --log run.jsonl -o iris.mct
mcutrain train --resume iris.mct   # after Ctrl-C: continue exactly""")
def train(ctx: click.Context, **kw: Any) -> None:
    """Train a network on a data file or a built-in problem and save it as a model file.

    Everything is checked before the first step: the network's sizes, its input and output widths
    against the data, the loss and the optimizer settings. Ctrl-C saves a checkpoint and exits with
    code 130; --resume continues it bit for bit as if it had never stopped.
    """
    explicit = {
        k for k in kw if ctx.get_parameter_source(k) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
    }
    setup = _resume(kw, explicit) if kw["resume"] else _fresh(kw)
    if setup is None:
        return
    net, opt, loss, source, settings, out, start, metadata = setup
    check_batch(net, source, settings)
    log = _open_log(kw["log_path"], kw["force"], resuming=bool(kw["resume"]), every=settings.log_every)
    if log is not None:
        log.start(
            network=net.architecture(),
            optimizer=opt.config(),
            settings=settings.to_dict(),
            n_params=net.param_count(),
            resumed_at=start if start else None,
        )
    with Progress(settings.steps - start, "training", not kw["quiet"]) as bar:
        run = TrainingRun(
            net,
            opt,
            loss,
            source,
            settings,
            out,
            start,
            log,
            bar.update,
            kw["checkpoint_every"],
            kw["stop_after"],
            metadata,
        )
        try:
            result = run.run()
        except BaseException:
            if log is not None:
                log.close()
            raise
    if log is not None:
        log.end(
            step=result.batches,
            smoothed_loss=result.loss,
            interrupted=result.interrupted,
            **{f"val_{k}": v for k, v in result.val.items()},
        )
    if result.interrupted:
        raise Interrupted(
            f"interrupted at step {result.batches} of {settings.steps}; saved a checkpoint to "
            f"{out}: continue with `mcutrain train --resume {out}`"
        )
    _summary(result, settings, source, opt, out)


def check_batch(net: Module, source: Any, settings: RunSettings) -> None:
    """ConfigError, before anything is allocated, when a step of settings.batch samples does not fit the memory
    this process can take (with the largest batch that does)."""
    from mcutrain.budget import check_size, step_bytes

    if isinstance(source, FileSource):  # a batch holds at most the samples the file has, which are loaded
        n = len(source.train)
        check_size("--batch", settings.batch, lambda b: step_bytes(net, min(b, n), settings.threads, drawn=False))
    else:
        check_size("--batch", settings.batch, lambda b: step_bytes(net, b, settings.threads))


# ---- fresh runs ----


def _fresh(kw: Dict[str, Any]) -> Tuple[Any, ...]:
    """Everything a new run needs, checked before training."""
    out = check_output(Path(DEFAULT_OUTPUT if kw["output"] is None else kw["output"]), kw["force"], "model file")
    if kw["log_path"]:
        check_output(Path(kw["log_path"]), kw["force"], "log")
    data = pop_data_options(kw)
    default_example = not (kw["net_text"] or kw["net_file"] or kw["arch"] or data.given)
    if default_example:
        data.problem = DEFAULT_PROBLEM
    net = _network(kw["net_text"], kw["net_file"], kw["input_shape"], kw["arch"])
    source = open_source(data, kw["seed"], kw["val"])
    given = kw["net_text"] or kw["net_file"] or kw["arch"]
    check_widths(net.n_in, net.n_out, source, "the network" if given else f"the default network ({DEFAULT_NET})")
    steps = _input_steps(source, kw["normalize"])
    loss = _loss(kw["loss_name"], net)
    settings = RunSettings(
        data=data,
        loss=str(loss),
        batch=kw["batch"],
        threads=kw["threads"],
        seed=kw["seed"],
        val=kw["val"] if data.path else 0.0,
        steps=_total_steps(kw, source, kw["batch"], None),
        epochs=kw["epochs"],
        init_scale=kw["init_scale"],
        eval_every=kw["eval_every"],
        log_every=kw["log_every"],
    )
    net.rand_params(settings.seed, settings.init_scale)
    opt = _optimizer(net, kw, settings.steps)
    if default_example:
        note(
            f"training the built-in example: {DEFAULT_NET} on {DEFAULT_PROBLEM} for {settings.steps} steps "
            f"(see `mcutrain train --help` for your own network and data)"
        )
    remembered = _remembered(source, {"input_steps": steps} if steps else {})
    return net, opt, loss, _standardized(source, steps), settings, out, 0, remembered


def _input_steps(source: Source, normalize: bool) -> List[Dict[str, Any]]:
    """The input steps of a new run: with --normalize, the training split's standardisation; without it, a
    note when the inputs' scales differ widely."""
    from mcutrain.inputsteps import spread_note, standardize_step

    if not isinstance(source, FileSource):
        if normalize:
            raise CliError(
                "--normalize standardises the columns of a data file (--data); the built-in problems need none"
            )
        return []
    if normalize:
        return [standardize_step(source.train.x)]
    hint = spread_note(source.train.x, source.full.input_names or [])
    if hint:
        note(hint)
    return []


def _standardized(source: Source, steps: List[Dict[str, Any]]) -> Source:
    """The source the run trains on: its inputs through the model's input steps."""
    return source.standardized(steps) if steps and isinstance(source, FileSource) else source


def _remembered(source: Source, base: Dict[str, Any]) -> Dict[str, Any]:
    """What the model file keeps besides the run (mcutrain.modelmeta): base (a resumed model's), with the class
    names of text labels."""
    out = {k: v for k, v in base.items() if k not in ("loss", "train")}
    classes = getattr(source, "classes", None)
    if classes is not None:
        out["classes"] = list(classes)
    return out


def _network(
    net_text: Optional[str], net_file: Optional[str], input_shape: Optional[str] = None, arch: Optional[str] = None
) -> Module:
    """The network from --net, --net-file or --arch (the README's example without any), sized by --input-shape."""
    if sum(bool(v) for v in (net_text, net_file, arch)) > 1:
        raise CliError("give the network one way: inline (--net), as a file (--net-file) or by name (--arch)")
    if arch:
        if input_shape:
            raise CliError(f"--arch {arch} fixes its input shape; leave out --input-shape")
        return build_architecture(arch)
    shape = parse_shape(input_shape) if input_shape else None
    if net_file:
        return load_architecture_file(net_file, shape)
    return parse_inline(net_text or DEFAULT_NET, shape)


def _loss(name: str, net: Module) -> Loss:
    """--loss, with 'auto' picking cross_entropy after a softmax and mse otherwise."""
    last = list(net.layers())[-1]
    if name == "auto":
        return losses_mod.cross_entropy if isinstance(last, L.Softmax) else losses_mod.mse
    loss = losses_mod.by_name(name)
    if loss is losses_mod.cross_entropy and not isinstance(last, L.Softmax):
        note("note: cross_entropy expects probabilities; the network does not end with softmax")
    return loss


def _total_steps(kw: Dict[str, Any], source: Source, batch: int, stored: Optional[int]) -> int:
    """Total steps from --steps or --epochs (else the stored total, else the default)."""
    if kw["steps"] and kw["epochs"]:
        raise CliError("give either --steps or --epochs, not both")
    if kw["epochs"]:
        per = source.batches_per_epoch(batch)
        if per is None:
            raise CliError(f"--epochs needs a data file; {source.name} is an endless problem: use --steps")
        return kw["epochs"] * per
    return kw["steps"] or stored or DEFAULT_STEPS


def _train_params(
    kw: Dict[str, Any], steps: int, base: Optional[TrainParams] = None, only: Optional[Set[str]] = None
) -> TrainParams:
    """TrainParams from the options (all of them, or only those named in `only`, on top of base)."""
    values = {field: kw[opt] for opt, field in TP_OPTIONS.items() if only is None or opt in only}
    merged = {**(base.to_dict() if base is not None else {}), **values}
    if merged.get("schedule", "constant") != "constant" and not merged.get("decay_steps"):
        merged["decay_steps"] = steps
    return TrainParams(**merged)


def _optimizer(net: Module, kw: Dict[str, Any], steps: int) -> Optimizer:
    """The optimizer the options describe."""
    tp = _train_params(kw, steps)
    kind = kw["opt_kind"]
    beta = kw["beta2"] if kind == "adam" else kw["beta"]
    return Optimizer(
        kind,
        tp,
        net.param_count(),
        momentum=kw["momentum"],
        beta=beta,
        beta1=kw["beta1"],
        eps=kw["eps"],
        sim_penalty=kw["similarity_penalty"],
    )


# ---- resumed runs ----


def _resume(kw: Dict[str, Any], explicit: Set[str]) -> Optional[Tuple[Any, ...]]:
    """Everything a resumed run needs: the model file's state, its stored settings, and what the
    command line changes (with a note when that makes the result differ from an uninterrupted run)."""
    src = Path(kw["resume"])
    for fixed in ("net_text", "net_file", "arch", "input_shape", "init_scale"):
        if fixed in explicit:
            raise CliError(
                f"--{fixed.replace('_text', '').replace('_file', '').replace('_', '-')} cannot be used "
                f"with --resume: the model file fixes the network and its initial weights"
            )
    out = src if kw["output"] is None else Path(kw["output"])
    if out.resolve() != src.resolve():
        check_output(out, kw["force"], "model file")
    ck = load_model(src)
    net = ck.net
    stored = ck.metadata.get("train") or {}
    # a model without a run of its own (imported) starts one: the command line's settings and the recorded loss
    settings = RunSettings.from_dict(stored) if stored else _new_run_settings(kw, ck.metadata.get("loss"))
    changed, data_changed = _apply_run_options(settings, kw, explicit)
    if not stored:
        changed = []  # nothing was saved to differ from
    source = open_source(
        settings.data, settings.seed, settings.val if settings.data.path else 0.0, classes=class_names(ck.metadata)
    )
    check_widths(net.n_in, net.n_out, source, f"the network in {src}")
    steps = input_steps(ck.metadata, net.n_in)
    if "normalize" in explicit and not steps:
        raise CliError(
            f"--normalize cannot be added when resuming: {src} was trained on raw inputs; start a new run with it"
        )
    source = _standardized(source, steps)
    loss = _loss(settings.loss if "loss_name" not in explicit else kw["loss_name"], net)
    changed += ["--loss"] if str(loss) != settings.loss and stored else []
    settings.loss = str(loss)
    settings.steps = _total_steps(kw, source, settings.batch, settings.steps or None)
    if "epochs" in explicit:
        settings.epochs = kw["epochs"]
    opt, opt_changes = _resumed_optimizer(ck.optimizer, net, kw, explicit, settings.steps)
    if stored:
        changed += opt_changes
    else:
        note(
            f"note: {src} has no training run of its own: a new one starts from its weights "
            f"({opt.kind}, loss {settings.loss}{', as recorded' if ck.metadata.get('loss') else ''})"
        )
    start = int(stored.get("batches", opt.step))
    crc = stored.get("data_crc")
    if crc is not None and not data_changed and settings.data.fingerprint() != crc:
        changed.append(f"the contents of {settings.data.path}")
    if changed:
        note(
            f"note: {', '.join(dict.fromkeys(changed))} differ from the saved run: training continues, but not "
            f"exactly as an uninterrupted run would have"
        )
    if start >= settings.steps:
        note(
            f"{src} has already trained {start} of {settings.steps} steps: nothing to do "
            f"(give a larger --steps or --epochs to train further)"
        )
        return None
    return net, opt, loss, source, settings, out, start, _remembered(source, ck.metadata)


def _new_run_settings(kw: Dict[str, Any], loss: Optional[str]) -> RunSettings:
    """The settings of a first run on a model that has none (imported): the options' values (their defaults
    unless given) and the loss the model records (else auto)."""
    return RunSettings(
        loss=loss or "auto",
        batch=kw["batch"],
        threads=kw["threads"],
        seed=kw["seed"],
        val=kw["val"],
        init_scale=kw["init_scale"],
        eval_every=kw["eval_every"],
        log_every=kw["log_every"],
    )


def _apply_run_options(settings: RunSettings, kw: Dict[str, Any], explicit: Set[str]) -> Tuple[List[str], bool]:
    """Put the explicitly given data and run options into the stored settings. Returns what changed and
    whether the data source itself (the file, its labels file or the problem) changed."""
    changed, data_changed = _apply_data_options(settings, kw, explicit)
    for name in RUN_OPTIONS:
        if name in explicit and getattr(settings, name) != kw[name]:
            if name not in ("eval_every", "log_every"):
                changed.append(f"--{name.replace('_', '-')}")
            setattr(settings, name, kw[name])
    if not settings.data.given:
        raise CliError(f"{kw['resume']} does not say what it was trained on: give --data or --problem")
    return changed, data_changed


def _apply_data_options(settings: RunSettings, kw: Dict[str, Any], explicit: Set[str]) -> Tuple[List[str], bool]:
    """The data options of a resumed run: --data or --problem names a new source (with the other data
    options as given); any other data option alone changes only that setting of the stored source.
    Returns (the options whose values differ from the saved run, whether the source itself changed)."""
    given = pop_data_options(kw)
    keys = explicit & set(DATA_KEYS)
    if not keys:
        return [], False
    old = settings.data
    if keys & {"data_path", "problem"}:
        new = given
    else:
        new = replace(old, **{DATA_FIELDS[k]: getattr(given, DATA_FIELDS[k]) for k in keys})
    settings.data = new
    changed = [option for option, fields in DATA_CHANGES if any(getattr(new, f) != getattr(old, f) for f in fields)]
    source_changed = any(getattr(new, f) != getattr(old, f) for f in ("problem", "path", "labels"))
    return changed, source_changed


def _resumed_optimizer(
    opt: Optional[Optimizer], net: Module, kw: Dict[str, Any], explicit: Set[str], steps: int
) -> Tuple[Optimizer, List[str]]:
    """The saved optimizer, with explicitly given TrainParams options applied; the kind and the
    coefficients cannot change (the saved state belongs to them)."""
    if opt is None:
        return _optimizer(net, kw, steps), ["the optimizer (the model file has none)"]
    cfg = opt.config()
    stored_coeffs = {
        "momentum": cfg["momentum"],
        "beta": cfg["beta"] if opt.kind != "adam" else None,
        "beta2": cfg["beta"] if opt.kind == "adam" else None,
        "beta1": cfg["beta1"],
        "eps": cfg["eps"],
        "similarity_penalty": cfg["sim_penalty"],
    }
    if "opt_kind" in explicit and kw["opt_kind"] != opt.kind:
        raise CliError(
            f"--opt cannot change when resuming: the saved state belongs to {opt.kind}; start a new run instead"
        )
    for name in COEFF_OPTIONS:
        if name in explicit and stored_coeffs.get(name) is not None and kw[name] != stored_coeffs[name]:
            raise CliError(
                f"--{name.replace('_', '-')} cannot change when resuming ({opt.kind} was saved with "
                f"{stored_coeffs[name]:g}); start a new run instead"
            )
    tp_given = explicit & set(TP_OPTIONS)
    if not tp_given:
        return opt, []
    new = _train_params(kw, steps, opt.params, tp_given)
    if new == opt.params:
        return opt, []
    opt.params = new
    return opt, [f"--{n.replace('_', '-')}" for n in sorted(tp_given)]


# ---- output ----


def _open_log(path: Optional[str], force: bool, resuming: bool, every: int) -> Optional[Recorder]:
    """The JSON-lines recorder, writing a step record every `every` steps (appending when a resumed
    run continues its log)."""
    if not path:
        return None
    p = Path(path)
    if resuming and p.exists():
        return Recorder(p, every=every, append=True)
    check_output(p, force, "log")
    return Recorder(p, every=every)


def _summary(result: Any, settings: RunSettings, source: Source, opt: Optimizer, out: Path) -> None:
    """What the run achieved, on stdout."""
    parts = [
        f"trained {result.batches} steps on {source.name} ({opt.kind}, {settings.loss})",
        f"loss {result.loss:.4g}",
    ]
    if "accuracy" in result.val:
        parts.append(f"validation accuracy {result.val['accuracy']:.1%}")
    elif "loss" in result.val:
        parts.append(f"validation loss {result.val['loss']:.4g}")
    click.echo(": ".join(parts[:1]) + ": " + ", ".join(parts[1:]))
    click.echo(f"saved {out}")
    if isinstance(source, FileSource) and source.val is None:
        why = "--val 0" if settings.val == 0 else f"{len(source.full)} samples are too few for a {settings.val:g} split"
        note(f"note: no validation split ({why}): the numbers above are training numbers")
