"""mcutrain: train small fixed-size f32 networks on the host with the same C core the firmware runs.

    import mcutrain as mct
    from mcutrain import Sequential, layers as L, losses, optim

The layers of the package, bottom up (each imports only the ones below it):
    mcutrain             layers, networks, losses, optimizers, training, model files, data
    mcutrain.exporter    device model, quantization, C code, memory plan, projects, simulators, device client
    mcutrain.cli         the `mcutrain` command line
"""
from . import layers, losses, optim, problems
from .compose import LR, Residual, Sequential
from .errors import (ArchitectureError, ConfigError, DataError, McuTrainError, ModelFileError, ShapeError,
                     TrainingError)
from .modelfile import Checkpoint, load_model, save_model
from .module import Gradients, Module, Trace
from .optim import Optimizer, TrainParams
from .train import train_batch, train_batch_parallel, train_step
from .version import __version__

__all__ = ["__version__", "layers", "losses", "optim", "problems", "Sequential", "Residual", "LR", "Module",
           "Trace", "Gradients", "Checkpoint", "load_model", "save_model", "Optimizer", "TrainParams",
           "train_batch", "train_batch_parallel", "train_step", "McuTrainError", "ShapeError", "ConfigError",
           "TrainingError", "ArchitectureError", "ModelFileError", "DataError"]
