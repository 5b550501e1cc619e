"""The command-line options that name a data source (--data, --problem and the per-format settings),
turned into a mcutrain.sources.DataSettings."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Dict, Optional

import click

from mcutrain.sources import DataSettings


def data_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """The options that name a data source (--data, --problem and the per-format settings)."""
    opts = [
        click.option(
            "--data",
            "data_path",
            type=click.Path(),
            default=None,
            help="Data file: .csv, .npz or IDX images (MNIST format; give --labels); with --features, raw windows: "
            "a folder with a subfolder of WAV files per label, or .npz / .csv windows.",
        ),
        click.option(
            "--problem",
            default=None,
            help="Built-in problem instead of a file: parityN (e.g. parity8), modaddN (e.g. modadd10) or axplusb.",
        ),
        click.option(
            "--inputs",
            default=None,
            help="CSV input columns: '0-19', '1,3,5' or header names [default: all but the targets].",
        ),
        click.option("--targets", default=None, help="CSV target columns [default: the last one]."),
        click.option(
            "--labels", type=click.Path(dir_okay=False), default=None, help="IDX labels file that goes with IDX images."
        ),
        click.option("--x-key", default="x", show_default=True, help="NPZ array with the inputs."),
        click.option("--y-key", default="y", show_default=True, help="NPZ array with the targets."),
        click.option("--classify", is_flag=True, help="Targets are integer class labels: make them one-hot."),
        click.option(
            "--features",
            default=None,
            help="The data are raw sensor windows: compute these features (e.g. 'kws', 'mfcc:rate=8000,...', "
            "'motion:axes=3,...'; see mcutrain.features). The model keeps the pipeline and its normalisation.",
        ),
    ]
    for o in reversed(opts):
        f = o(f)
    return f


def settings_from_options(
    data_path: Optional[str],
    problem: Optional[str],
    inputs: Optional[str],
    targets: Optional[str],
    labels: Optional[str],
    x_key: str,
    y_key: str,
    classify: bool,
    features: Optional[str] = None,
) -> DataSettings:
    """A DataSettings from data_options' values (file paths made absolute, so a resumed run finds them)."""
    return DataSettings(
        problem=problem,
        path=str(Path(data_path).resolve()) if data_path else None,
        inputs=inputs,
        targets=targets,
        labels=str(Path(labels).resolve()) if labels else None,
        x_key=x_key,
        y_key=y_key,
        classify=classify,
        features=features,
    )


DATA_KEYS = ("data_path", "problem", "inputs", "targets", "labels", "x_key", "y_key", "classify", "features")


def pop_data_options(kw: Dict[str, Any]) -> DataSettings:
    """Take data_options' values out of a command's keyword arguments."""
    return settings_from_options(*(kw.pop(k) for k in DATA_KEYS))
