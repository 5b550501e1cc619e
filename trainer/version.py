"""mcutrain's version (the package, the model files it writes and the code it generates carry it)."""

__version__ = "0.1.0"
