"""The errors mcutrain raises for its users. Each message is written for a person: it says what was wrong
and what to do. They all derive from McuTrainError, so a program (and the command line) can tell them from
bugs; each also keeps the built-in base it had (ValueError or RuntimeError)."""

from __future__ import annotations


class McuTrainError(Exception):
    """Base of every error whose message is meant for the user."""


class ShapeError(McuTrainError, ValueError):
    """A network whose layer sizes do not chain, or an input of the wrong shape or dtype."""


class ConfigError(McuTrainError, ValueError):
    """An optimizer or training setting out of range."""


class TrainingError(McuTrainError, RuntimeError):
    """Training cannot go on (a loss or gradient that is not finite); the parameters are left as they were."""


class ArchitectureError(McuTrainError, ValueError):
    """A network architecture (plain data, an inline string or a file) that cannot be built; the message
    says which part and why."""


class ModelFileError(McuTrainError, ValueError):
    """A model file that cannot be read: wrong kind of file, truncated, corrupt or mismatched."""


class DataError(McuTrainError, ValueError):
    """A data file or data source that cannot be used; the message names the file and what is wrong."""


class ImportModelError(McuTrainError, ValueError):
    """A model from another framework (an ONNX, Keras or scikit-learn model) that mcutrain cannot import:
    the message names the node or layer and says what mcutrain supports instead."""


class MissingExtraError(McuTrainError, RuntimeError):
    """An optional dependency is not installed; the message says which `pip install mcutrain[...]` adds it."""


class FleetError(McuTrainError, RuntimeError):
    """A fleet that cannot run: a bad fleet file, a device that runs another model, Flower missing, or no
    round that could be completed; the message says what to change."""
