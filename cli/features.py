"""`mcutrain features`: what a feature pipeline makes of a recording (printed, and plotted as a PNG)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import click
import numpy as np

from .common import CliError, example, note, write_output


@click.command("features")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--features", "spec_text", default=None, help="The pipeline, e.g. 'kws' or 'mfcc:rate=8000,...'.")
@click.option(
    "--model", type=click.Path(exists=True, dir_okay=False), default=None, help="Use this model file's pipeline."
)
@click.option("--index", default=0, show_default=True, help="Which window of a .csv / .npz file.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None, help="Write a PNG heat map.")
@click.option("--allow-clipped", is_flag=True, help="Accept a clipped recording.")
@click.option("--force", is_flag=True, help="Replace an existing PNG.")
@example(
    """
mcutrain features yes/0001.wav --features kws --plot yes.png
mcutrain features walk.npz --model gestures.mct --index 3
"""
)
def features(
    file: str,
    spec_text: Optional[str],
    model: Optional[str],
    index: int,
    plot_path: Optional[str],
    allow_clipped: bool,
    force: bool,
) -> None:
    """Print (and plot) the features a pipeline computes from one recording: a WAV file, or one raw window of a
    .csv / .npz file (the layouts of `mcutrain train --features`)."""
    from mcutrain.featdata import FrontEnd, raw_windows
    from mcutrain.features import FeatureSpec
    from mcutrain.modelfile import load_model
    from mcutrain.plot import features_png
    from mcutrain.wav import load_window

    if (spec_text is None) == (model is None):
        raise CliError("give the pipeline: --features SPEC or --model MODEL (one of them)")
    if model is not None:
        d = load_model(model).metadata.get("frontend")
        fe = FrontEnd.from_dict(d) if d else None
        if fe is None or fe.spec is None:
            raise CliError(f"{model} has no feature pipeline (it was not trained with --features)")
        spec = fe.spec
    else:
        spec = FeatureSpec.parse(spec_text or "")
    p = Path(file)
    if p.suffix.lower() == ".wav":
        window = load_window(p, spec, allow_clipped=allow_clipped)
    else:
        x, _, _ = raw_windows(p, spec)
        if not 0 <= index < len(x):
            raise CliError(f"{p} has {len(x)} windows: --index must be 0 .. {len(x) - 1}")
        window = x[index]
    values = spec.compute(window)
    rows, per = values.shape
    motion = spec.kind == "motion"
    click.echo(f"{p}: {spec.text()}")
    click.echo(f"{rows} {'axes' if motion else 'frames'} x {per} values ({rows * per} features)")
    names = spec.names()
    with np.printoptions(precision=4, suppress=True, linewidth=120):
        for r in range(rows):
            label = f"axis {r}" if motion else f"frame {r}"
            click.echo(f"{label:>9}: " + " ".join(f"{v:9.4f}" for v in values[r]))
    if motion:
        click.echo("columns: " + ", ".join(n.split(".", 1)[1] for n in names[:per]))
    if plot_path:
        what = "mfcc" if spec.kind == "mfcc" else ("mel band" if spec.kind == "logmel" else "feature")
        png = features_png(values, f"{p.name}: {spec.text()}", "axis" if motion else "frame", what)
        write_output(Path(plot_path), png, force, "plot")
        note(f"wrote {plot_path}")
