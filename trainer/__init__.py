"""mcutrain: train small fixed-size f32 networks on the host with the same C core the firmware runs.

    import mcutrain as mct
    from mcutrain import Sequential, layers as L, losses, optim

The layers of the package, bottom up (each imports only the ones below it):
    mcutrain             layers, networks, losses, optimizers, training, model files, data
    mcutrain.exporter    device model, quantization, C code, memory plan, projects, simulators, device client
    mcutrain.cli         the `mcutrain` command line

The names below are loaded on first use (PEP 562), so `import mcutrain.cli` starts without numpy or the
C core, and the command line can answer Ctrl-C from its first moment.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any, Dict, List

from .version import __version__

# public name -> the submodule that defines it (a submodule itself where the two are equal)
_EXPORTS: Dict[str, str] = {
    "layers": "layers",
    "losses": "losses",
    "optim": "optim",
    "problems": "problems",
    "Sequential": "compose",
    "Residual": "compose",
    "LR": "compose",
    "Module": "module",
    "Trace": "module",
    "Gradients": "module",
    "Checkpoint": "modelfile",
    "load_model": "modelfile",
    "save_model": "modelfile",
    "Optimizer": "optim",
    "TrainParams": "optim",
    "train_batch": "train",
    "train_batch_parallel": "train",
    "train_step": "train",
    "fit": "train",
    "shuffle_order": "train",
    "FitProgress": "train",
    "FitResult": "train",
    "McuTrainError": "errors",
    "ShapeError": "errors",
    "ConfigError": "errors",
    "TrainingError": "errors",
    "ArchitectureError": "errors",
    "ModelFileError": "errors",
    "DataError": "errors",
    "ImportModelError": "errors",
    "MissingExtraError": "errors",
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    """Load a public name's submodule on first use."""
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = importlib.import_module(f".{_EXPORTS[name]}", __name__)
    value = module if name == _EXPORTS[name] else getattr(module, name)
    globals()[name] = value
    return value


def __dir__() -> List[str]:
    return sorted(set(globals()) | set(__all__))


if TYPE_CHECKING:  # what the names are, for type checkers and editors
    from . import layers, losses, optim, problems
    from .compose import LR, Residual, Sequential
    from .errors import (
        ArchitectureError,
        ConfigError,
        DataError,
        ImportModelError,
        McuTrainError,
        MissingExtraError,
        ModelFileError,
        ShapeError,
        TrainingError,
    )
    from .modelfile import Checkpoint, load_model, save_model
    from .module import Gradients, Module, Trace
    from .optim import Optimizer, TrainParams
    from .train import FitProgress, FitResult, fit, shuffle_order, train_batch, train_batch_parallel, train_step
