"""mcutrain's host trainer: layers, Sequential, losses, optimizers and training loops, all
running on the same C core (firmware/core) as the firmware."""
__version__ = "0.1.0"

from . import layers, losses, optim, problems  # noqa: E402
from .compose import LR, Residual, Sequential  # noqa: E402
from .module import Gradients, Module, ShapeError, Trace  # noqa: E402
from .modelfile import Checkpoint, ModelFileError, load_model, save_model  # noqa: E402
from .optim import ConfigError, Optimizer, TrainParams  # noqa: E402
from .train import TrainingError, train_batch, train_batch_parallel, train_step  # noqa: E402

__all__ = ["layers", "losses", "optim", "problems", "Sequential", "Residual", "LR", "Module", "Trace",
           "Gradients", "ShapeError", "ModelFileError", "Checkpoint", "load_model", "save_model", "ConfigError",
           "Optimizer", "TrainParams", "TrainingError", "train_batch", "train_batch_parallel", "train_step"]
